"""Fail fast: an exception that escapes on one rank ends the whole job, instead of a hang.

Under ``mpiexec`` a rank that dies of an uncaught exception leaves the
other ranks waiting in their next collective forever. When mpicomp is
imported in a job of more than one rank it therefore installs a
``sys.excepthook`` that prints the traceback as usual and then calls
``MPI.COMM_WORLD.Abort(1)`` (as ``python -m mpi4py`` does), so the job
ends within seconds with a non-zero exit status.

Errors of mpicomp's background work (nonblocking calls) are re-raised by
``Wait``/``Test`` in the caller's thread; one that nothing waited for is
printed and aborts the job when the interpreter exits.

Opt out with ``MPICOMP_ABORT_ON_ERROR=0`` (for instance where another
layer already aborts, or a single rank may fail on purpose).
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
from types import TracebackType

from mpi4py import MPI

__all__ = ["ENV", "abort_job", "enabled", "install", "observed", "unobserved"]

ENV = "MPICOMP_ABORT_ON_ERROR"
ABORT_STATUS = 1

_installed = False
_lock = threading.Lock()
_pending: dict[int, BaseException] = {}  # background errors nothing has waited for yet


def enabled() -> bool:
    """True unless ``MPICOMP_ABORT_ON_ERROR`` says no (0, no, false, off)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def install() -> None:
    """Install the hooks once, in a job of more than one rank (see the module docstring)."""
    global _installed
    if _installed or not enabled() or MPI.COMM_WORLD.Get_size() < 2:
        return
    _installed = True
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            previous(kind, exc, tb)
        finally:
            abort_job(f"an uncaught {kind.__name__} on rank {MPI.COMM_WORLD.Get_rank()}")

    sys.excepthook = hook
    atexit.register(_check_pending)


def unobserved(key: int, exc: BaseException) -> None:
    """Note a background error (``key``: its request's state) until something waits for it."""
    with _lock:
        _pending[key] = exc


def observed(key: int) -> None:
    """The background error noted under ``key`` was re-raised to the caller."""
    with _lock:
        _pending.pop(key, None)


def _check_pending() -> None:
    with _lock:
        errors = list(_pending.values())
        _pending.clear()
    if not errors or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    for exc in errors:
        print("mpicomp: a nonblocking operation failed and nothing waited for it:",
              file=sys.stderr)
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    abort_job("a failed nonblocking operation nothing waited for")


#: seconds between printing the traceback and the abort, so the launcher forwards it
ABORT_GRACE_S = 0.25


def abort_job(why: str, status: int = ABORT_STATUS) -> None:
    """Flush, say why on stderr, and abort every rank of the job with ``status``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the abort
            pass
    if MPI.Is_initialized() and not MPI.Is_finalized():
        print(f"mpicomp: aborting the job ({why}; set {ENV}=0 to turn this off)",
              file=sys.stderr, flush=True)
        # MPICH's process manager kills every rank at the abort; output still in its pipes
        # is then lost (a CI run once got neither traceback nor this line): give it a moment
        time.sleep(ABORT_GRACE_S)
        MPI.COMM_WORLD.Abort(status)
