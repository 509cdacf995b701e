"""CUDA kernels of the ``errbound`` codec: one thread per block, the CPU codec's block code.

The three steps of ``errbound_cpu.py`` on the device: :func:`codes` (each
block's code byte, ``nonfinite[0]`` set for a block holding NaN or Inf),
:func:`pack` and :func:`unpack` at payload offsets that the codec computes
from the code bytes (a prefix sum over one byte per 32 values, on the host
in this version). The per-block functions are those of ``errbound_block.py``,
so the stream is the CPU codec's byte for byte.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .errbound_block import BLOCK, NONFINITE, block_code, pack_block, unpack_block
from .intbits import imin

__all__ = ["codes", "pack", "unpack"]


@cuda.jit
def codes(x, inv_step, step, bound, single, out, nonfinite):
    """Each block's code byte into ``out``; ``nonfinite[0] = 1`` for a NaN or an Inf."""
    b = cuda.grid(1)
    if b < out.size:
        start = b * BLOCK
        c = block_code(x, start, imin(start + BLOCK, x.size), inv_step, step, bound, single)
        if c == NONFINITE:
            nonfinite[0] = 1
            c = 0
        out[b] = np.uint8(c)


@cuda.jit
def pack(x, xb, inv_step, code, offsets, out, itemsize):
    """Block ``b``'s payload at ``out[offsets[b]:]``."""
    b = cuda.grid(1)
    if b < code.size:
        start = b * BLOCK
        pack_block(x, xb, start, imin(start + BLOCK, x.size), inv_step, np.int64(code[b]), out,
                   offsets[b], itemsize)


@cuda.jit
def unpack(buf, code, offsets, step, out, outb, itemsize):
    """Block ``b`` decoded from ``buf[offsets[b]:]`` into ``out``."""
    b = cuda.grid(1)
    if b < code.size:
        start = b * BLOCK
        unpack_block(buf, offsets[b], np.int64(code[b]), start, imin(start + BLOCK, out.size),
                     step, out, outb, itemsize)
