"""ZFP fixed-rate encode/decode of flat buffers on the CPU (Numba, parallel).

Blocks are independent and each starts at bit ``b * maxbits``, so the buffer
is cut into chunks of ``CHUNK_BLOCKS`` blocks that start on a 64-bit word
boundary and are coded in parallel, each by one sequential bit writer/reader.
The per-block logic is in :mod:`zfp_block`; 1D blocks with budgets of at most
64 bits take :mod:`zfp_encode1d` / :mod:`zfp_decode1d`, run here for
``LANES`` blocks in lockstep so that the compiler vectorizes them: ``STEPS``
plane steps for every block of a group, then the few blocks that need more
one at a time (so that one block with many planes does not make the whole
group wait). Blocks with at most ``zfp_table1d.TABLE_BITS`` bits after the
header (float32 rate 4) are decoded by table lookup (:mod:`zfp_table1d`).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import get_thread_id, njit, prange, types
from numba.extending import intrinsic

from ..threads import start_numba_workers
from .bitstream import low_mask, seek
from .intbits import as_float, is_single
from .jit import CPU_INLINE
from .zfp_block import POW2, POW2_BIAS, decode_block, encode_blocks
from .zfp_decode1d import (
    block_bits,
    decode_block_1d,
    decode_finish_1d,
    decode_start_1d,
    decode_step_1d,
    fits_register,
)
from .zfp_encode1d import coefficients_1d, finish_1d, plane_step_1d, planes_start_1d
from .zfp_table1d import plane_table, table_fits

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["CHUNK_BLOCKS", "Scratch", "decode", "decode_table", "encode"]

#: blocks per parallel work item; a multiple of 64 keeps chunks word aligned
CHUNK_BLOCKS = 256


class Scratch:
    """Per-thread block scratch, made once per dtype and reused.

    Rows are indexed by Numba's thread id, so a call allocates nothing. The
    general path uses the first 64 entries of a row; the 1D lockstep path
    keeps ``LANE_FIELDS`` fields of ``LANES`` blocks in a ``ublock`` row.
    """

    def __init__(self, dtype: np.dtype):
        import numba

        rows = numba.config.NUMBA_NUM_THREADS
        self.fblock = np.zeros((rows, 64), dtype=dtype)
        self.iblock = np.zeros((rows, 64), dtype=np.int64)
        self.ublock = np.zeros((rows, max(64, LANE_FIELDS * LANES)), dtype=np.uint64)


_NO_TABLE: dict[np.dtype, np.ndarray] = {}


def decode_table(dims: int, maxbits: int, dtype: np.dtype) -> np.ndarray:
    """The ``table`` argument of :func:`decode`: the value table, or an empty read-only array."""
    dtype = np.dtype(dtype)
    if table_fits(dims, maxbits, dtype.itemsize):
        return plane_table(maxbits, dtype)
    t = _NO_TABLE.get(dtype)
    if t is None:
        t = _NO_TABLE[dtype] = np.zeros(0, dtype=dtype)
        t.flags.writeable = False
    return t


#: blocks that the 1D encoder and decoder run in lockstep
LANES = 32
# a block's fields in the scratch row: field f of lane j at f * LANES + j
_U0, _U1, _U2, _U3, _K = range(5)  # coefficients, planes left (both directions)
_C0, _C1, _C2, _C3, _KSTOP, _BLK, _BLEN, _KEEP = range(5, 13)  # encoder
_R, _BITS, _N, _EMAX = range(5, 9)  # decoder
LANE_FIELDS = 13
#: plane steps run in lockstep for all blocks of a group; the few blocks that
#: need more (real gradients: about 1 block in 7) finish one at a time
STEPS = 2


@intrinsic
def _float64_bits(typingctx, x):
    """The bits of the float64 ``x`` as a uint64."""
    sig = types.uint64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@njit(**CPU_INLINE)
def _bit_length32(v):
    """Bit length of ``v < 2**32`` through its float64 exponent (no vector clz on AVX2)."""
    f = _float64_bits(np.float64(np.uint32(v)))
    return max(np.int64(f >> np.uint64(52)) - 1022, 0)


@njit(**CPU_INLINE)
def _planes_start(u0, u1, u2, u3, e, proto):
    """:func:`zfp_encode1d.planes_start_1d` for the CPU driver (float32: no clz; c3 unused)."""
    if is_single(proto):
        c2 = _bit_length32(u2 | u3)
        c1 = _bit_length32(u1 | u2 | u3)
        c0 = _bit_length32(u0 | u1 | u2 | u3)
        return c0, c1, c2, 0, c0, max(c2 - 1, 0), (e << np.uint64(1)) | np.uint64(1), 9 + 32 - c0
    return planes_start_1d(u0, u1, u2, u3, e, proto)


@njit(cache=True)
def encode_chunk_1d(x, xbits, words, b0, b1, maxbits, lanes):
    """Encode 1D blocks ``b0 <= b < b1`` (all full, budget <= 64 bits) from a word boundary.

    Blocks go through the steps of :mod:`zfp_encode1d` ``LANES`` at a time,
    each step as a loop over the blocks (which the compiler vectorizes), with
    the blocks' state in ``lanes`` (field ``f`` of block ``j`` at
    ``f * LANES + j``). Up to ``STEPS`` plane steps run for all blocks of the
    group while any has a plane due; the blocks with planes still due then
    finish one at a time. Returns the number of blocks holding NaN/Inf.

    The bit writer is written out here rather than called: Numba keeps
    reference counting on arrays handed to inlined helpers with branches,
    which costs more than a block.
    """
    proto = as_float(0, x)
    L = LANES
    idx = (b0 * maxbits) >> 6
    acc = np.uint64(0)
    fill = 0
    bad = 0
    for g in range(b0, b1, L):
        ng = min(L, b1 - g)
        for j in range(ng):
            # unsigned indices: no negative-index wraparound, which stops vectorization
            base = np.uint64(4 * g) + np.uint64(4) * np.uint64(j)
            u0, u1, u2, u3, e, nonzero, nonfinite = coefficients_1d(
                np.uint64(xbits[base]), np.uint64(xbits[base + np.uint64(1)]),
                np.uint64(xbits[base + np.uint64(2)]), np.uint64(xbits[base + np.uint64(3)]),
                proto)
            c0, c1, c2, c3, k, kstop, blk, blen = _planes_start(u0, u1, u2, u3, e, proto)
            bad += np.int64(nonfinite)
            lanes[_U0 * L + j] = u0
            lanes[_U1 * L + j] = u1
            lanes[_U2 * L + j] = u2
            lanes[_U3 * L + j] = u3
            lanes[_C0 * L + j] = c0
            lanes[_C1 * L + j] = c1
            lanes[_C2 * L + j] = c2
            lanes[_K * L + j] = k
            lanes[_KSTOP * L + j] = kstop
            lanes[_BLK * L + j] = blk
            lanes[_BLEN * L + j] = blen
            lanes[_KEEP * L + j] = np.uint64(0) - np.uint64(nonzero and not nonfinite)
        more = 1
        steps = 0
        while more and steps < STEPS:
            more = 0
            steps += 1
            for j in range(ng):
                blk, blen, k, due = plane_step_1d(
                    lanes[_U0 * L + j], lanes[_U1 * L + j], lanes[_U2 * L + j],
                    lanes[_U3 * L + j], np.int64(lanes[_C0 * L + j]),
                    np.int64(lanes[_C1 * L + j]), np.int64(lanes[_C2 * L + j]),
                    0, np.int64(lanes[_K * L + j]),
                    np.int64(lanes[_KSTOP * L + j]), lanes[_BLK * L + j],
                    np.int64(lanes[_BLEN * L + j]), maxbits)
                lanes[_BLK * L + j] = blk
                lanes[_BLEN * L + j] = blen
                lanes[_K * L + j] = k
                more |= np.int64(due)
        if more:  # the few blocks with planes still due, one at a time
            for j in range(ng):
                u0, u1, u2, u3 = (lanes[_U0 * L + j], lanes[_U1 * L + j], lanes[_U2 * L + j],
                                  lanes[_U3 * L + j])
                c0, c1, c2 = (np.int64(lanes[_C0 * L + j]), np.int64(lanes[_C1 * L + j]),
                              np.int64(lanes[_C2 * L + j]))
                k = np.int64(lanes[_K * L + j])
                kstop = np.int64(lanes[_KSTOP * L + j])
                blk = lanes[_BLK * L + j]
                blen = np.int64(lanes[_BLEN * L + j])
                due = (k > kstop) & (blen < maxbits)
                while due:
                    blk, blen, k, due = plane_step_1d(u0, u1, u2, u3, c0, c1, c2, 0, k, kstop,
                                                      blk, blen, maxbits)
                lanes[_BLK * L + j] = blk
                lanes[_BLEN * L + j] = np.uint64(blen)
                lanes[_K * L + j] = np.uint64(k)
        for j in range(ng):
            lanes[_BLK * L + j] = finish_1d(
                lanes[_U0 * L + j], lanes[_U1 * L + j], lanes[_U2 * L + j], lanes[_U3 * L + j],
                np.int64(lanes[_K * L + j]), lanes[_BLK * L + j], np.int64(lanes[_BLEN * L + j]),
                maxbits) & lanes[_KEEP * L + j]
        for j in range(ng):
            # append maxbits (<= 64) bits: acc holds fill < 64 bits
            blk = lanes[_BLK * L + j]
            acc |= blk << np.uint64(fill)
            fill += maxbits
            if fill >= 64:
                words[idx] = acc
                idx += 1
                fill -= 64
                acc = blk >> np.uint64(maxbits - fill) if fill > 0 else np.uint64(0)
    if fill > 0:
        words[idx] = acc
    return bad


@njit(cache=True)
def encode_chunk(x, xbits, words, b0, b1, dims, maxbits, fblock, iblock, ublock):
    """Encode blocks ``b0 <= b < b1`` from a word boundary; return the NaN/Inf block count."""
    size = 1 << (2 * dims)
    nfull = min(b1, x.size // size)
    if fits_register(dims, maxbits) and nfull == b1:
        return encode_chunk_1d(x, xbits, words, b0, b1, maxbits, ublock)
    return encode_blocks(x, xbits, words, b0, b1, dims, maxbits, fblock, iblock, ublock)


@njit(inline="always")
def _decode_table_1d(words, out, b0, b1, maxbits, table):
    """Decode full 1D blocks ``b0 <= b < b1`` by table (:mod:`zfp_table1d`).

    Per block: the index of its bits after the header (and flag) and its
    scale; the values are the table's times the scale.
    """
    if is_single(out[0]):
        hb, emask, shift = 9, 255, 127 + 30
    else:
        hb, emask, shift = 12, 2047, 1023 + 62
    nw = np.uint64(words.size)
    mask = low_mask(maxbits)
    mb = np.uint64(maxbits)
    for b in range(b0, b1):
        pos = np.uint64(b) * mb
        w = pos >> np.uint64(6)
        sh = pos & np.uint64(63)
        blk = words[w] >> sh
        if sh + mb > np.uint64(64) and w + np.uint64(1) < nw:
            blk |= words[w + np.uint64(1)] << (np.uint64(64) - sh)
        blk &= mask
        e = np.int64((blk >> np.uint64(1)) & np.uint64(emask))
        s = as_float(POW2[e - shift + POW2_BIAS], out[0])
        t = np.uint64(8) * (blk >> np.uint64(hb)) + np.uint64(4) * (blk & np.uint64(1))
        base = np.uint64(4) * np.uint64(b)
        out[base] = s * table[t]
        out[base + np.uint64(1)] = s * table[t + np.uint64(1)]
        out[base + np.uint64(2)] = s * table[t + np.uint64(2)]
        out[base + np.uint64(3)] = s * table[t + np.uint64(3)]


@njit(cache=True)
def decode_chunk_1d(words, out, b0, b1, maxbits, lanes, table):
    """Decode 1D blocks ``b0 <= b < b1`` (budget <= 64 bits) into ``out``.

    Full blocks go through the steps of :mod:`zfp_decode1d` ``LANES`` at a
    time, in lockstep like :func:`encode_chunk_1d`, or by table lookup when
    ``table`` is not empty (:func:`decode_table`); a partial last block is
    decoded alone. Stream words are read here rather than through a helper
    (see :func:`encode_chunk_1d`).
    """
    proto = as_float(0, out)
    L = LANES
    nw = np.uint64(words.size)
    mask = low_mask(maxbits)
    mb = np.uint64(maxbits)
    nfull = min(b1, out.size // 4)
    if table.size > 0:
        _decode_table_1d(words, out, b0, nfull, maxbits, table)
    for g in range(b0, nfull if table.size == 0 else b0, L):
        ng = min(L, nfull - g)
        for j in range(ng):
            # the block's bits, from one or two words (past the end read as 0);
            # unsigned indices keep the loop free of negative-index handling
            pos = (np.uint64(g) + np.uint64(j)) * mb
            w = pos >> np.uint64(6)
            sh = pos & np.uint64(63)
            w1 = min(w + np.uint64(1), nw - np.uint64(1))
            hi = (words[w1] << (np.uint64(63) - sh)) << np.uint64(1)
            blk = ((words[w] >> sh) | (hi if w + np.uint64(1) < nw else np.uint64(0))) & mask
            r, bits, n, k, emax = decode_start_1d(blk, maxbits, proto)
            lanes[_EMAX * L + j] = np.uint64(emax)
            lanes[_R * L + j] = r
            lanes[_BITS * L + j] = bits
            lanes[_N * L + j] = n
            lanes[_K * L + j] = k
            lanes[_U0 * L + j] = 0
            lanes[_U1 * L + j] = 0
            lanes[_U2 * L + j] = 0
            lanes[_U3 * L + j] = 0
        more = 1
        steps = 0
        while more and steps < STEPS:
            more = 0
            steps += 1
            for j in range(ng):
                r, bits, n, k, u0, u1, u2, u3, due = decode_step_1d(
                    lanes[_R * L + j], np.int64(lanes[_BITS * L + j]),
                    np.int64(lanes[_N * L + j]), np.int64(lanes[_K * L + j]),
                    lanes[_U0 * L + j], lanes[_U1 * L + j], lanes[_U2 * L + j],
                    lanes[_U3 * L + j])
                lanes[_R * L + j] = r
                lanes[_BITS * L + j] = bits
                lanes[_N * L + j] = n
                lanes[_K * L + j] = k
                lanes[_U0 * L + j] = u0
                lanes[_U1 * L + j] = u1
                lanes[_U2 * L + j] = u2
                lanes[_U3 * L + j] = u3
                more |= np.int64(due)
        if more:  # the few blocks with planes still due, one at a time
            for j in range(ng):
                r = lanes[_R * L + j]
                bits = np.int64(lanes[_BITS * L + j])
                n = np.int64(lanes[_N * L + j])
                k = np.int64(lanes[_K * L + j])
                due = (bits > 0) & (k > 0) & (n < 3)
                if due:
                    u0, u1, u2, u3 = (lanes[_U0 * L + j], lanes[_U1 * L + j],
                                      lanes[_U2 * L + j], lanes[_U3 * L + j])
                    while due:
                        r, bits, n, k, u0, u1, u2, u3, due = decode_step_1d(
                            r, bits, n, k, u0, u1, u2, u3)
                    lanes[_R * L + j] = r
                    lanes[_BITS * L + j] = np.uint64(bits)
                    lanes[_N * L + j] = np.uint64(n)
                    lanes[_K * L + j] = np.uint64(k)
                    lanes[_U0 * L + j] = u0
                    lanes[_U1 * L + j] = u1
                    lanes[_U2 * L + j] = u2
                    lanes[_U3 * L + j] = u3
        for j in range(ng):
            v0, v1, v2, v3 = decode_finish_1d(
                lanes[_R * L + j], np.int64(lanes[_BITS * L + j]), np.int64(lanes[_N * L + j]),
                np.int64(lanes[_K * L + j]), lanes[_U0 * L + j], lanes[_U1 * L + j],
                lanes[_U2 * L + j], lanes[_U3 * L + j], np.int64(lanes[_EMAX * L + j]), proto)
            base = np.uint64(4 * g) + np.uint64(4) * np.uint64(j)
            out[base] = v0
            out[base + np.uint64(1)] = v1
            out[base + np.uint64(2)] = v2
            out[base + np.uint64(3)] = v3
    for b in range(max(b0, nfull), b1):  # a partial last block
        v0, v1, v2, v3 = decode_block_1d(block_bits(words, b, maxbits), maxbits, proto)
        base = 4 * b
        out[base] = v0
        if base + 1 < out.size:
            out[base + 1] = v1
        if base + 2 < out.size:
            out[base + 2] = v2


@njit(cache=True)
def decode_chunk(words, out, b0, b1, dims, maxbits, fblock, iblock, ublock, table):
    """Decode blocks ``b0 <= b < b1`` into ``out``."""
    n = out.size
    size = 1 << (2 * dims)
    pos, win, avail = seek(words, b0 * maxbits)
    if fits_register(dims, maxbits):
        decode_chunk_1d(words, out, b0, b1, maxbits, ublock, table)
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
def decode(words, out, dims, maxbits, fscratch, iscratch, uscratch, table):
    """Decode ``words`` (a zfp fixed-rate stream) into the flat float array ``out``.

    ``table`` is :func:`zfp_table1d.plane_table`'s where it applies (1D, few
    bits after the header), else empty (:func:`no_table`); both read-only.
    """
    size = 1 << (2 * dims)
    nblocks = (out.size + size - 1) // size
    nchunks = (nblocks + CHUNK_BLOCKS - 1) // CHUNK_BLOCKS
    for c in prange(nchunks):
        b0 = c * CHUNK_BLOCKS
        tid = get_thread_id()
        decode_chunk(words, out, b0, min(nblocks, b0 + CHUNK_BLOCKS), dims, maxbits,
                     fscratch[tid], iscratch[tid], uscratch[tid], table)
