"""Nonblocking transfers that move while backward computes: one helper thread tests them.

MPI progresses a plain nonblocking collective only inside MPI calls (MPICH
has no progress thread by default), so an ``Iallreduce`` started during
backward would mostly wait for the ``Wait`` after it: no overlap for plain
and cast buckets. :class:`Progress` hands every started request to one
helper thread that tests it until it completes, in start order, sleeping
20 to 200 us between tests (:func:`mpicomp.algorithms.common.poll`, so the
thread costs little of a core that ranks share), while the caller's thread
computes. Compressed requests complete on mpicomp's own worker thread; the
helper merely sees them done.
"""
from __future__ import annotations

import concurrent.futures
from typing import Any

from ..algorithms.common import poll

__all__ = ["Progress"]


class Progress:
    def __init__(self) -> None:
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._watched: list[concurrent.futures.Future[None]] = []

    def watch(self, req: Any) -> concurrent.futures.Future[None]:
        """Test ``req`` on the helper thread until it completes; the future of that. (MPI
        forbids two threads completing one request at once: wait for the future before
        the caller's own ``Wait``, which then returns at once.)"""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="mpicomp-progress")
        future = self._thread.submit(poll, req.Test, True)
        self._watched.append(future)
        return future

    def drain(self) -> None:
        """Wait until every watched request has completed (raises what a test raised)."""
        watched, self._watched = self._watched, []
        for f in watched:
            f.result()

    def forget_done(self) -> None:
        """Drop the futures already waited for by their callers."""
        self._watched = [f for f in self._watched if not f.done()]
