"""CUDA kernels of the ``zfp`` codec: the CPU codec's per-block code, on the device.

Block ``b`` occupies bits ``[b * maxbits, (b + 1) * maxbits)`` of the stream
(64-bit little-endian words, LSB first; docs/format.md), so every block can
be coded on its own. Threads never write the same word:

* 1D blocks with budgets of at most 64 bits (:func:`encode_1d`,
  :func:`decode_1d`) are coded in one register by :mod:`zfp_encode1d` /
  :mod:`zfp_decode1d`, warp-cooperatively: a warp codes a *chunk* of 32
  blocks (64 for an odd budget, so that a chunk ends on a word boundary).
  The warp reads the chunk's values as whole lines into shared memory,
  lane ``j`` codes block ``j`` from there, and lane ``i`` assembles word
  ``i`` of the chunk from the blocks that touch it. The decoder reverses
  it: lane ``j`` decodes block ``j`` into shared memory, and the warp
  writes the values as whole lines.
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

from . import warp
from .bitstream import seek
from .intbits import imin
from .zfp_block import decode_block, encode_blocks
from .zfp_decode1d import block_bits, decode_block_1d
from .zfp_encode1d import encode_block_1d

__all__ = ["chunk_blocks", "decode_1d", "decode_blocks", "encode_1d", "encode_chunks",
           "launch_shape_1d"]

_U0 = np.uint64(0)
#: blocks of a chunk, at most (:func:`chunk_blocks`)
_MAX_CHUNK = 64
# shapes of the shared arrays, a row per warp (constants for the CUDA compiler)
_VALS_SHAPE = (warp.MAX_WARPS, 4 * _MAX_CHUNK)
_BLKS_SHAPE = (warp.MAX_WARPS, _MAX_CHUNK)


def chunk_blocks(maxbits: int) -> int:
    """Blocks of one warp's chunk: 32, or 64 when ``maxbits`` is odd, so a chunk ends on a word."""
    return 32 if (32 * maxbits) % 64 == 0 else 64


def launch_shape_1d(count: int, nwords: int, maxbits: int) -> tuple[int, int]:
    """(blocks, threads) of :func:`encode_1d` / :func:`decode_1d` on ``count`` values."""
    k = chunk_blocks(maxbits)
    nblocks = -(-count // 4)
    nchunks = max(-(-nblocks // k), -(-nwords // (k * maxbits // 64)))
    return max(1, -(-nchunks // warp.WARPS)), warp.WARP * warp.WARPS


@cuda.jit(device=True)
def _chunk(maxbits, n):
    """(this warp's chunk, its blocks, its stream words, its first block, the blocks of
    ``n`` values)."""
    k = 32 if (32 * maxbits) % 64 == 0 else 64
    c = cuda.blockIdx.x * warp.warps() + warp.warp_id()
    return c, k, (k * maxbits) >> 6, c * k, (n + 3) >> 2


@cuda.jit
def encode_1d(xbits, words, maxbits, flag):
    """1D blocks, ``maxbits <= 64``: warp ``c`` makes the words of chunk ``c``
    (:func:`chunk_blocks`).

    ``xbits`` are the values' raw bits (uint32 for float32, uint64 for float64).
    """
    vals = cuda.shared.array(_VALS_SHAPE, np.uint64)[warp.warp_id()]
    blks = cuda.shared.array(_BLKS_SHAPE, np.uint64)[warp.warp_id()]
    lane = warp.lane_id()
    n = xbits.size
    c, k, nw, b0, nblocks = _chunk(maxbits, n)
    for i in range(lane, 4 * k, 32):  # the chunk's values, read as whole lines
        if 4 * b0 + i < n:
            vals[i] = np.uint64(xbits[4 * b0 + i])
    warp.sync()
    bad = False
    for j in range(lane, k, 32):
        b = b0 + j
        blk = _U0
        if b < nblocks:
            t = imin(np.int64(4), n - 4 * b)
            # a partial block is padded as zfp's pad_block does (docs/format.md)
            v0 = vals[4 * j]
            v1 = vals[4 * j + 1] if t > 1 else v0
            v2 = vals[4 * j + 2] if t > 2 else v1
            v3 = vals[4 * j + 3] if t > 3 else v0
            blk, nonfinite = encode_block_1d(v0, v1, v2, v3, maxbits, xbits)
            bad |= nonfinite
        blks[j] = blk
    warp.sync()
    for i in range(lane, nw, 32):  # lane i assembles word i of the chunk from its blocks
        if c * nw + i < words.size:
            first = (i << 6) // maxbits
            last = imin(((i << 6) + 63) // maxbits, k - 1)
            acc = _U0
            for j in range(first, last + 1):
                off = j * maxbits - (i << 6)
                if off >= 0:
                    acc |= blks[j] << np.uint64(off)
                else:
                    acc |= blks[j] >> np.uint64(-off)
            words[c * nw + i] = acc
    if bad:
        flag[0] = 1


@cuda.jit
def decode_1d(words, out, maxbits):
    """1D blocks, ``maxbits <= 64``: lane ``j`` of warp ``c`` decodes block ``j`` of chunk ``c``."""
    vals = cuda.shared.array(_VALS_SHAPE, out.dtype)[warp.warp_id()]
    lane = warp.lane_id()
    n = out.size
    _, k, _, b0, nblocks = _chunk(maxbits, n)
    for j in range(lane, k, 32):
        if b0 + j < nblocks:
            v0, v1, v2, v3 = decode_block_1d(block_bits(words, b0 + j, maxbits), maxbits, out)
            vals[4 * j] = v0
            vals[4 * j + 1] = v1
            vals[4 * j + 2] = v2
            vals[4 * j + 3] = v3
    warp.sync()
    for i in range(lane, 4 * k, 32):  # the chunk's values, written as whole lines
        if 4 * b0 + i < n:
            out[4 * b0 + i] = vals[i]


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
