"""ZFP fixed-rate encode/decode of flat buffers on the CPU (Numba, parallel).

Blocks are independent and each starts at bit ``b * maxbits``, so the buffer
is cut into chunks of ``CHUNK_BLOCKS`` blocks that start on a 64-bit word
boundary and are coded in parallel, each by one sequential bit writer/reader.
The per-block logic is in :mod:`zfp_block`.
"""
from __future__ import annotations

import numpy as np
from numba import get_thread_id, njit, prange

from .bitstream import flush, low_mask, peek64, put_bits, put_zeros, seek
from .zfp_block import block_exponent, decode_block, encode_block, pad_block, scale_overflows
from .zfp_block1d import decode_block_1d, encode_block_1d, fits_register

__all__ = ["CHUNK_BLOCKS", "Scratch", "decode", "encode"]

#: blocks per parallel work item; a multiple of 64 keeps chunks word aligned
CHUNK_BLOCKS = 256


class Scratch:
    """Per-thread block scratch for the general path, made once per dtype and reused.

    Rows are indexed by Numba's thread id, so a call allocates nothing.
    """

    def __init__(self, dtype: np.dtype):
        import numba

        rows = numba.config.NUMBA_NUM_THREADS
        self.fblock = np.zeros((rows, 64), dtype=dtype)
        self.iblock = np.zeros((rows, 64), dtype=np.int64)
        self.ublock = np.zeros((rows, 64), dtype=np.uint64)


@njit(inline="always")
def gather_block(x, base, t, fblock, dims):
    """Copy the block's ``t`` values and pad a partial block as docs/format.md says.

    A partial block is padded as zfp pads the array view of the flat buffer:
    first the last, partial row along x, then the last, partial plane along
    y, then the block along z (zfp's ``pad_block`` rule each time).
    """
    size = 1 << (2 * dims)
    for i in range(t):
        fblock[i] = x[base + i]
    if t == size:
        return
    if dims == 1:
        pad_block(fblock, 0, t, 1)
        return
    # 2D/3D: rows of 4 along x; planes of 16 along y; blocks of 64 along z
    nz = (t + 15) >> 4 if dims == 3 else 1
    r = t - 16 * (nz - 1)  # values in the last (partial) plane
    ny = (r + 3) >> 2
    tx = r - 4 * (ny - 1)
    plane = 16 * (nz - 1)
    if tx < 4:
        pad_block(fblock, plane + 4 * (ny - 1), tx, 1)
    if ny < 4:
        for xx in range(4):
            pad_block(fblock, plane + xx, ny, 4)
    if dims == 3 and nz < 4:
        for yx in range(16):
            pad_block(fblock, yx, nz, 16)


@njit(cache=True)
def encode_chunk_1d(x, xbits, words, b0, b1, maxbits, fblock, iblock, ublock):
    """Encode 1D blocks ``b0 <= b < b1`` (all full, budget <= 64 bits) from a word boundary.

    Returns the number of blocks holding NaN/Inf. A block whose scale would
    overflow is handed to the general path.
    """
    idx = (b0 * maxbits) >> 6
    acc = np.uint64(0)
    fill = 0
    bad = 0
    for b in range(b0, b1):
        base = 4 * b
        emax, nonzero, nf = block_exponent(xbits, base, 4, x)
        if nf or not nonzero:
            bad += nf
            idx, acc, fill = put_zeros(words, idx, acc, fill, maxbits)
        elif scale_overflows(emax, x):
            gather_block(x, base, 4, fblock, 1)
            idx, acc, fill, _ = encode_block(words, idx, acc, fill, xbits, base, 4, fblock,
                                             iblock, ublock, 1, maxbits)
        else:
            blk = encode_block_1d(x, base, emax, maxbits)
            idx, acc, fill = put_bits(words, idx, acc, fill, blk, maxbits)
    flush(words, idx, acc, fill)
    return bad


@njit(cache=True)
def encode_chunk(x, xbits, words, b0, b1, dims, maxbits, fblock, iblock, ublock):
    """Encode blocks ``b0 <= b < b1`` from a word boundary; return the NaN/Inf block count."""
    size = 1 << (2 * dims)
    nfull = min(b1, x.size // size)
    if fits_register(dims, maxbits) and nfull == b1:
        return encode_chunk_1d(x, xbits, words, b0, b1, maxbits, fblock, iblock, ublock)
    idx = (b0 * maxbits) >> 6
    acc = np.uint64(0)
    fill = 0
    bad = 0
    for b in range(b0, b1):
        base = b * size
        t = min(size, x.size - base)
        gather_block(x, base, t, fblock, dims)
        idx, acc, fill, nf = encode_block(words, idx, acc, fill, xbits, base, t,
                                          fblock, iblock, ublock, dims, maxbits)
        bad += nf
    flush(words, idx, acc, fill)
    return bad


@njit(cache=True)
def decode_chunk(words, out, b0, b1, dims, maxbits, fblock, iblock, ublock):
    """Decode blocks ``b0 <= b < b1`` into ``out``."""
    n = out.size
    size = 1 << (2 * dims)
    pos, win, avail = seek(words, b0 * maxbits)
    if fits_register(dims, maxbits):
        mask = low_mask(maxbits)
        nfull = min(b1, n // 4)
        for b in range(b0, nfull):
            decode_block_1d(peek64(words, b * maxbits) & mask, out, 4 * b, 4, maxbits)
        for b in range(max(b0, nfull), b1):
            decode_block_1d(peek64(words, b * maxbits) & mask, out, 4 * b, n - 4 * b, maxbits)
        return
    for b in range(b0, b1):
        pos, win, avail = decode_block(words, pos, win, avail, fblock, iblock, ublock,
                                       dims, maxbits)
        base = b * size
        for i in range(min(size, n - base)):
            out[base + i] = fblock[i]


@njit(parallel=True, cache=True, nogil=True)
def encode(x, xbits, words, dims, maxbits, fscratch, iscratch, uscratch):
    """Encode the flat float array ``x`` into ``words`` (uint64, zfp stream size).

    ``xbits`` is ``x`` viewed as unsigned integers of its width; the scratch
    arrays are a :class:`Scratch`'s. Returns the
    number of blocks that held NaN or Inf (their bits are not meaningful; the
    caller refuses such buffers).
    """
    size = 1 << (2 * dims)
    nblocks = (x.size + size - 1) // size
    nchunks = (nblocks + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS
    nonfinite = 0
    for c in prange(nchunks):
        b0 = c * CHUNK_BLOCKS
        tid = get_thread_id()
        nonfinite += encode_chunk(x, xbits, words, b0, min(nblocks, b0 + CHUNK_BLOCKS), dims,
                                  maxbits, fscratch[tid], iscratch[tid], uscratch[tid])
    return nonfinite


@njit(parallel=True, cache=True, nogil=True)
def decode(words, out, dims, maxbits, fscratch, iscratch, uscratch):
    """Decode ``words`` (a zfp fixed-rate stream) into the flat float array ``out``."""
    size = 1 << (2 * dims)
    nblocks = (out.size + size - 1) // size
    nchunks = (nblocks + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS
    for c in prange(nchunks):
        b0 = c * CHUNK_BLOCKS
        tid = get_thread_id()
        decode_chunk(words, out, b0, min(nblocks, b0 + CHUNK_BLOCKS), dims, maxbits,
                     fscratch[tid], iscratch[tid], uscratch[tid])
