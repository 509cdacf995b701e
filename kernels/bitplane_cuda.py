"""CUDA kernels of the ``bitplane`` codec: one thread per block, the CPU codec's block code.

Each thread codes one block of ``bs`` values with the general-path block
functions of ``bitplane_block.py`` (``encode_block``/``decode_block``, the
ones every CPU path agrees with byte for byte), so the stream is the CPU
codec's: all blocks' plane bytes first, then the block exponents (see
``bitplane_cpu.py`` and ``docs/format.md``, section bitplane). Scratch
arrays are thread-local arrays sized for the largest block size
(``MAX_BLOCK``); the partial last block is coded through a zero-padded
local copy, as on the CPU.

``encode`` adds 1 to ``bad[0]`` (an int32 on the device) for every block
holding NaN or Inf (block exponent ``2**ebits - 1``); the codec then
rejects the buffer. ``decode`` computes each block's quantum from its bit
pattern, the values of ``bitplane_cpu.quantum_table``, so that no table
has to be copied to the device.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .bitplane_block import decode_block, encode_block, read_exponent, write_exponent
from .intbits import imax, imin, is_single
from .jit import njit

__all__ = ["MAX_BLOCK", "decode", "encode", "quantum"]

#: the largest block size (``BLOCK_SIZES`` in mpicomp/codecs/bitplane.py): local array sizes
MAX_BLOCK = 64
_MAX_WORDS = MAX_BLOCK // 8


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


@cuda.jit
def encode(src, bs, nplanes, stream, bad):
    """Raw float bits (uint32 for float32, uint64 for float64) -> the codec's stream (uint8)."""
    b = cuda.grid(1)
    n = src.size
    nblocks = (n + bs - 1) // bs
    if b < nblocks:
        single = is_single(src)
        mant_bits = 23 if single else 52
        ebits = 8 if single else 11
        code = cuda.local.array(MAX_BLOCK, np.uint64)
        code8 = cuda.local.array(MAX_BLOCK, np.uint8)
        words = cuda.local.array(_MAX_WORDS, np.uint64)
        bbytes = nplanes * (bs // 8)
        ebytes = (ebits + 7) // 8
        start = b * bs
        if start + bs <= n:
            e = encode_block(
                src, start, bs, nplanes, mant_bits, ebits, stream, b * bbytes, code, code8, words
            )
        else:  # the partial last block, padded with zeros
            tail = cuda.local.array(MAX_BLOCK, np.uint64)
            for i in range(bs):
                tail[i] = np.uint64(src[start + i]) if start + i < n else np.uint64(0)
            e = encode_block(
                tail, 0, bs, nplanes, mant_bits, ebits, stream, b * bbytes, code, code8, words
            )
        write_exponent(stream, nblocks * bbytes + b * ebytes, ebytes, e)
        if e == (1 << ebits) - 1:
            cuda.atomic.add(bad, 0, 1)


@cuda.jit
def decode(stream, bs, nplanes, dst):
    """The codec's stream (uint8) -> float32 or float64 values."""
    b = cuda.grid(1)
    n = dst.size
    nblocks = (n + bs - 1) // bs
    if b < nblocks:
        ebits = 8 if is_single(dst) else 11
        code = cuda.local.array(MAX_BLOCK, np.uint64)
        acc = cuda.local.array(_MAX_WORDS, np.uint64)
        bbytes = nplanes * (bs // 8)
        ebytes = (ebits + 7) // 8
        q = quantum(read_exponent(stream, nblocks * bbytes + b * ebytes, ebytes), ebits, nplanes)
        start = b * bs
        if start + bs <= n:
            decode_block(stream, b * bbytes, bs, nplanes, q, dst, start, code, acc)
        else:  # the partial last block: decoded in full, its head copied out
            tail = cuda.local.array(MAX_BLOCK, np.float64)
            decode_block(stream, b * bbytes, bs, nplanes, q, tail, 0, code, acc)
            for i in range(n - start):
                dst[start + i] = tail[i]
