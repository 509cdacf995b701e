"""Calling the parallel (``prange``) kernels: on this rank's thread budget, small calls on one.

A ``parallel=True`` kernel wakes every Numba worker thread even when there
is one work item. That costs microseconds on an idle machine, and much more
when the cores are oversubscribed (several MPI ranks per core, or other
jobs): with the default OpenMP threading layer, woken workers spin while
they wait. Small calls therefore run with one thread. (Setting the thread
count inside the kernel instead would stop Numba from caching it.)

Numba compiles a kernel separately for read-only and writable arrays;
``readonly`` gives inputs one type, so that a read-only buffer (say, from
``bytes``) does not trigger a second compilation.

Every call runs on at most :func:`mpicomp.threads.budget` threads (the
usable cores divided among the ranks of the job on this node), whatever
Numba's own thread count is.

The first call of a kernel with new argument types compiles it, or loads
it from Numba's on-disk cache. Ranks of one node would all compile the
same kernel at once (each taking the cores the others need); that first
call therefore holds a node-wide file lock, one per cache folder, so one
rank compiles and caches while the others wait, then load its machine
code. Processes that cache in different folders (``NUMBA_CACHE_DIR``)
cannot load each other's code, so they do not wait for each other
(docs/decisions.md, *One compile lock for every Numba cache folder*).
(``python -m mpicomp warmup`` fills the cache before any job.)
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..threads import budget

__all__ = ["SERIAL_BELOW", "compile_lock", "lock_path", "readonly", "run_kernel"]

#: kernels on fewer values than this run on one thread (cast kernels)
SERIAL_BELOW = 1 << 16


#: (kernel, argument types) this process has called, so compiled or loaded
_ready: set[tuple[Any, ...]] = set()


def _types(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((a.dtype.num, a.ndim, a.flags.writeable, a.flags.c_contiguous)
                 if isinstance(a, np.ndarray) else type(a) for a in args)


@contextlib.contextmanager
def compile_lock() -> Iterator[None]:
    """Held by one process of this user on this node at a time per Numba cache folder
    (nothing, if no lock file can be made)."""
    path = lock_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def lock_path() -> str:
    """The file :func:`compile_lock` locks: ``$TMPDIR/mpicomp-compile-UID.lock`` for Numba's
    default cache (beside each kernel file), ``...-UID-HASH.lock`` for ``NUMBA_CACHE_DIR``'s
    folder."""
    import numba

    folder = numba.config.CACHE_DIR
    tag = "-" + hashlib.sha1(os.path.abspath(folder).encode()).hexdigest()[:12] if folder else ""
    return os.path.join(tempfile.gettempdir(), f"mpicomp-compile-{os.getuid()}{tag}.lock")


def run_kernel(kernel: Callable[..., Any], *args: Any, serial: bool = False) -> Any:
    """``kernel(*args)`` on one thread when ``serial``, else on at most the rank's budget.

    Numba's thread count is per calling thread; it is restored after the call.
    The first call with new argument types holds :func:`compile_lock`.
    """
    key = (kernel, *_types(args))
    if key in _ready:
        return _call(kernel, args, serial)
    with compile_lock():
        result = _call(kernel, args, serial)
    _ready.add(key)
    return result


def _call(kernel: Callable[..., Any], args: tuple[Any, ...], serial: bool) -> Any:
    import numba  # loaded by the kernel's own module already; imported here to keep launch light

    nthreads = numba.get_num_threads()
    want = 1 if serial else min(nthreads, budget())
    if want == nthreads:
        return kernel(*args)
    numba.set_num_threads(want)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(nthreads)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the same memory)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v
