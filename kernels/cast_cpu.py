"""Numba CPU kernels of the ``cast`` codec: float32/float64 to and from 16-bit floats.

Both targets are converted with integer operations on the bit patterns, so
the loops vectorize and detect overflow in the same pass:

* IEEE half (float16): round to nearest even, directly from float32 or
  float64 (one rounding, as NumPy's casts do); subnormal halves supported;
  a finite value at or beyond the overflow threshold (65520) becomes Inf
  and is counted. NaN stays NaN (quiet, sign and top payload bits kept).
* bfloat16: the upper 16 bits of the float32, rounded to nearest even;
  float64 input is first rounded to float32 (hardware conversion, RNE).

Every encoder returns the number of finite inputs that became Inf
(overflow); the codec rejects the buffer when it is not zero. The 16-bit
codes are written through a native ``uint16`` view: on the little-endian
hosts mpicomp supports, that is the little-endian wire format.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .cast_block import bf16_bits, half_bits, half_value

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = [
    "decode_bf16",
    "decode_f16",
    "encode_bf16_from32",
    "encode_bf16_from64",
    "encode_f16_from32",
    "encode_f16_from64",
]

_F64_MAX = np.float64(np.finfo(np.float64).max)


@njit(parallel=True, cache=True, nogil=True)
def encode_f16_from32(src, out):
    """float32 bits (uint32) -> half bits (uint16); returns the overflow count."""
    bad = 0
    for i in prange(src.size):
        h, ovf = half_bits(src[i], 23, 8)
        out[i] = np.uint16(h)
        bad += np.int64(ovf)
    return bad


@njit(parallel=True, cache=True, nogil=True)
def encode_f16_from64(src, out):
    """float64 bits (uint64) -> half bits (uint16); returns the overflow count."""
    bad = 0
    for i in prange(src.size):
        h, ovf = half_bits(src[i], 52, 11)
        out[i] = np.uint16(h)
        bad += np.int64(ovf)
    return bad


@njit(parallel=True, cache=True, nogil=True)
def decode_f16(src, out):
    """half bits (uint16) -> float32 or float64 ``out`` (exact)."""
    for i in prange(src.size):
        out[i] = half_value(src[i])


@njit(parallel=True, cache=True, nogil=True)
def encode_bf16_from32(src, out):
    """float32 bits (uint32) -> bfloat16 bits (uint16); returns the overflow count."""
    bad = 0
    for i in prange(src.size):
        b = np.uint32(src[i])
        h = bf16_bits(b)
        out[i] = np.uint16(h)
        finite = (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
        bad += np.int64(finite and (h & np.uint32(0x7F80)) == np.uint32(0x7F80))
    return bad


@njit(parallel=True, cache=True, nogil=True)
def encode_bf16_from64(src, out):
    """float64 values -> float32 (RNE) -> bfloat16 bits (uint16); returns the overflow count."""
    bad = 0
    for i in prange(src.size):
        x = src[i]
        h = bf16_bits(np.float32(x).view(np.uint32))
        out[i] = np.uint16(h)
        bad += np.int64(abs(x) <= _F64_MAX and (h & np.uint32(0x7F80)) == np.uint32(0x7F80))
    return bad


@njit(parallel=True, cache=True, nogil=True)
def decode_bf16(src, out):
    """bfloat16 bits (uint16) -> float32 or float64 ``out`` (exact)."""
    for i in prange(src.size):
        out[i] = np.uint32(np.uint32(src[i]) << np.uint32(16)).view(np.float32)
