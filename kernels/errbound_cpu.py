"""Numba CPU drivers of the ``errbound`` codec: blocks in parallel, the per-block code of
``errbound_block.py``.

Encoding takes two passes over the blocks: :func:`codes` finds each block's
code byte, the caller turns them into payload offsets (a prefix sum over one
byte per 32 values), and :func:`pack` writes every block's payload at its
offset. :func:`unpack` decodes blocks in parallel from those offsets.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .errbound_block import BLOCK, NONFINITE, block_code, pack_block, unpack_block

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["codes", "pack", "unpack"]


@njit(parallel=True, cache=True, nogil=True)
def codes(x, inv_step, step, bound, single, out):
    """Each block's code byte into ``out``; returns the number of blocks holding NaN/Inf."""
    n = x.size
    bad = 0
    for b in prange(out.size):
        start = b * BLOCK
        c = block_code(x, start, min(start + BLOCK, n), inv_step, step, bound, single)
        if c == NONFINITE:
            bad += 1
            c = 0
        out[b] = np.uint8(c)
    return bad


@njit(parallel=True, cache=True, nogil=True)
def pack(x, xb, inv_step, code, offsets, out, itemsize):
    """Every block's payload at ``out[offsets[b]:]``."""
    n = x.size
    for b in prange(code.size):
        start = b * BLOCK
        pack_block(x, xb, start, min(start + BLOCK, n), inv_step, np.int64(code[b]), out,
                   offsets[b], itemsize)


@njit(parallel=True, cache=True, nogil=True)
def unpack(buf, code, offsets, step, out, outb, itemsize):
    """Decode every block from ``buf[offsets[b]:]`` into ``out``."""
    n = out.size
    for b in prange(code.size):
        start = b * BLOCK
        unpack_block(buf, offsets[b], np.int64(code[b]), start, min(start + BLOCK, n), step,
                     out, outb, itemsize)
