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
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..threads import budget

__all__ = ["SERIAL_BELOW", "call", "readonly"]

#: kernels on fewer values than this run on one thread (cast kernels)
SERIAL_BELOW = 1 << 16


def call(kernel: Callable[..., Any], *args: Any, serial: bool = False) -> Any:
    """``kernel(*args)`` on one thread when ``serial``, else on at most the rank's budget.

    Numba's thread count is per calling thread; it is restored after the call.
    """
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
