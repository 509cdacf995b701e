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

__all__ = [
    "decode_bf16",
    "decode_f16",
    "encode_bf16_from32",
    "encode_bf16_from64",
    "encode_f16_from32",
    "encode_f16_from64",
    "half_bits",
]

_HALF_INF = np.int64(0x7C00)
_F32_2P112 = np.float32(2.0**112)
_F64_MAX = np.float64(np.finfo(np.float64).max)


@njit(inline="always")
def half_bits(u, mant_bits, ebits):
    """IEEE half bits of a float given by its bit pattern ``u``; returns (bits, overflowed).

    ``mant_bits``/``ebits`` describe the source format (23/8 or 52/11). All
    arithmetic is on int64 (the source's sign is masked off first, so every
    intermediate is non-negative and below 2**63).
    """
    word = np.int64(1 + ebits + mant_bits)
    v = np.int64(np.uint64(u) & np.uint64((1 << (word - 1)) - 1))  # |x| bits
    sign = np.int64((np.uint64(u) >> np.uint64(word - 1)) & np.uint64(1))
    emask = np.int64((1 << ebits) - 1)
    bias = np.int64((1 << (ebits - 1)) - 1)
    e = v >> mant_bits
    mant = v & ((np.int64(1) << mant_bits) - 1)
    sh = np.int64(mant_bits - 10)
    # Normal half: re-bias the exponent in place; a carry out of the rounded
    # mantissa correctly bumps the exponent (up to Inf).
    r = v - ((bias - 15) << mant_bits)
    h_norm = (r + (np.int64(1) << (sh - 1)) - 1 + ((r >> sh) & 1)) >> sh
    # Subnormal half: the significand shifted so that one unit is 2**-24.
    sig = mant | (min(e, np.int64(1)) << mant_bits)
    # clamped to [1, 62] so that every shift is defined, in the unused arm too
    s = max(min(sh + 1 - (e - bias + 15), np.int64(62)), np.int64(1))
    h_sub = (sig + (np.int64(1) << (s - 1)) - 1 + ((sig >> s) & 1)) >> s
    h = min(h_norm if e - bias + 15 >= 1 else h_sub, _HALF_INF)
    finite = e != emask
    nan_bits = np.int64(0x7E00) | (mant >> sh)
    inf_bits = nan_bits if mant != 0 else _HALF_INF
    out = h if finite else inf_bits
    overflow = finite and h == _HALF_INF
    return (sign << 15) | out, overflow


@njit(inline="always")
def _half_value(h):
    """The float32 value of half bits ``h`` (exact; scaling a re-biased pattern by 2**112)."""
    hb = np.uint32(h)
    a = (hb & np.uint32(0x7FFF)) << np.uint32(13)
    if (hb & np.uint32(0x7C00)) == np.uint32(0x7C00):
        a |= np.uint32(0x7F800000)
    f = np.uint32(a).view(np.float32) * _F32_2P112
    return -f if (hb & np.uint32(0x8000)) != np.uint32(0) else f


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
        out[i] = _half_value(src[i])


@njit(inline="always")
def _bf16_bits(b):
    """bfloat16 bits of float32 bits ``b``, round to nearest even; NaN made quiet."""
    b = np.uint32(b)
    if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint32((b >> np.uint32(16)) | np.uint32(0x40))
    return np.uint32(
        (np.uint64(b) + np.uint64(0x7FFF) + np.uint64((b >> np.uint32(16)) & np.uint32(1)))
        >> np.uint64(16)
    )


@njit(parallel=True, cache=True, nogil=True)
def encode_bf16_from32(src, out):
    """float32 bits (uint32) -> bfloat16 bits (uint16); returns the overflow count."""
    bad = 0
    for i in prange(src.size):
        b = np.uint32(src[i])
        h = _bf16_bits(b)
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
        h = _bf16_bits(np.float32(x).view(np.uint32))
        out[i] = np.uint16(h)
        bad += np.int64(abs(x) <= _F64_MAX and (h & np.uint32(0x7F80)) == np.uint32(0x7F80))
    return bad


@njit(parallel=True, cache=True, nogil=True)
def decode_bf16(src, out):
    """bfloat16 bits (uint16) -> float32 or float64 ``out`` (exact)."""
    for i in prange(src.size):
        out[i] = np.uint32(np.uint32(src[i]) << np.uint32(16)).view(np.float32)
