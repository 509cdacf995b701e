"""CUDA kernels of the homomorphic fixed-point allreduce: the per-item code of
``fixedpoint_block.py``, one thread per block (exponents) or per 64-bit word."""
from __future__ import annotations

import numpy as np
from numba import cuda

from .fixedpoint_block import block_exponent, pack_word, unpack_word

__all__ = ["block_exponents", "quantize_pack", "unpack_dequantize"]


@cuda.jit
def block_exponents(x, block, exps):
    b = cuda.grid(1)
    if b < exps.size:
        exps[b] = np.int16(block_exponent(x, b, block))


@cuda.jit
def quantize_pack(x, exps, block, k, q_max, words):
    w = cuda.grid(1)
    if w < words.size:
        words[w] = pack_word(x, exps, block, k, q_max, w)


@cuda.jit
def unpack_dequantize(words, exps, block, k, q_max, out):
    w = cuda.grid(1)
    if w < words.size:
        unpack_word(words, exps, block, k, q_max, w, out)
