"""Kernels of the homomorphic fixed-point allreduce (see mpicomp/algorithms/homomorphic.py).

Values are quantized to ``k``-bit two's-complement integers relative to a
per-block power of two that all ranks agree on, packed ``m = 64 // k`` to a
64-bit word, and summed as packed words: :func:`swar_add` adds every field
modulo ``2**k`` without carries crossing fields, which is exact because the
quantization leaves headroom for the sum of all ranks.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

__all__ = ["EXP_NONE", "block_exponents", "quantize_pack", "swar_add", "unpack_dequantize"]

#: exponent of an all-zero block
EXP_NONE = np.int16(-32768)


@njit(parallel=True, cache=True, nogil=True)
def block_exponents(x, block, exps):
    """``exps[b]``: the smallest e with |x[i]| < 2**e over block b (EXP_NONE if all zero)."""
    n = x.size
    for b in prange(exps.size):
        m = 0.0
        for i in range(b * block, min((b + 1) * block, n)):
            m = max(m, abs(np.float64(x[i])))
        if m == 0.0:
            exps[b] = EXP_NONE
        else:
            exps[b] = np.int16(math.frexp(m)[1])


@njit(parallel=True, cache=True, nogil=True)
def quantize_pack(x, exps, block, k, q_max, words):
    """Pack ``rint(x * q_max / 2**e)`` as ``k``-bit fields, ``64 // k`` per word."""
    n = x.size
    m = 64 // k
    fmask = np.uint64((1 << k) - 1)
    for w in prange(words.size):
        word = np.uint64(0)
        for j in range(m):
            i = w * m + j
            if i < n:
                e = exps[i // block]
                if e != EXP_NONE:
                    q = np.int64(np.rint(np.float64(x[i]) * math.ldexp(np.float64(q_max), -e)))
                    word |= (np.uint64(q) & fmask) << np.uint64(j * k)
        words[w] = word


@njit(parallel=True, cache=True, nogil=True)
def swar_add(acc, x, high, low):
    """``acc += x`` per field modulo 2**k (``high``: top bit of each field; ``low``: the rest)."""
    for i in prange(acc.size):
        a = acc[i]
        b = x[i]
        acc[i] = ((a & low) + (b & low)) ^ ((a ^ b) & high)


@njit(parallel=True, cache=True, nogil=True)
def unpack_dequantize(words, exps, block, k, q_max, out):
    """``out[i] = s_i * 2**e / q_max`` for the signed field ``s_i`` of value i."""
    n = out.size
    m = 64 // k
    fmask = np.uint64((1 << k) - 1)
    sign = np.int64(1) << (k - 1)
    for w in prange(words.size):
        word = words[w]
        for j in range(m):
            i = w * m + j
            if i < n:
                e = exps[i // block]
                v = np.int64((word >> np.uint64(j * k)) & fmask)
                s = (v ^ sign) - sign
                if e == EXP_NONE:
                    out[i] = 0.0
                else:
                    out[i] = np.float64(s) * (math.ldexp(1.0, e) / q_max)
