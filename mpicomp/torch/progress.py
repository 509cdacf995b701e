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

    def watch(self, req: Any) -> concurrent.futures.Future[None]:
        """Test ``req`` on the helper thread until it completes; the future of that (it
        raises what a test raised). MPI forbids two threads completing one request at
        once: wait for the future before the caller's own ``Wait``, which then returns at
        once."""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="mpicomp-progress")
        return self._thread.submit(poll, req.Test, True)
