"""CUDA kernels of the ``zfp`` codec: the CPU codec's per-block code, one thread per work item.

Block ``b`` occupies bits ``[b * maxbits, (b + 1) * maxbits)`` of the stream
(64-bit little-endian words, LSB first; docs/format.md), so every block can
be coded on its own. Threads never write the same word:

* 1D blocks with budgets of at most 64 bits (:func:`encode_1d`,
  :func:`decode_1d`) are coded in one register by :mod:`zfp_encode1d` /
  :mod:`zfp_decode1d`. The encoder runs one thread per stream *word*: it
  codes the (at most ``64 // maxbits + 2``) blocks that touch its word and
  stores the word whole, so a block straddling two words is coded by both
  threads (the same bits). The decoder runs one thread per block.
* Every other shape and budget (:func:`encode_chunks`, :func:`decode_blocks`)
  goes through :mod:`zfp_block`. The encoder runs one thread per chunk of
  ``chunk`` blocks, a chunk starting and ending on a word boundary (``chunk``
  a multiple of ``64 / gcd(maxbits, 64)``), with the CPU driver's sequential
  bit writer; the decoder (reads only) one thread per block.

Encoders set ``flag[0]`` (int32) when a block holds NaN or Inf; the codec
then refuses the buffer, as the CPU codec does. Scratch blocks are
thread-local arrays of 64 values (the largest block).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .bitstream import seek
from .intbits import imin
from .zfp_block import decode_block, encode_blocks
from .zfp_decode1d import block_bits, decode_block_1d
from .zfp_encode1d import encode_block_1d

__all__ = ["decode_1d", "decode_blocks", "encode_1d", "encode_chunks"]

_U0 = np.uint64(0)


@cuda.jit
def encode_1d(xbits, words, maxbits, flag):
    """1D blocks, ``maxbits <= 64``: thread ``w`` makes stream word ``w``.

    ``xbits`` are the values' raw bits (uint32 for float32, uint64 for float64).
    """
    w = cuda.grid(1)
    if w < words.size:
        n = xbits.size
        nblocks = (n + 3) >> 2
        first = (w << 6) // maxbits
        last = imin(((w << 6) + 63) // maxbits, nblocks - 1)
        acc = _U0
        bad = False
        for b in range(first, last + 1):
            base = b << 2
            t = imin(np.int64(4), n - base)
            # a partial block is padded as zfp's pad_block does (docs/format.md)
            v0 = np.uint64(xbits[base])
            v1 = np.uint64(xbits[base + 1]) if t > 1 else v0
            v2 = np.uint64(xbits[base + 2]) if t > 2 else v1
            v3 = np.uint64(xbits[base + 3]) if t > 3 else v0
            blk, nonfinite = encode_block_1d(v0, v1, v2, v3, maxbits, xbits)
            off = b * maxbits - (w << 6)
            if off >= 0:
                acc |= blk << np.uint64(off)
            else:
                acc |= blk >> np.uint64(-off)
            bad |= nonfinite
        words[w] = acc
        if bad:
            flag[0] = 1


@cuda.jit
def decode_1d(words, out, maxbits):
    """1D blocks, ``maxbits <= 64``: thread ``b`` decodes block ``b`` into ``out``."""
    b = cuda.grid(1)
    n = out.size
    if b < (n + 3) >> 2:
        v0, v1, v2, v3 = decode_block_1d(block_bits(words, b, maxbits), maxbits, out)
        base = b << 2
        out[base] = v0
        if base + 1 < n:
            out[base + 1] = v1
        if base + 2 < n:
            out[base + 2] = v2
        if base + 3 < n:
            out[base + 3] = v3


@cuda.jit
def encode_chunks(x, xbits, words, dims, maxbits, chunk, flag):
    """Thread ``c`` encodes blocks ``[c * chunk, (c + 1) * chunk)`` from a word boundary.

    ``xbits`` is ``x`` viewed as unsigned integers of its width.
    """
    c = cuda.grid(1)
    size = 1 << (2 * dims)
    nblocks = (x.size + size - 1) // size
    b0 = c * chunk
    if b0 < nblocks:
        fblock = cuda.local.array(64, x.dtype)
        iblock = cuda.local.array(64, np.int64)
        ublock = cuda.local.array(64, np.uint64)
        b1 = imin(nblocks, b0 + chunk)
        bad = encode_blocks(x, xbits, words, b0, b1, dims, maxbits, fblock, iblock, ublock)
        if bad:
            flag[0] = 1


@cuda.jit
def decode_blocks(words, out, dims, maxbits):
    """Thread ``b`` decodes block ``b`` into ``out``."""
    b = cuda.grid(1)
    size = 1 << (2 * dims)
    if b < (out.size + size - 1) // size:
        fblock = cuda.local.array(64, out.dtype)
        iblock = cuda.local.array(64, np.int64)
        ublock = cuda.local.array(64, np.uint64)
        pos, win, avail = seek(words, b * maxbits)
        decode_block(words, pos, win, avail, fblock, iblock, ublock, dims, maxbits)
        base = b * size
        for i in range(imin(size, out.size - base)):
            out[base + i] = fblock[i]
