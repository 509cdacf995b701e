"""Bit-plane block quantizer: the per-block logic of the ``bitplane`` codec.

These functions work on one block of ``bs`` values and use only integer
scalars, slices, element access and one constant table (``SPREAD8``): they
allocate nothing (the caller passes scratch arrays) and call no NumPy
routines beyond scalar casts, so the same source compiles for the CPU
(``numba.njit``) and, as device functions, for the GPU. Every integer
operation is done on explicitly typed 64-bit scalars (``np.uint64`` for bit
patterns, ``np.int64`` for exponents and shifts): in Numba, mixing ``uint64``
with ``int64`` silently yields ``float64``.

The bit transposition between codes and planes works on 8 values at a
time in one 64-bit word, one value per byte (SWAR): a mask and a multiply
gather one plane byte, a table lookup spreads one back. Codes wider than 8
bits are handled 8 planes at a time (``encode_block``/``decode_block``).
The CPU codes blocks of 32 values with the vector intrinsics of
``bitplane_vector.py`` instead (the same bytes); these functions are the
GPU's block code and the CPU's for the other block sizes.

A block is coded as ``nplanes = P`` plane words of ``bs`` bits. The value
``i`` of a block becomes the P-bit code ``sign << m | q`` (``m = P - 1``) and
bit ``P - 1 - j`` of that code is bit ``i`` of plane ``j``; plane words are
written little-endian, byte by byte, so the stream does not depend on the
host's byte order or on the alignment of the output buffer. The wire format
and the error bound are described in ``docs/format.md`` (section bitplane).
"""
from __future__ import annotations

import numpy as np

from .intbits import imax, imin
from .jit import NUMBA_INLINE, njit

__all__ = [
    "SPREAD8",
    "block_emax",
    "decode_block",
    "encode_block",
    "quantize_value",
    "read_exponent",
    "value_of_code",
    "write_exponent",
]

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_BYTE = np.uint64(0xFF)
# bit 0 of each byte of a word; times _GATHER, bit 0 of byte t lands on bit 56 + t
_LSB8 = np.uint64(0x0101010101010101)
_GATHER = np.uint64(0x0102040810204080)


def _spread8() -> np.ndarray:
    """``SPREAD8[v]``: bit t of the byte v moved to bit 0 of byte t of a word."""
    v = np.arange(256, dtype=np.uint64)
    out = np.zeros(256, dtype=np.uint64)
    for t in range(8):
        out |= ((v >> np.uint64(t)) & _U1) << np.uint64(8 * t)
    out.flags.writeable = False
    return out


#: byte -> 8 byte lanes, one bit each (the inverse of the ``_GATHER`` multiply)
SPREAD8 = _spread8()


@njit
def block_emax(v, bs, mant_bits, ebits):
    """Largest effective biased exponent ``max(Ef, 1)`` over ``v[0:bs]`` (raw bit patterns)."""
    sh = np.uint64(mant_bits)
    msk = np.uint64((1 << ebits) - 1)
    emax = np.int64(1)
    for i in range(bs):
        ef = np.int64((np.uint64(v[i]) >> sh) & msk)
        emax = imax(emax, ef)
    return emax


@njit
def quantize_value(bits, emax, m, mant_bits, ebits):
    """The P-bit sign-magnitude code ``sign << m | q`` of one value (raw bit pattern).

    ``q = round_half_up(sig / 2**shift)`` with
    ``shift = mant_bits + 1 - m + emax - max(Ef, 1)``, clamped to ``2**m - 1``.
    A shift of ``word_bits - 1`` or more yields 0: clamping it to
    ``word_bits - 1`` keeps the shift defined and still gives 0 because the
    significand has fewer than ``word_bits - 2`` bits.
    """
    word_bits = np.int64(mant_bits + ebits + 1)
    u = np.uint64(bits)
    mb = np.uint64(mant_bits)
    ef = np.int64((u >> mb) & np.uint64((1 << ebits) - 1))
    ee = imax(ef, np.int64(1))
    implicit = np.uint64(imin(ef, np.int64(1))) << mb
    sig = (u & ((_U1 << mb) - _U1)) | implicit
    shift = imin(np.int64(mant_bits + 1 - m) + (emax - ee), word_bits - np.int64(1))
    q = (sig + (_U1 << np.uint64(shift - 1))) >> np.uint64(shift)
    um = np.uint64(m)
    q -= q >> um  # q == 2**m (rounded up past the top) becomes 2**m - 1
    sign = (u >> np.uint64(word_bits - 1)) & _U1
    return (sign << um) | q


@njit(inline=NUMBA_INLINE)
def encode_block(src, start, bs, nplanes, mant_bits, ebits, stream, pos, code, code8, words):
    """Encode ``src[start:start+bs]`` (raw bits) into ``nplanes * bs / 8`` bytes at ``stream[pos]``.

    Returns the block exponent ``Emax`` (the caller stores it;
    ``2**ebits - 1`` flags NaN/Inf). Scratch: ``code`` (``bs`` uint64),
    ``code8`` (``bs`` uint8), ``words`` (``bs / 8`` uint64).

    The planes are built 8 at a time (SWAR): 8 bits of the codes of 8
    values make one word (byte t = value t), and each plane byte is
    gathered from it with a mask and one multiply. The plane loop runs over
    the ``bs / 8`` words together, which LLVM vectorizes.
    """
    v = src[start:start + bs]
    m = np.int64(nplanes - 1)
    emax = block_emax(v, bs, mant_bits, ebits)
    for i in range(bs):
        code[i] = quantize_value(v[i], emax, m, mant_bits, ebits)
    wbytes = bs // 8
    out = stream[pos:pos + nplanes * wbytes]
    for j0 in range(0, nplanes, 8):  # plane j holds code bit P - 1 - j
        j1 = imin(j0 + 8, nplanes)
        lo = np.uint64(nplanes - j1)  # the code bit of plane j1 - 1
        for i in range(bs):
            code8[i] = np.uint8((code[i] >> lo) & _BYTE)
        for g in range(wbytes):
            w = _U0
            for t in range(8):
                w |= np.uint64(code8[8 * g + t]) << np.uint64(8 * t)
            words[g] = w
        for j in range(j0, j1):
            sh = np.uint64(j1 - 1 - j)
            for g in range(wbytes):
                lsb = (words[g] >> sh) & _LSB8
                out[j * wbytes + g] = np.uint8((lsb * _GATHER) >> np.uint64(56))
    return emax


@njit(inline="always")
def decode_block(stream, pos, bs, nplanes, quantum, dst, start, code, acc):
    """Decode one block from ``stream[pos:]`` into ``dst[start:start+bs]``.

    ``quantum`` is ``2**(Emax - BIAS + 1 - m)`` as a float64 (exact, from a
    table built from bits). Scratch: ``code`` (``bs`` uint64) and ``acc``
    (``bs / 8`` uint64).

    Up to 8 planes at a time, each plane byte is spread over 8 byte lanes
    of a word (``SPREAD8``) and shifted in; 8 planes never carry into the
    next lane. The chunks are those of ``encode_block``: a top chunk of
    ``1..8`` planes, then full chunks of 8 (unrolled). ``float64(q) *
    quantum`` is exact, and so is its conversion to float32, because the
    result is a multiple of the format's smallest subnormal with at most
    ``m`` significant bits.
    """
    wbytes = bs // 8
    inp = stream[pos:pos + nplanes * wbytes]
    nlow = (nplanes - 1) // 8
    ntop = nplanes - 8 * nlow
    for g in range(wbytes):
        acc[g] = _U0
    for j in range(ntop):
        for g in range(wbytes):
            acc[g] = (acc[g] << _U1) | SPREAD8[inp[j * wbytes + g]]
    for g in range(wbytes):
        a = acc[g]
        for t in range(8):
            code[8 * g + t] = (a >> np.uint64(8 * t)) & _BYTE
    for c in range(nlow):
        base = ntop + 8 * c
        for g in range(wbytes):
            a = _U0
            for k in range(8):
                a = (a << _U1) | SPREAD8[inp[(base + k) * wbytes + g]]
            acc[g] = a
        for g in range(wbytes):
            a = acc[g]
            for t in range(8):
                i = 8 * g + t
                code[i] = (code[i] << np.uint64(8)) | ((a >> np.uint64(8 * t)) & _BYTE)
    m = np.uint64(nplanes - 1)
    d = dst[start:start + bs]
    for i in range(bs):
        d[i] = value_of_code(code[i], m, quantum)


@njit(inline="always")
def value_of_code(c, m, quantum):
    """The value of the code ``c = sign << m | q`` (``m`` a uint64): ``±q * quantum`` in float64.

    -0.0 when the sign is set and ``q == 0``."""
    x = np.float64(c & ((_U1 << m) - _U1)) * quantum
    return -x if (c >> m) != _U0 else x


@njit(inline="always")
def write_exponent(stream, pos, ebytes, emax):
    """Store a block exponent as ``ebytes`` little-endian bytes at ``stream[pos]``."""
    e = np.uint64(emax)
    for k in range(ebytes):
        stream[pos + k] = np.uint8((e >> np.uint64(8 * k)) & _BYTE)


@njit(inline="always")
def read_exponent(stream, pos, ebytes):
    """Read a block exponent of ``ebytes`` little-endian bytes at ``stream[pos]``."""
    e = np.int64(0)
    for k in range(ebytes):
        e |= np.int64(stream[pos + k]) << np.int64(8 * k)
    return e
