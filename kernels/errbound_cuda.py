"""CUDA kernels of the ``errbound`` codec: the CPU codec's block code, its bytes.

The steps of ``errbound_cpu.py`` on the device: :func:`codes` (one thread
per block: its code byte and bit count, ``nonfinite[0]`` set for a block
holding NaN or Inf), :func:`sizes` (one thread per group: its byte size into
the stream), :func:`pack` and :func:`unpack` (one thread per group) at group
offsets that the codec computes from the sizes (a prefix sum over one uint16
per 256 values, on the host in this version), and :func:`reconstruct` (one
thread per block: the values :func:`unpack` decodes, made from the encoder's
input and the code bytes). The per-block functions are
those of ``errbound_block.py``, so the stream is the CPU codec's byte for
byte.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .errbound_block import (BLOCK, GROUP, NONFINITE, SCRATCH, block_code, pack_group,
                             reconstruct_block, unpack_group)
from .intbits import imin

__all__ = ["codes", "pack", "reconstruct", "sizes", "unpack"]


@cuda.jit
def codes(x, inv_step, step, bound, single, out, bits, nonfinite):
    """Block ``b``'s code byte into ``out[b]``, its payload bits into ``bits[b]``;
    ``nonfinite[0] = 1`` for a NaN or an Inf."""
    b = cuda.grid(1)
    if b < out.size:
        start = b * BLOCK
        q = cuda.local.array(SCRATCH, np.int64)
        c, nbits = block_code(x, start, imin(start + BLOCK, x.size), inv_step, step, bound,
                              single, q)
        if c == NONFINITE:
            nonfinite[0] = 1
            c = 0
            nbits = 0
        out[b] = np.uint8(c)
        bits[b] = np.int32(nbits)


@cuda.jit
def sizes(bits, out):
    """Group ``g``'s byte size into ``out[2g:2g + 2]`` (little-endian uint16)."""
    g = cuda.grid(1)
    if 2 * g < out.size:
        total = 0
        for b in range(g * GROUP, imin(g * GROUP + GROUP, bits.size)):
            total += bits[b]
        nbytes = (total + 7) // 8
        out[2 * g] = np.uint8(nbytes & 0xFF)
        out[2 * g + 1] = np.uint8(nbytes >> 8)


@cuda.jit
def pack(x, xb, inv_step, code, offsets, out, itemsize):
    """Group ``g``'s bit stream at ``out[offsets[g]:]``."""
    g = cuda.grid(1)
    if g < offsets.size - 1:
        q = cuda.local.array(SCRATCH, np.int64)
        pack_group(x, xb, g, inv_step, code, out, offsets[g], offsets[g + 1], itemsize, q)


@cuda.jit
def unpack(buf, code, offsets, step, inv_step, out, outb, itemsize, bad):
    """Group ``g`` decoded from ``buf[offsets[g]:offsets[g + 1]]`` into ``out``;
    ``bad[0] = 1`` where its codes run past its bytes."""
    g = cuda.grid(1)
    if g < offsets.size - 1:
        q = cuda.local.array(SCRATCH, np.int64)
        if not unpack_group(buf, offsets[g], offsets[g + 1], g, code, step, inv_step, out, outb,
                            itemsize, q):
            bad[0] = 1


@cuda.jit
def reconstruct(x, code, inv_step, step, out):
    """Block ``b`` of ``out``: what :func:`unpack` decodes of block ``b`` of ``x``, coded
    with ``code[b]``, made from ``x`` (``out`` may be ``x``: each thread reads a value before
    it writes it)."""
    b = cuda.grid(1)
    if b < code.size:
        start = b * BLOCK
        reconstruct_block(x, start, imin(start + BLOCK, x.size), np.int64(code[b]), inv_step,
                          step, out)
