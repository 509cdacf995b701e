"""Kernels of the homomorphic fixed-point allreduce (see mpicomp/algorithms/homomorphic.py).

Values are quantized to ``k``-bit two's-complement integers relative to a
per-block power of two that all ranks agree on, packed ``m = 64 // k`` to a
64-bit word, and summed as packed words: :func:`swar_add` adds every field
modulo ``2**k`` without carries crossing fields, which is exact because the
quantization leaves headroom for the sum of all ranks. The per-block and
per-word code is ``fixedpoint_block.py``, shared with ``fixedpoint_cuda.py``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .fixedpoint_block import EXP_NONE as _EXP_NONE
from .fixedpoint_block import block_exponent, pack_word, unpack_word

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["EXP_NONE", "block_exponents", "quantize_pack", "swar_add", "unpack_dequantize"]

#: exponent of an all-zero block
EXP_NONE = np.int16(_EXP_NONE)


@njit(parallel=True, cache=True, nogil=True)
def block_exponents(x, block, exps):
    """``exps[b]``: the smallest e with |x[i]| < 2**e over block b (EXP_NONE if all zero)."""
    for b in prange(exps.size):
        exps[b] = np.int16(block_exponent(x, b, block))


@njit(parallel=True, cache=True, nogil=True)
def quantize_pack(x, exps, block, k, q_max, words):
    """Pack ``rint(x * q_max / 2**e)`` as ``k``-bit fields, ``64 // k`` per word."""
    for w in prange(words.size):
        words[w] = pack_word(x, exps, block, k, q_max, w)


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
    for w in prange(words.size):
        unpack_word(words, exps, block, k, q_max, w, out)
