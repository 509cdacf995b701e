"""Numba CPU drivers of the ``bitplane`` codec (block logic in ``bitplane_block``).

``encode`` and ``decode`` pick a compiled kernel by dtype and by path. The
vector path, for the default block size 32 on little-endian hosts, codes
each block with the 32-lane vector intrinsics of ``bitplane_vector`` (the
same bytes and values, 2x to 5x faster on one thread than the scalar
block code, and nearly as fast at 16 bits per value as at 8: a plane costs
two vector instructions); blocks with the all-ones exponent, which only a corrupt
stream holds, are decoded by the general path. Everything else takes the
general path (``encode_block``/``decode_block``, the GPU's block code).
Each kernel is a separate function so that only what is used gets
compiled, and so that LLVM optimizes each loop nest on its own. The general
block functions are inlined with a literal block size 32 where it applies,
which LLVM unrolls and vectorizes; other block sizes get one generic copy,
to keep compile time down.

The kernels split the blocks into groups of ``GROUP`` blocks and run the
groups with ``prange``; the last, partial block is coded through a
zero-padded copy so that the block functions always see whole blocks. Apart
from the output, a call allocates only ``block_size``-sized scratch: a few
arrays per group and the padded copy of the last block. A call with a
single group runs on one thread (``launch.run_kernel``).

Numba's on-disk cache (``cache=True``) is keyed on this file only: after
editing ``bitplane_block.py`` or ``bitplane_vector.py``, delete
``kernels/__pycache__/bitplane_cpu*`` (or touch this file) so the kernels
are recompiled.
"""
from __future__ import annotations

import sys
from functools import cache

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .bitplane_block import decode_block, encode_block, read_exponent, write_exponent
from .bitplane_vector import LANES, decode_block_vec32, encode_block_vec32
from .intbits import is_single
from .launch import readonly, run_kernel

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["GROUP", "decode", "encode", "quantum_table"]

#: blocks per parallel work item
GROUP = 1024

# kernel paths: the general block functions (any block size and P); the
# vector intrinsics (block size 32, little-endian hosts)
_GENERAL = 0
_VECTOR = 1


@njit(inline="always")
def _layout(proto):
    """(mantissa bits, exponent bits, exponent bytes on the wire) of ``proto``'s dtype.

    Compile-time constants, also inside a ``prange`` body: Numba passes the
    values a parallel loop uses from outside it as run-time arguments (the
    exponent read and write then became loops over the exponent bytes).
    """
    if is_single(proto):
        return 23, 8, 1
    return 52, 11, 2


# _encode and _decode hold the prange loop of the kernels below: Numba inlines
# them (a parallel loop cannot be handed to LLVM), with the path a constant.
@njit(inline="always")
def _encode(src, bs, nplanes, stream, limit, path):
    n = src.size
    nblocks = (n + bs - 1) // bs
    nfull = n // bs
    bbytes = nplanes * (bs // 8)
    exp_off = nblocks * bbytes
    tail = np.zeros(bs, src.dtype)
    tail[: n - nfull * bs] = src[nfull * bs:]
    ngroups = (nblocks + GROUP - 1) // GROUP
    bad = 0
    for g in prange(ngroups):
        mant_bits, ebits, ebytes = _layout(src)
        code = np.empty(bs, np.uint64)
        code8 = np.empty(bs, np.uint8)
        words = np.empty(bs // 8, np.uint64)
        for b in range(g * GROUP, min(nblocks, (g + 1) * GROUP)):
            if b < nfull:
                v, start = src, b * bs
            else:
                v, start = tail, 0
            pos = b * bbytes
            if path == _VECTOR:
                e = encode_block_vec32(v, start, nplanes, stream, pos)
            elif bs == 32:
                e = encode_block(
                    v, start, 32, nplanes, mant_bits, ebits, stream, pos, code, code8, words
                )
            else:
                e = encode_block(
                    v, start, bs, nplanes, mant_bits, ebits, stream, pos, code, code8, words
                )
            write_exponent(stream, exp_off + b * ebytes, ebytes, e)
            if e > limit:  # NaN or Inf (all-ones), or a magnitude the caller bounds
                bad += 1
    return bad


@njit(inline="always")
def _decode(stream, bs, nplanes, pow2, dst, path):
    n = dst.size
    nblocks = (n + bs - 1) // bs
    nfull = n // bs
    bbytes = nplanes * (bs // 8)
    exp_off = nblocks * bbytes
    tail = np.empty(bs, dst.dtype)
    ngroups = (nblocks + GROUP - 1) // GROUP
    for g in prange(ngroups):
        _, ebits, ebytes = _layout(dst)
        code = np.empty(bs, np.uint64)
        acc = np.empty(bs // 8, np.uint64)
        for b in range(g * GROUP, min(nblocks, (g + 1) * GROUP)):
            if b < nfull:
                d, start = dst, b * bs
            else:
                d, start = tail, 0
            e = read_exponent(stream, exp_off + b * ebytes, ebytes)
            if e > (1 << ebits) - 1:  # (a uint16 past 11 bits: corrupt streams only; the
                e = (1 << ebits) - 1  # table has 2**ebits entries)
            q = pow2[e]
            pos = b * bbytes
            # the all-ones exponent (corrupt streams only): general path (bitplane_vector)
            if path == _VECTOR and e != (1 << ebits) - 1:
                decode_block_vec32(stream, pos, nplanes, q, d, start)
            elif bs == 32:
                decode_block(stream, pos, 32, nplanes, q, d, start, code, acc)
            else:
                decode_block(stream, pos, bs, nplanes, q, d, start, code, acc)
    dst[nfull * bs:] = tail[: n - nfull * bs]


# One kernel per (dtype, path); the constant paths fold away at compile time.
@njit(parallel=True, cache=True, nogil=True)
def _encode_f32_vector(src, bs, nplanes, stream, limit):
    return _encode(src, bs, nplanes, stream, limit, _VECTOR)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f32_general(src, bs, nplanes, stream, limit):
    return _encode(src, bs, nplanes, stream, limit, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f64_vector(src, bs, nplanes, stream, limit):
    return _encode(src, bs, nplanes, stream, limit, _VECTOR)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f64_general(src, bs, nplanes, stream, limit):
    return _encode(src, bs, nplanes, stream, limit, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f32_vector(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, pow2, dst, _VECTOR)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f32_general(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, pow2, dst, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f64_vector(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, pow2, dst, _VECTOR)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f64_general(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, pow2, dst, _GENERAL)


_ENCODERS = {
    (4, _VECTOR): _encode_f32_vector,
    (4, _GENERAL): _encode_f32_general,
    (8, _VECTOR): _encode_f64_vector,
    (8, _GENERAL): _encode_f64_general,
}
_DECODERS = {
    (4, _VECTOR): _decode_f32_vector,
    (4, _GENERAL): _decode_f32_general,
    (8, _VECTOR): _decode_f64_vector,
    (8, _GENERAL): _decode_f64_general,
}


def _path(block_size: int) -> int:
    """The kernel path of a block size (the vector path stores little-endian plane words)."""
    return _VECTOR if block_size == LANES and sys.byteorder == "little" else _GENERAL


def encode(bits: np.ndarray, block_size: int, nplanes: int, stream: np.ndarray,
           limit: int | None = None) -> int:
    """Encode float data given as its raw bits (uint32 or uint64, 1-D) into ``stream``.

    ``stream`` is a uint8 array of exactly the codec's size. Returns the
    number of blocks whose exponent ``Emax`` exceeds ``limit``; by default
    ``limit`` is one below the all-ones exponent, so the count is that of
    the blocks holding NaN or Inf (0 when the buffer was encodable). Every
    value of a block that passes decodes to less than ``2**(limit - BIAS + 1)``
    in magnitude.
    """
    kernel = _ENCODERS[(bits.dtype.itemsize, _path(block_size))]
    if limit is None:
        limit = (1 << (8 if bits.dtype.itemsize == 4 else 11)) - 2
    serial = bits.size <= GROUP * block_size  # one work item
    return int(run_kernel(kernel, readonly(bits), block_size, nplanes, stream, limit,
                          serial=serial))


def decode(stream: np.ndarray, block_size: int, nplanes: int, out: np.ndarray) -> None:
    """Decode ``stream`` (uint8, exact size) into the float32 or float64 1-D ``out``."""
    pow2 = quantum_table(out.dtype.itemsize, nplanes)
    kernel = _DECODERS[(out.dtype.itemsize, _path(block_size))]
    serial = out.size <= GROUP * block_size
    run_kernel(kernel, readonly(stream), block_size, nplanes, pow2, out, serial=serial)


@cache
def quantum_table(itemsize: int, nplanes: int) -> np.ndarray:
    """Read-only float64 table ``T[Emax] = 2**(Emax - BIAS + 1 - m)``, built from bits.

    Every entry is exact (float64 subnormals included, for float64 data);
    exponents past float64's range (only reachable from a corrupt stream
    with ``Emax`` at its all-ones value) give ``inf``.
    """
    ebits, bias = (8, 127) if itemsize == 4 else (11, 1023)
    k = np.arange(1 << ebits, dtype=np.int64) - bias + 1 - (nplanes - 1)
    normal = (np.minimum(k, 1024) + 1023).astype(np.uint64) << np.uint64(52)
    subnormal = np.uint64(1) << np.clip(k + 1074, 0, 51).astype(np.uint64)
    table = np.where(k >= -1022, normal, subnormal).view(np.float64)
    table.flags.writeable = False
    return table
