"""Error feedback's element-wise passes over a host bucket (``mpicomp.training.feedback``).

The host counterparts of ``feedback_cuda``: the check that what compression
lost is finite, and the residual update ``out = clip(a * prev + b * (x - rt),
-lim, lim)``, each one pass over the bucket on the rank's thread budget, in
the arrays' dtype and in NumPy's order of operations (the same bits as the
NumPy expressions they replace, without their temporaries).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .launch import run_kernel
from .scan_cpu import CHUNK

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["count_nonfinite_difference", "residual"]


def count_nonfinite_difference(x: np.ndarray, rt: np.ndarray) -> int:
    """How many ``x[i] - rt[i]`` are NaN or Inf (1-D, same length and dtype)."""
    flags = np.zeros((x.size + CHUNK - 1) // CHUNK, np.int64)
    run_kernel(nonfinite_difference_kernel, x, rt, flags, serial=x.size <= CHUNK)
    return int(flags.sum())


def residual(x: np.ndarray, rt: np.ndarray, prev: np.ndarray | None, a: float, b: float,
             lim: float, out: np.ndarray) -> np.ndarray:
    """``out = clip(a * prev + b * (x - rt), -lim, lim)`` (``prev`` None: ``a`` is 0);
    ``out`` may be ``prev``. 1-D arrays of one float dtype."""
    t = x.dtype.type
    has_prev = prev is not None and a != 0
    run_kernel(residual_kernel, x, rt, prev if has_prev else x, has_prev, t(a), t(b),
               t(lim), out, serial=x.size <= CHUNK)
    return out


@njit(parallel=True, cache=True, nogil=True)
def nonfinite_difference_kernel(x, rt, flags):
    """``flags[c]`` = the non-finite ``x[i] - rt[i]`` of chunk ``c``."""
    n = x.size
    for c in prange(flags.size):
        lo = c * CHUNK
        hi = min(lo + CHUNK, n)
        a, b = x[lo:hi], rt[lo:hi]
        bad = 0
        for i in range(a.size):
            d = a[i] - b[i]
            bad += not np.isfinite(d)
        flags[c] = bad


@njit(parallel=True, cache=True, nogil=True)
def residual_kernel(x, rt, prev, has_prev, a, b, lim, out):
    """``out[i] = clip(a * prev[i] + b * (x[i] - rt[i]), -lim, lim)``; without ``has_prev``
    the first term is 0 (``prev`` is then any array of the length), with ``b`` 0 the
    second."""
    n = x.size
    zero = a - a
    nchunks = (n + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        lo = c * CHUNK
        hi = min(lo + CHUNK, n)
        xs, rs, ps, os = x[lo:hi], rt[lo:hi], prev[lo:hi], out[lo:hi]
        for i in range(xs.size):
            v = a * ps[i] if has_prev else zero
            if b != zero:  # (b = 0: a non-finite step, whose x - rt is not to be read)
                v = v + b * (xs[i] - rs[i])
            if v > lim:
                v = lim
            elif v < -lim:
                v = -lim
            os[i] = v
