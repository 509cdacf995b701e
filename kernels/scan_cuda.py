"""CUDA kernels the communicator runs on device buffers between codec calls.

The device counterparts of ``scan_cpu.py`` (and of the small host steps of
the communicator): the largest magnitude of a buffer, ``acc += x`` and the
order-preserving map of 16-bit cast codes used by MAX/MIN.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

__all__ = ["add_into", "max_abs_bits", "order_keys"]


@cuda.jit
def max_abs_bits(u, mask, result):
    """``result[0] = max(result[0], max_i u[i] & mask)`` (``u``: the floats as unsigned bits).

    IEEE magnitudes order like their bit patterns, Inf and NaN above every
    finite value (see ``scan_cpu.max_abs_bits``). Grid-stride loop, then
    one atomic max per thread.
    """
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    m = mask ^ mask  # zero of the bits' type
    for i in range(start, u.size, stride):
        v = u[i] & mask
        if v > m:
            m = v
    cuda.atomic.max(result, 0, m)


@cuda.jit
def add_into(acc, x):
    """``acc[i] += x[i]``."""
    i = cuda.grid(1)
    if i < acc.size:
        acc[i] += x[i]


@cuda.jit
def order_keys(codes):
    """Map int16 codes of sign-magnitude floats to keys ordered like the floats, in place.

    Negative codes get their magnitude bits flipped; the map is its own inverse.
    """
    i = cuda.grid(1)
    if i < codes.size:
        c = codes[i]
        if c < 0:
            codes[i] = c ^ np.int16(0x7FFF)
