"""Numba CPU drivers of the ``bitplane`` codec (block logic in ``bitplane_block``).

``encode`` and ``decode`` pick a compiled kernel by dtype and by path. The
fast path, for the default block size 32 and up to 8 bits per value (rate
8.25 and below), uses the one-chunk block functions ``*_block_bytes``,
which give the same bytes about 2x faster. Encoding float32 with block
size 32 and 9 to 24 bits per value (rate 16.25, say) takes the wide path
(``encode_block32``: the one-chunk scheme per 8 code bits, about 1.5x
faster than the general path); everything else takes the general path.
Each kernel is a separate function so that only what is used
gets compiled, and so that LLVM optimizes each loop nest on its own (with
both paths in one loop the fast path ran 2x slower). The block functions
are inlined with a literal block size 32 where it applies, which LLVM
unrolls and vectorizes (1.5x to 2x faster). Other block sizes get one
generic copy, to keep compile time down.

The kernels split the blocks into groups of ``GROUP`` blocks and run the
groups with ``prange``; the last, partial block is coded through a
zero-padded copy so that the block functions always see whole blocks. Apart
from the output, a call allocates only ``block_size``-sized scratch: a few
arrays per group and the padded copy of the last block. A call with a
single group runs on one thread (``launch.call``).

Numba's on-disk cache (``cache=True``) is keyed on this file only: after
editing ``bitplane_block.py``, delete ``kernels/__pycache__/bitplane_cpu*``
(or touch this file) so the kernels are recompiled.
"""
from __future__ import annotations

import sys
from functools import cache

import numpy as np
from numba import njit, prange

from .bitplane_block import (
    decode_block,
    decode_block_bytes,
    encode_block,
    encode_block32,
    encode_block_bytes,
    read_exponent,
    write_exponent,
)
from .launch import call, readonly

__all__ = ["GROUP", "decode", "encode", "quantum_table"]

#: blocks per parallel work item
GROUP = 1024

# kernel paths: the block functions for any block size and P; for block
# size 32 and P <= 8 (``*_block_bytes``); for block size 32 and 9 <= P <= 24
# (``encode_block32``, encoding only: decoding takes the general path)
_GENERAL = 0
_BYTES = 1
_WIDE = 2


@njit(inline="always")
def _encode(src, bs, nplanes, mant_bits, ebits, stream, path):
    n = src.size
    nblocks = (n + bs - 1) // bs
    nfull = n // bs
    bbytes = nplanes * (bs // 8)
    ebytes = (ebits + 7) // 8
    exp_off = nblocks * bbytes
    bad_e = (1 << ebits) - 1
    tail = np.zeros(bs, src.dtype)
    tail[: n - nfull * bs] = src[nfull * bs:]
    ngroups = (nblocks + GROUP - 1) // GROUP
    bad = 0
    for g in prange(ngroups):
        code = np.empty(bs, np.uint64)
        code8 = np.empty(3 * bs, np.uint8)
        words = np.empty(bs // 8, np.uint64)
        for b in range(g * GROUP, min(nblocks, (g + 1) * GROUP)):
            if b < nfull:
                v, start = src, b * bs
            else:
                v, start = tail, 0
            pos = b * bbytes
            if path == _WIDE:
                e = encode_block32(v, start, nplanes, mant_bits, ebits, stream, pos, code8)
            elif path == _GENERAL:
                if bs == 32:
                    e = encode_block(
                        v, start, 32, nplanes, mant_bits, ebits, stream, pos, code, code8, words
                    )
                else:
                    e = encode_block(
                        v, start, bs, nplanes, mant_bits, ebits, stream, pos, code, code8, words
                    )
            else:
                e = encode_block_bytes(
                    v, start, 32, nplanes, mant_bits, ebits, stream, pos, code8, words
                )
            write_exponent(stream, exp_off + b * ebytes, ebytes, e)
            if e == bad_e:
                bad += 1
    return bad


@njit(inline="always")
def _decode(stream, bs, nplanes, ebits, pow2, dst, path):
    n = dst.size
    nblocks = (n + bs - 1) // bs
    nfull = n // bs
    bbytes = nplanes * (bs // 8)
    ebytes = (ebits + 7) // 8
    exp_off = nblocks * bbytes
    tail = np.empty(bs, dst.dtype)
    ngroups = (nblocks + GROUP - 1) // GROUP
    for g in prange(ngroups):
        code = np.empty(bs, np.uint64)
        code8 = np.empty(bs, np.uint8)
        acc = np.empty(bs // 8, np.uint64)
        for b in range(g * GROUP, min(nblocks, (g + 1) * GROUP)):
            if b < nfull:
                d, start = dst, b * bs
            else:
                d, start = tail, 0
            q = pow2[read_exponent(stream, exp_off + b * ebytes, ebytes)]
            pos = b * bbytes
            if path == _GENERAL:
                if bs == 32:
                    decode_block(stream, pos, 32, nplanes, q, d, start, code, acc)
                else:
                    decode_block(stream, pos, bs, nplanes, q, d, start, code, acc)
            else:
                decode_block_bytes(stream, pos, 32, nplanes, q, d, start, acc, code8)
    dst[nfull * bs:] = tail[: n - nfull * bs]


# One kernel per (dtype, path); the constant paths fold away at compile time.
@njit(parallel=True, cache=True, nogil=True)
def _encode_f32_bytes(src, bs, nplanes, stream):
    return _encode(src, bs, nplanes, 23, 8, stream, _BYTES)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f32_general(src, bs, nplanes, stream):
    return _encode(src, bs, nplanes, 23, 8, stream, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f64_bytes(src, bs, nplanes, stream):
    return _encode(src, bs, nplanes, 52, 11, stream, _BYTES)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f64_general(src, bs, nplanes, stream):
    return _encode(src, bs, nplanes, 52, 11, stream, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f32_bytes(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, 8, pow2, dst, _BYTES)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f32_general(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, 8, pow2, dst, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f64_bytes(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, 11, pow2, dst, _BYTES)


@njit(parallel=True, cache=True, nogil=True)
def _decode_f64_general(stream, bs, nplanes, pow2, dst):
    _decode(stream, bs, nplanes, 11, pow2, dst, _GENERAL)


@njit(parallel=True, cache=True, nogil=True)
def _encode_f32_wide(src, bs, nplanes, stream):
    return _encode(src, bs, nplanes, 23, 8, stream, _WIDE)


_ENCODERS = {
    (4, _BYTES): _encode_f32_bytes,
    (4, _WIDE): _encode_f32_wide,
    (4, _GENERAL): _encode_f32_general,
    (8, _BYTES): _encode_f64_bytes,
    (8, _GENERAL): _encode_f64_general,
}
_DECODERS = {
    (4, _BYTES): _decode_f32_bytes,
    (4, _GENERAL): _decode_f32_general,
    (8, _BYTES): _decode_f64_bytes,
    (8, _GENERAL): _decode_f64_general,
}


def _path(itemsize: int, block_size: int, nplanes: int) -> int:
    """The encoder's path; decoding takes the general path where this says ``_WIDE``."""
    if block_size != 32 or nplanes > 24:
        return _GENERAL
    if nplanes <= 8:
        return _BYTES
    # encode_block32 reads its byte scratch as uint64 words (little-endian);
    # float32 only, to keep compile time down
    return _WIDE if itemsize == 4 and sys.byteorder == "little" else _GENERAL


def encode(bits: np.ndarray, block_size: int, nplanes: int, stream: np.ndarray) -> int:
    """Encode float data given as its raw bits (uint32 or uint64, 1-D) into ``stream``.

    ``stream`` is a uint8 array of exactly the codec's size. Returns the
    number of blocks holding NaN or Inf (0 when the buffer was encodable).
    """
    kernel = _ENCODERS[(bits.dtype.itemsize, _path(bits.dtype.itemsize, block_size, nplanes))]
    serial = bits.size <= GROUP * block_size  # one work item
    return int(call(kernel, readonly(bits), block_size, nplanes, stream, serial=serial))


def decode(stream: np.ndarray, block_size: int, nplanes: int, out: np.ndarray) -> None:
    """Decode ``stream`` (uint8, exact size) into the float32 or float64 1-D ``out``."""
    pow2 = quantum_table(out.dtype.itemsize, nplanes)
    path = _path(out.dtype.itemsize, block_size, nplanes)
    kernel = _DECODERS[(out.dtype.itemsize, _GENERAL if path == _WIDE else path)]
    serial = out.size <= GROUP * block_size
    call(kernel, readonly(stream), block_size, nplanes, pow2, out, serial=serial)


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
