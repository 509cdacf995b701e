"""Nonblocking transfers that move while backward computes: one helper thread sees them done.

MPI progresses a plain nonblocking collective only inside MPI calls (MPICH
has no progress thread by default), so an ``Iallreduce`` started during
backward would mostly wait for the ``Wait`` after it: no overlap for plain
buckets. :class:`Progress` hands every started request to one helper
thread, in start order, while the caller's thread computes. A plain MPI
request it tests until it completes, sleeping 20 to 200 us between tests
(:func:`mpicomp.algorithms.common.poll`, so the thread costs little of a
core that ranks share). An mpicomp request (compressed or cast, completed
by mpicomp's own worker thread) it waits for without MPI calls
(:meth:`mpicomp.requests.Request.wait_background`): polling one cost about
0.9 ms of a core per rank and step in the transformer study at 1 Gbit/s,
for nothing. While it waits, a plain request started after it moves
through the MPI calls of mpicomp's worker thread, which polls its own
transfers (MPICH's progress is the whole process's).
"""
from __future__ import annotations

import concurrent.futures
from typing import Any

from ..algorithms.common import poll
from ..requests import Request

__all__ = ["Progress"]


class Progress:
    def __init__(self) -> None:
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None

    def watch(self, req: Any) -> concurrent.futures.Future[Any]:
        """Test ``req`` on the helper thread until it completes (an mpicomp request: wait
        for its work); the future of that (it raises what a test raised; an mpicomp
        request's own ``Wait`` raises what its work raised). MPI forbids two threads
        completing one request at once: wait for the future before the caller's own
        ``Wait``, which then returns at once."""
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="mpicomp-progress")
        if isinstance(req, Request):  # (its work completes it: nothing to drive)
            return self._thread.submit(req.wait_background)
        return self._thread.submit(poll, req.Test, True)
