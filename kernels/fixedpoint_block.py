"""Per-item code of the homomorphic fixed-point allreduce, shared by CPU and GPU kernels.

One block's shared exponent, one 64-bit word of packed fields, and its
unpacking (see ``mpicomp/algorithms/homomorphic.py``). Decorated with
``kernels.jit.njit``: the CPU drivers (``fixedpoint_cpu.py``) and the CUDA
kernels (``fixedpoint_cuda.py``) call the same code, so both produce the
same words and values bit for bit. Plain comparisons stand in for ``max``
and ``np.rint`` (which the CUDA target does not compile here).
"""
from __future__ import annotations

import math

import numpy as np

from .jit import NUMBA_INLINE, njit

__all__ = ["EXP_NONE", "block_exponent", "pack_word", "round_half_even", "unpack_word"]

#: exponent of an all-zero block
EXP_NONE = -32768


@njit(inline=NUMBA_INLINE)
def round_half_even(v):
    """``v`` rounded to the nearest integer, ties to even (``np.rint``) for ``|v| < 2**51``.

    ``v`` (a product) is only floored and compared, never added to: the CUDA
    compiler would fuse such an addition with the product into one FMA,
    which rounds differently from the CPU near ties.
    """
    r = math.floor(v)
    h = r + 0.5
    if v > h or (v == h and (np.int64(r) & np.int64(1)) != 0):
        r += 1.0
    return r


@njit(inline=NUMBA_INLINE)
def block_exponent(x, b, block):
    """The smallest e with |x[i]| < 2**e over block ``b`` (EXP_NONE when all zero)."""
    n = x.size
    m = 0.0
    hi = (b + 1) * block
    if hi > n:
        hi = n
    for i in range(b * block, hi):
        a = abs(np.float64(x[i]))
        if a > m:
            m = a
    if m == 0.0:
        return EXP_NONE
    return math.frexp(m)[1]


@njit(inline=NUMBA_INLINE)
def pack_word(x, exps, block, k, q_max, w):
    """Word ``w``: ``rint(x * q_max / 2**e)`` of values ``w*m .. w*m+m-1`` as k-bit fields."""
    n = x.size
    m = 64 // k
    fmask = np.uint64((1 << k) - 1)
    word = np.uint64(0)
    for j in range(m):
        i = w * m + j
        if i < n:
            e = int(exps[i // block])  # a Python int for math.ldexp under the simulator
            if e != EXP_NONE:
                v = np.float64(x[i]) * math.ldexp(np.float64(q_max), -e)
                q = np.int64(round_half_even(v))
                word |= (np.uint64(q) & fmask) << np.uint64(j * k)
    return word


@njit(inline=NUMBA_INLINE)
def unpack_word(words, exps, block, k, q_max, w, out):
    """``out[i] = s_i * 2**e / q_max`` for the signed fields ``s_i`` of word ``w``."""
    n = out.size
    m = 64 // k
    fmask = np.uint64((1 << k) - 1)
    sign = np.int64(1) << np.int64(k - 1)
    word = words[w]
    for j in range(m):
        i = w * m + j
        if i < n:
            e = int(exps[i // block])  # a Python int for math.ldexp under the simulator
            v = np.int64((word >> np.uint64(j * k)) & fmask)
            s = (v ^ sign) - sign
            if e == EXP_NONE:
                out[i] = 0.0
            else:
                out[i] = np.float64(s) * (math.ldexp(1.0, e) / q_max)
