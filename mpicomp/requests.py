"""Nonblocking requests whose completion runs mpicomp's own work (decoding, algorithms).

A :class:`Request` is an MPI *generalized request* (``MPI.Grequest``): MPI
itself considers it complete once mpicomp's background work has finished
and called ``Complete()``, so ``MPI.Request.Waitall``/``Testall``/``Waitany``
accept lists that mix mpicomp requests with plain mpi4py ones. Only the
request's own ``Wait``/``Test`` and :meth:`Request.Waitall`/``Testall``
re-raise an exception raised by the background work: MPICH ignores the
error a generalized request reports, so through MPI's own functions a
failed request simply completes. Wait through mpicomp where failures matter.

Background work runs either on a communicator's single worker thread (the
collectives, which must keep their order) or on a thread of its own (a
receive waiting for its message).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from mpi4py import MPI

from . import failfast

__all__ = ["Request"]


class _State:
    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.done = threading.Event()


class Request(MPI.Grequest):
    """A generalized request completed by mpicomp's background work."""

    _state: _State
    #: what the call did (a :class:`mpicomp.stats.Recorder`), for requests that record it
    record: Any = None

    @property
    def compressed(self) -> bool:
        """Once complete: True when the call's data went through a codec, False when it
        went to plain MPI (NaN/Inf on some rank, an agreement that said no, ...)."""
        return self.record is not None and self.record.path == "compressed"

    @classmethod
    def start(cls, work: Callable[[], None], executor: Executor | None = None,
              status: MPI.Status | None = None) -> Request:
        """Run ``work`` in the background (on ``executor``, or a new thread); return its request.

        ``status``: what the request's ``Wait``/``Test`` report once it completes (a
        receive's source, tag and count, which ``work`` fills in); None: a collective's
        empty status.
        """
        state = _State()

        def query(out: MPI.Status) -> None:
            if status is None or state.error is not None:
                out.source, out.tag = MPI.ANY_SOURCE, MPI.ANY_TAG
                out.Set_elements(MPI.BYTE, 0)
            else:
                out.source, out.tag = status.source, status.tag
                out.Set_elements(MPI.BYTE, status.Get_elements(MPI.BYTE))
            out.Set_cancelled(False)
            out.error = MPI.SUCCESS if state.error is None else MPI.ERR_OTHER

        greq = MPI.Grequest.Start(query, None, None)
        req = cls(greq)
        req._state = state

        def run() -> None:
            try:
                work()
            except BaseException as exc:  # re-raised by Wait/Test in the caller's thread
                state.error = exc
                failfast.unobserved(id(state), exc)
            finally:
                try:
                    greq.Complete()
                finally:  # (after Complete: a waiter on the event finds the request done)
                    state.done.set()

        if executor is None:
            threading.Thread(target=run, name="mpicomp-request", daemon=True).start()
        else:
            executor.submit(run)
        return req

    def wait_background(self, timeout: float | None = None) -> bool:
        """Block until the background work has finished and MPI holds the request
        complete (True), or ``timeout`` seconds pass (False), without an MPI call and
        without a core spent: a helper thread's wait, after which the request's own
        ``Wait`` returns at once (it frees the request and re-raises what the work
        raised)."""
        return self._state.done.wait(timeout)

    def _raise(self) -> None:
        state = getattr(self, "_state", None)
        if state is not None and state.error is not None:
            error, state.error = state.error, None
            failfast.observed(id(state))
            raise error

    def Wait(self, status: MPI.Status | None = None) -> bool:  # noqa: N802 - mpi4py's name
        try:
            super().Wait(status)
        except MPI.Exception:
            self._raise()
            raise
        self._raise()
        return True

    def Test(self, status: MPI.Status | None = None) -> bool:  # noqa: N802
        try:
            done = super().Test(status)
        except MPI.Exception:
            self._raise()
            raise
        if done:
            self._raise()
        return done

    def wait(self, status: MPI.Status | None = None) -> None:
        self.Wait(status)

    def test(self, status: MPI.Status | None = None) -> tuple[bool, None]:
        return self.Test(status), None

    @staticmethod
    def Waitall(requests: Sequence[MPI.Request], statuses: Any = None) -> bool:  # noqa: N802
        """Wait for all ``requests`` (mpicomp's and plain mpi4py's); re-raise the first failure."""
        reqs = list(requests)
        failure: MPI.Exception | None = None
        try:
            MPI.Request.Waitall(reqs, statuses)
        except MPI.Exception as exc:
            failure = exc
        for r in reqs:
            if isinstance(r, Request):
                r._raise()
        if failure is not None:  # a plain request failed
            raise failure
        return True

    @staticmethod
    def Testall(requests: Sequence[MPI.Request], statuses: Any = None) -> bool:  # noqa: N802
        reqs = list(requests)
        failure: MPI.Exception | None = None
        try:
            done = MPI.Request.Testall(reqs, statuses)
        except MPI.Exception as exc:
            done, failure = True, exc
        if done:
            for r in reqs:
                if isinstance(r, Request):
                    r._raise()
        if failure is not None:
            raise failure
        return done
