"""Calling the parallel (``prange``) kernels: small calls run on one thread.

A ``parallel=True`` kernel wakes every Numba worker thread even when there
is one work item. That costs microseconds on an idle machine, and much more
when the cores are oversubscribed (several MPI ranks per core, or other
jobs): with the default OpenMP threading layer, woken workers spin while
they wait. Small calls therefore run with one thread. (Setting the thread
count inside the kernel instead would stop Numba from caching it.)

Numba compiles a kernel separately for read-only and writable arrays;
``readonly`` gives inputs one type, so that a read-only buffer (say, from
``bytes``) does not trigger a second compilation.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np

__all__ = ["SERIAL_BELOW", "call", "readonly"]

#: kernels on fewer values than this run on one thread (cast kernels)
SERIAL_BELOW = 1 << 16


def call(kernel: Callable[..., Any], *args: Any, serial: bool) -> Any:
    """``kernel(*args)``, on one thread when ``serial`` (restoring the thread count after)."""
    if serial:
        nthreads = numba.get_num_threads()
        if nthreads > 1:
            numba.set_num_threads(1)
            try:
                return kernel(*args)
            finally:
                numba.set_num_threads(nthreads)
    return kernel(*args)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the same memory)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v
