"""CUDA kernels the communicator runs on device buffers between codec calls.

The device counterparts of ``scan_cpu.py`` (and of the small host steps of
the communicator): the largest magnitude of a buffer, ``acc += x`` and the
order-preserving map of 16-bit cast codes used by MAX/MIN.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

__all__ = ["add_into", "max_abs", "max_abs_bits", "order_keys"]


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


def max_abs(x, stream) -> float:
    """max |x| over a flat device array (+Inf for NaN/Inf), with :func:`max_abs_bits` on
    ``stream``; waits for the stream."""
    from .. import cuda_runtime

    if not x.size:
        return 0.0
    wide = np.dtype(x.dtype) == np.float64
    utype, ftype = (np.uint64, np.float64) if wide else (np.uint32, np.float32)
    mask = utype(0x7FFFFFFFFFFFFFFF if wide else 0x7FFFFFFF)
    result = cuda_runtime.as_device(cuda_runtime.empty(1, utype), "result", sync=False)
    result.copy_to_device(np.zeros(1, utype), stream=stream)  # (CuPy's pool: no malloc)
    blocks, threads = cuda_runtime.grid(x.size)
    with cuda_runtime.serialized():
        max_abs_bits[min(blocks, 256), threads, stream](x.view(utype), mask, result)
    bits = result.copy_to_host(stream=stream)
    stream.synchronize()
    v = float(bits.view(ftype)[0])
    return v if v <= np.finfo(np.float64).max else float("inf")
