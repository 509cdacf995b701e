"""Whole-buffer scans and sums the communicator runs before and between codec calls.

* :func:`max_abs`: the largest magnitude in a buffer, +Inf if it holds a
  NaN or an infinity. One value decides, for every rank at once (after a
  MAX allreduce), whether a buffer can be compressed safely: no NaN/Inf,
  and sums of ``p`` such values cannot overflow.
* :func:`add_into`: ``acc += x`` on the rank's thread budget.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .launch import run_kernel

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["CHUNK", "add_into", "add_into_kernel", "max_abs", "max_abs_bits"]

#: values per parallel work item
CHUNK = 1 << 16


@njit(parallel=True, cache=True, nogil=True)
def max_abs_bits(u, mask):
    """max over i of ``u[i] & mask``: the bit pattern of the largest magnitude.

    ``u`` is the float buffer viewed as unsigned integers of its width and
    ``mask`` clears the sign bit. IEEE magnitudes order like their bit
    patterns, with Inf and NaN above every finite value, so integer max
    (which vectorizes, unlike a NaN-aware float max) finds both.
    """
    n = u.size
    nchunks = (n + CHUNK - 1) // CHUNK
    part = np.zeros(max(nchunks, 1), dtype=u.dtype)
    for c in prange(nchunks):
        lo = c * CHUNK
        hi = min(lo + CHUNK, n)
        m = u.dtype.type(0)
        v = u[lo:hi]  # indices from 0: no negative-index check, so the loop vectorizes
        for i in range(v.size):
            m = max(m, v[i] & mask)
        part[c] = m
    return part.max()


def max_abs(x: np.ndarray) -> float:
    """max |x| as a float64, +Inf when ``x`` holds a NaN or an Inf (0.0 if empty)."""
    serial = x.size <= CHUNK
    if x.dtype == np.float32:
        bits = run_kernel(max_abs_bits, x.view(np.uint32), np.uint32(0x7FFFFFFF), serial=serial)
        v = float(np.array(bits, dtype=np.uint32).view(np.float32))
    else:
        bits = run_kernel(max_abs_bits, x.view(np.uint64), np.uint64(0x7FFFFFFFFFFFFFFF),
                    serial=serial)
        v = float(np.array(bits, dtype=np.uint64).view(np.float64))
    return v if v <= np.finfo(np.float64).max else float("inf")


def add_into(acc: np.ndarray, x: np.ndarray) -> None:
    """``acc += x`` on the rank's thread budget (``kernels/launch.py``)."""
    run_kernel(add_into_kernel, acc, x, serial=acc.size <= CHUNK)


@njit(parallel=True, cache=True, nogil=True)
def add_into_kernel(acc, x):
    """``acc[i] += x[i]`` for every i (same length, same dtype)."""
    n = acc.size
    nchunks = (n + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        lo = c * CHUNK
        hi = min(lo + CHUNK, n)
        a, b = acc[lo:hi], x[lo:hi]  # indices from 0: the loop vectorizes (see max_abs_bits)
        for i in range(a.size):
            a[i] += b[i]
