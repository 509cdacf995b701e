"""CUDA kernels of the ``bitplane`` codec: a warp codes 32 consecutive values at a time.

The stream is the CPU codec's (``bitplane_cpu.py``, ``docs/format.md``,
section bitplane): all blocks' plane bytes first, block after block, then
the block exponents. The kernels produce it warp-cooperatively:

* a *tile* is ``max(bs, 32)`` consecutive values (1, 2 or 4 blocks of
  ``bs`` = 64, 16 or 8 values; one block of 32 or 64): lane ``l`` holds
  values ``l`` and, for ``bs = 64``, ``l + 32`` of it, read by the warp as
  whole 128-byte (float32) or 256-byte (float64) lines;
* a block's exponent is a maximum over its lanes (:func:`warp.max_over`);
  each lane quantizes its own value (``bitplane_block.quantize_value``,
  the CPU's per-value code) and plane ``j`` of the tile is one ballot per
  32 values on code bit ``P - 1 - j``;
* the tile's planes are one contiguous run of ``P * tile / 8`` stream
  bytes; the ballots are staged in shared memory and the warp writes the
  run byte ``l``, ``l + 32``, ... by lane ``l``, so every store request is
  one run of consecutive bytes;
* a warp codes :data:`TILES` consecutive tiles; their block exponents
  collect in shared memory and the warp writes them as one run at the end.

Decoding reverses this: the warp reads a tile's run of plane bytes (and
once, its tiles' exponents) into shared memory, lane ``l`` assembles its
code from the planes' bits at its position and writes its value; the
partial last block is zero-padded on encode as on the CPU and only its
first values are written on decode.

Every thread of a thread block runs the same loop, whose bounds are the
same across the block, so the warp primitives (ballot, shuffles) are called
by full warps (``warp.py``; under the simulator they exchange through
shared memory). Launch with :func:`launch_shape`.

``encode`` adds 1 to ``bad[0]`` (an int32 on the device) for every block
holding NaN or Inf (block exponent ``2**ebits - 1``); the codec then
rejects the buffer. ``decode`` computes each block's quantum from its bit
pattern, the values of ``bitplane_cpu.quantum_table``, so that no table
has to be copied to the device.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from . import warp
from .bitplane_block import quantize_value, value_of_code
from .intbits import imax, imin, is_single
from .jit import njit

__all__ = ["MAX_BLOCK", "TILES", "decode", "encode", "launch_shape", "quantum"]

#: the largest block size (``BLOCK_SIZES`` in mpicomp/codecs/bitplane.py)
MAX_BLOCK = 64
#: the most planes (bits per value) of a code: 53 for float64, rounded up
_MAX_PLANES = 64
#: tiles (of max(bs, 32) values) one warp codes; their exponents are written together
TILES = 32
#: blocks in one warp's tiles, at most (four blocks of 8 values per tile)
_MAX_GROUP_BLOCKS = TILES * 4
#: bytes of one tile's planes, at most (64 planes of 64 values)
_MAX_TILE_BYTES = _MAX_PLANES * MAX_BLOCK // 8
# shapes of the shared arrays, a row per warp (constants for the CUDA compiler)
_SCRATCH_SHAPE = warp.SCRATCH_SHAPE
_PLANES_SHAPE = (warp.MAX_WARPS, 2, _MAX_PLANES)
_EXPS_SHAPE = (warp.MAX_WARPS, _MAX_GROUP_BLOCKS)
_RUN_SHAPE = (warp.MAX_WARPS, _MAX_TILE_BYTES)
_EBUF_SHAPE = (warp.MAX_WARPS, 2 * _MAX_GROUP_BLOCKS)


def launch_shape(count: int, bs: int) -> tuple[int, int]:
    """(blocks, threads) of a launch over ``count`` values in blocks of ``bs``."""
    tile = max(bs, warp.WARP)
    ntiles = -(-count // tile)
    nwarps = -(-ntiles // TILES)
    return max(1, -(-nwarps // warp.WARPS)), warp.WARP * warp.WARPS


@njit(inline="always")
def quantum(e, ebits, nplanes):
    """``2**(e - BIAS + 1 - m)`` as a float64 built from its bits (``quantum_table``'s entry)."""
    k = np.int64(e) - np.int64((1 << (ebits - 1)) - 1) + np.int64(1) - np.int64(nplanes - 1)
    if k >= np.int64(-1022):
        normal = np.uint64(np.uint64(imin(k, np.int64(1024)) + np.int64(1023)) << np.uint64(52))
        return normal.view(np.float64)
    sh = np.uint64(imax(imin(k + np.int64(1074), np.int64(51)), np.int64(0)))
    sub = np.uint64(np.uint64(1) << sh)
    return sub.view(np.float64)


@cuda.jit(device=True)
def _layout(n, bs, nplanes):
    """(values of a tile, values of a tile per lane, blocks of a tile, bytes of a block's
    plane, bytes of a block's planes, bytes of a tile's planes, blocks, tiles)."""
    tile = imax(bs, 32)
    wbytes = bs // 8
    return (tile, tile // 32, tile // bs, wbytes, nplanes * wbytes, nplanes * (tile // 8),
            (n + bs - 1) // bs, (n + tile - 1) // tile)


@cuda.jit(device=True)
def _warp_tiles(ntiles):
    """(first tile of this warp, tiles the loop runs: the same for every warp of the block)."""
    first_of_block = cuda.blockIdx.x * (warp.warps() * TILES)
    first = first_of_block + warp.warp_id() * TILES
    return first, imax(imin(ntiles - first_of_block, TILES), 0)


@cuda.jit
def encode(src, bs, nplanes, stream, bad):
    """Raw float bits (uint32 for float32, uint64 for float64) -> the codec's stream (uint8)."""
    # this warp's rows of the block's shared arrays
    scratch = cuda.shared.array(_SCRATCH_SHAPE, np.int64)[warp.warp_id()]
    planes = cuda.shared.array(_PLANES_SHAPE, np.uint32)[warp.warp_id()]
    exps = cuda.shared.array(_EXPS_SHAPE, np.int32)[warp.warp_id()]
    lane = warp.lane_id()

    n = src.size
    single = is_single(src)
    mant_bits = 23 if single else 52
    ebits = 8 if single else 11
    ebytes = (ebits + 7) // 8
    top = (1 << ebits) - 1
    m = np.int64(nplanes - 1)
    tile, halves, per_tile, wbytes, bbytes, run, nblocks, ntiles = _layout(n, bs, nplanes)
    group = imin(bs, 32)  # lanes of one block in one half

    first, iters = _warp_tiles(ntiles)
    for it in range(iters):
        t = first + it
        # the values of this lane (zero beyond the buffer: the CPU's padding)
        v0 = np.uint64(0)
        v1 = np.uint64(0)
        i0 = t * tile + lane
        if t < ntiles and i0 < n:
            v0 = np.uint64(src[i0])
        if halves == 2 and t < ntiles and i0 + 32 < n:
            v1 = np.uint64(src[i0 + 32])
        msk = np.uint64(top)
        e = imax(np.int64((v0 >> np.uint64(mant_bits)) & msk), np.int64(1))
        if halves == 2:
            e = imax(e, np.int64((v1 >> np.uint64(mant_bits)) & msk))
        e = warp.max_over(e, group, scratch)
        c0 = quantize_value(v0, e, m, mant_bits, ebits)
        c1 = quantize_value(v1, e, m, mant_bits, ebits) if halves == 2 else np.uint64(0)
        for j in range(nplanes):
            sh = np.uint64(nplanes - 1 - j)
            b0 = warp.ballot(((c0 >> sh) & np.uint64(1)) != np.uint64(0), scratch)
            b1 = np.uint32(0)
            if halves == 2:  # the same branch on every lane
                b1 = warp.ballot(((c1 >> sh) & np.uint64(1)) != np.uint64(0), scratch)
            if lane == 0:
                planes[0, j] = b0
                planes[1, j] = b1
        if lane % group == 0:
            exps[it * per_tile + lane // group] = np.int32(e)
            if e == top and t * per_tile + lane // group < nblocks:
                cuda.atomic.add(bad, 0, 1)
        warp.sync()
        if t < ntiles:
            base = t * run
            # the bytes of this tile's blocks that exist (a tile past the last block writes none)
            valid = imin(per_tile, nblocks - t * per_tile) * bbytes
            for k in range(lane, valid, 32):
                blk = k // bbytes
                rem = k - blk * bbytes
                j = rem // wbytes
                bit = blk * bs + 8 * (rem - j * wbytes)  # position of the byte's first value
                word = planes[bit >> 5, j]
                stream[base + k] = np.uint8((word >> np.uint32(bit & 31)) & np.uint32(0xFF))
        warp.sync()  # the planes are read before the next tile's ballots overwrite them
    # this warp's block exponents, as one run after all plane bytes
    b_first = first * per_tile
    nb = imax(imin(iters * per_tile, nblocks - b_first), 0)
    head = nblocks * bbytes + b_first * ebytes
    for k in range(lane, nb * ebytes, 32):
        blk = k // ebytes
        stream[head + k] = np.uint8((exps[blk] >> (8 * (k - blk * ebytes))) & 0xFF)


@cuda.jit
def decode(stream, bs, nplanes, dst):
    """The codec's stream (uint8) -> float32 or float64 values."""
    run_bytes = cuda.shared.array(_RUN_SHAPE, np.uint8)[warp.warp_id()]
    ebuf = cuda.shared.array(_EBUF_SHAPE, np.uint8)[warp.warp_id()]
    lane = warp.lane_id()

    n = dst.size
    ebits = 8 if is_single(dst) else 11
    ebytes = (ebits + 7) // 8
    tile, halves, per_tile, wbytes, bbytes, run, nblocks, ntiles = _layout(n, bs, nplanes)
    mq = np.uint64(nplanes - 1)

    first, iters = _warp_tiles(ntiles)
    b_first = first * per_tile
    nb = imax(imin(iters * per_tile, nblocks - b_first), 0)
    head = nblocks * bbytes + b_first * ebytes
    for k in range(lane, nb * ebytes, 32):
        ebuf[k] = stream[head + k]
    for it in range(iters):
        t = first + it
        if t < ntiles:
            valid = imin(per_tile, nblocks - t * per_tile) * bbytes
            for k in range(lane, valid, 32):
                run_bytes[k] = stream[t * run + k]
        warp.sync()
        if t < ntiles:
            for h in range(halves):
                pos = h * 32 + lane  # this value's place in the tile
                i = t * tile + pos
                if i < n:
                    blk = pos // bs
                    p = pos - blk * bs
                    e = np.int64(0)
                    for k in range(ebytes):
                        e |= np.int64(ebuf[(it * per_tile + blk) * ebytes + k]) << np.int64(8 * k)
                    at = blk * bbytes + (p >> 3)
                    sh = np.uint32(p & 7)
                    code = np.uint64(0)
                    for j in range(nplanes):
                        bit = (np.uint32(run_bytes[at + j * wbytes]) >> sh) & np.uint32(1)
                        code = (code << np.uint64(1)) | np.uint64(bit)
                    dst[i] = value_of_code(code, mq, quantum(e, ebits, nplanes))
        warp.sync()  # the run is read before the next tile's overwrites it
