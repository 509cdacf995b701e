"""Per-value logic of the ``cast`` codec, shared by the CPU and GPU kernels.

Conversions work on bit patterns with integer operations (see
``cast_cpu.py`` for the formats): :func:`half_bits` makes IEEE half bits from
float32/float64 bits, :func:`half_value` turns half bits back into a
float32, :func:`bf16_bits` makes bfloat16 bits from float32 bits.
"""
from __future__ import annotations

import numpy as np

from .intbits import imax, imin
from .jit import NUMBA_INLINE, njit

__all__ = ["bf16_bits", "half_bits", "half_value"]

_HALF_INF = np.int64(0x7C00)
_F32_2P112 = np.float32(2.0**112)


@njit(inline=NUMBA_INLINE)
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
    sig = mant | (imin(e, np.int64(1)) << mant_bits)
    # clamped to [1, 62] so that every shift is defined, in the unused arm too
    s = imax(imin(sh + 1 - (e - bias + 15), np.int64(62)), np.int64(1))
    h_sub = (sig + (np.int64(1) << (s - 1)) - 1 + ((sig >> s) & 1)) >> s
    h = imin(h_norm if e - bias + 15 >= 1 else h_sub, _HALF_INF)
    finite = e != emask
    nan_bits = np.int64(0x7E00) | (mant >> sh)
    inf_bits = nan_bits if mant != 0 else _HALF_INF
    out = h if finite else inf_bits
    overflow = finite and h == _HALF_INF
    return (sign << 15) | out, overflow


@njit(inline=NUMBA_INLINE)
def half_value(h):
    """The float32 value of half bits ``h`` (exact; scaling a re-biased pattern by 2**112)."""
    hb = np.uint32(h)
    a = (hb & np.uint32(0x7FFF)) << np.uint32(13)
    if (hb & np.uint32(0x7C00)) == np.uint32(0x7C00):
        a |= np.uint32(0x7F800000)
    f = np.uint32(a).view(np.float32) * _F32_2P112
    return -f if (hb & np.uint32(0x8000)) != np.uint32(0) else f


@njit(inline=NUMBA_INLINE)
def bf16_bits(b):
    """bfloat16 bits of float32 bits ``b``, round to nearest even; NaN made quiet."""
    b = np.uint32(b)
    if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint32((b >> np.uint32(16)) | np.uint32(0x40))
    return np.uint32(
        (np.uint64(b) + np.uint64(0x7FFF) + np.uint64((b >> np.uint32(16)) & np.uint32(1)))
        >> np.uint64(16)
    )
