"""ZFP fixed-rate coding of one 1D block held in registers.

The common case of the communicator (flat buffers, ``dims=1``) at rates up to
16 bits per value has a budget of at most 64 bits per block, so a whole block
is built in, or read from, one 64-bit register: no scratch arrays, no bit
writer calls inside the block. The bits are exactly those of the general
path in :mod:`zfp_block` (and of LLNL zfp); tests check both against zfpy.

A block whose scale overflows (tiny magnitudes, see docs/format.md) takes
the general path, which reproduces zfp's integer wraparound.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .bitstream import low_mask
from .intbits import as_float, clz64, ctz64, is_single, wrap_int, wrap_uint
from .zfp_block import POW2, POW2_BIAS, fwd_lift4, inv_lift4, nbmask

__all__ = ["decode_block_1d", "encode_block_1d", "fits_register"]

_U1 = np.uint64(1)
_U0 = np.uint64(0)


def _rev_spread_table() -> np.ndarray:
    """Byte -> 32 bits: bit 7-j of the byte goes to bit 4j (plane order reversed, spread by 4)."""
    t = np.zeros(256, dtype=np.uint64)
    for b in range(256):
        t[b] = sum(((b >> (7 - j)) & 1) << (4 * j) for j in range(8))
    return t


def _rev8_table() -> np.ndarray:
    return np.array([int(f"{b:08b}"[::-1], 2) for b in range(256)], dtype=np.uint64)


def _group_tests_encode(n: int, x: int, budget: int) -> tuple[int, int, int]:
    """zfp's step 3 for a 4-value plane: ``(pattern, length, new n)``.

    ``x`` holds the plane's bits from position ``n`` up; at most ``budget``
    bits are written. Follows ``encode_few_ints`` bit for bit.
    """
    pattern = length = 0

    def put(bit: int) -> None:
        nonlocal pattern, length
        pattern |= bit << length
        length += 1

    while budget and n < 4:
        budget -= 1
        if x:
            put(1)
            while budget and n < 3:
                budget -= 1
                put(x & 1)
                if x & 1:
                    break
                x >>= 1
                n += 1
        else:
            put(0)
            break
        x >>= 1
        n += 1
    return pattern, length, n


def _group_tests_decode(n: int, w: int, budget: int) -> tuple[int, int, int]:
    """zfp's step 3 decoder for a 4-value plane: ``(plane bits, bits read, new n)``."""
    x = used = 0
    while n < 4 and budget:
        budget -= 1
        bit = (w >> used) & 1
        used += 1
        if not bit:
            break
        while n < 3 and budget:
            budget -= 1
            bit = (w >> used) & 1
            used += 1
            if bit:
                break
            n += 1
        x |= 1 << n
        n += 1
    return x, used, n


def _group_test_tables() -> tuple[np.ndarray, np.ndarray]:
    """Step 3 of a 4-value plane never takes more than 7 bits, so every case is tabulated.

    ``GT_ENC[n*16 + (plane >> n)]`` (the encoder writes whole patterns and
    cuts the block at its budget afterwards) and
    ``GT_DEC[(n*8 + min(budget, 7))*128 + next 7 bits]`` pack
    (pattern or plane bits) | length << 8 | new n << 12.
    """
    enc = np.zeros(4 * 16, dtype=np.int64)
    dec = np.zeros(4 * 8 * 128, dtype=np.int64)
    for n in range(4):
        for x in range(16):
            pat, length, nn = _group_tests_encode(n, x, 7)
            enc[n * 16 + x] = pat | length << 8 | nn << 12
        for budget in range(8):
            for w in range(128):
                bits, used, nn = _group_tests_decode(n, w, budget)
                dec[(n * 8 + budget) * 128 + w] = bits | used << 8 | nn << 12
    return enc, dec


#: interleaves the bit planes of 4 values into coding order (see _encode_tail)
REV_SPREAD = _rev_spread_table()
REV8 = _rev8_table()
GT_ENC, GT_DEC = _group_test_tables()


@njit(inline="always")
def _encode_tail(u0, u1, u2, u3, k, bits):
    """Bits of planes k-1..0 once all 4 values are significant, cut to ``bits`` (<= 64).

    From then on zfp sends each plane verbatim (4 bits, value 0 first), so
    the tail is the planes' nibbles in decreasing plane order: built a byte
    of planes at a time through a table instead of plane by plane.
    """
    sh = np.uint64(64 - k)
    w0 = u0 << sh
    w1 = u1 << sh
    w2 = u2 << sh
    w3 = u3 << sh
    # two bytes of planes (16 planes, 64 bits) cover any budget; both are
    # always built, which is cheaper than a data-dependent branch
    m8 = np.uint64(255)
    b56 = np.uint64(56)
    b48 = np.uint64(48)
    hi = (REV_SPREAD[(w0 >> b56) & m8] | (REV_SPREAD[(w1 >> b56) & m8] << _U1)
          | (REV_SPREAD[(w2 >> b56) & m8] << np.uint64(2))
          | (REV_SPREAD[(w3 >> b56) & m8] << np.uint64(3)))
    lo = (REV_SPREAD[(w0 >> b48) & m8] | (REV_SPREAD[(w1 >> b48) & m8] << _U1)
          | (REV_SPREAD[(w2 >> b48) & m8] << np.uint64(2))
          | (REV_SPREAD[(w3 >> b48) & m8] << np.uint64(3)))
    tail = hi | (lo << np.uint64(32))
    return tail & low_mask(bits)


@njit(inline="always")
def _gather_nibble_bits(t, i):
    """Bit i of each of the 8 nibbles of the 32-bit ``t``, as a byte (nibble q -> bit q)."""
    y = (t >> np.uint64(i)) & np.uint64(0x11111111)
    y = (y | (y >> np.uint64(3))) & np.uint64(0x03030303)
    y = (y | (y >> np.uint64(6))) & np.uint64(0x000F000F)
    return (y | (y >> np.uint64(12))) & np.uint64(0xFF)


@njit(inline="always")
def _planes16(t, i, k):
    """Value ``i``'s bits of planes k-1..k-16 from 64 tail bits ``t``, in place (k >= 1)."""
    m32 = np.uint64(0xFFFFFFFF)
    w = (REV8[_gather_nibble_bits(t & m32, i)] << np.uint64(8)) | REV8[
        _gather_nibble_bits((t >> np.uint64(32)) & m32, i)]
    up = w << np.uint64(max(k - 16, 0))
    down = w >> np.uint64(max(16 - k, 0))
    return up if k >= 16 else down


@njit(inline="always")
def _decode_tail(r, k, bits):
    """Inverse of :func:`_encode_tail`: the planes k-1..0 of the 4 values from ``r``."""
    r &= low_mask(bits)
    return _planes16(r, 0, k), _planes16(r, 1, k), _planes16(r, 2, k), _planes16(r, 3, k)


@njit(inline="always")
def fits_register(dims, maxbits):
    """True when a block of this shape and budget is coded in one register."""
    return dims == 1 and maxbits <= 64


@njit(inline="always")
def _plane(u0, u1, u2, u3, k):
    kk = np.uint64(k)
    return (((u0 >> kk) & _U1) | (((u1 >> kk) & _U1) << _U1)
            | (((u2 >> kk) & _U1) << np.uint64(2)) | (((u3 >> kk) & _U1) << np.uint64(3)))


@njit(inline="always")
def _group_test_plane(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen, maxbits):
    """Code plane k-1 (verbatim bits, then group tests) if ``k > kstop`` and budget is left.

    Branch-free: a plane that is not due leaves ``blk``, ``blen`` and ``k`` as they are.
    """
    due = (k > kstop) & (blen < maxbits)
    k1 = k - 1
    n = np.int64(c0 > k) + np.int64(c1 > k) + np.int64(c2 > k) + np.int64(c3 > k)
    p = _plane(u0, u1, u2, u3, max(k1, 0))  # plane -1 (not due) would be a bad shift
    g = GT_ENC[n * 16 + np.int64(p >> np.uint64(n))]
    bits = ((p & low_mask(n)) | (np.uint64(g & 127) << np.uint64(n))) << np.uint64(min(blen, 63))
    blk |= bits if due else _U0
    blen += (n + ((g >> 8) & 15)) if due else 0
    return blk, blen, k1 if due else k


@njit(inline="always")
def encode_block_1d(x, base, emax, maxbits):
    """The ``maxbits`` (<= 64) bits of the non-empty, finite 4-value block at ``x[base:]``.

    ``emax`` is the block exponent; the caller has checked that the scale
    ``2**(P-2-emax)`` does not overflow. Returns the bits as one uint64.
    """
    proto = x
    if is_single(proto):
        e = np.uint64(emax + 127)
        hb = 9
        intprec = 32
        s = POW2[30 - emax + POW2_BIAS]
    else:
        e = np.uint64(emax + 1023)
        hb = 12
        intprec = 64
        s = POW2[62 - emax + POW2_BIAS]
    # block floating point in the data's own precision, as zfp does, then
    # zfp's forward lifting
    sf = as_float(s, proto)
    a = np.int64(sf * x[base])
    b = np.int64(sf * x[base + 1])
    c = np.int64(sf * x[base + 2])
    d = np.int64(sf * x[base + 3])
    # |values| <= 2**(P-2) here, so the lifting cannot wrap: int64 arithmetic
    # (a float64 ``proto``) gives zfp's integers without the wrap steps
    a, b, c, d = fwd_lift4(a, b, c, d, POW2)
    m = nbmask(proto)
    u0 = wrap_uint(np.uint64(a) + m, proto) ^ m
    u1 = wrap_uint(np.uint64(b) + m, proto) ^ m
    u2 = wrap_uint(np.uint64(c) + m, proto) ^ m
    u3 = wrap_uint(np.uint64(d) + m, proto) ^ m

    # Embedded coding without a serial chain through the group tests: after
    # plane k, the values 0..n-1 are significant with n = 1 + max{i : u_i has
    # a one in a plane >= k}. With c_i = bit length of u_i | ... | u_3, plane
    # k-1 is coded with n = #{i : c_i > k}. Writing each plane whole and
    # cutting the block at maxbits gives zfp's bits, since zfp stops wherever
    # its budget runs out.
    c3 = 64 - clz64(u3)
    c2 = 64 - clz64(u2 | u3)
    c1 = 64 - clz64(u1 | u2 | u3)
    c0 = 64 - clz64(u0 | u1 | u2 | u3)
    k = c0  # planes >= k are all zero: one 0 bit each
    blk = (e << _U1) | _U1
    blen = hb + intprec - k
    kstop = max(c3 - 1, 0)  # below this plane all four values are significant
    # three planes without branches (most blocks need no more), then a loop
    blk, blen, k = _group_test_plane(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen, maxbits)
    blk, blen, k = _group_test_plane(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen, maxbits)
    blk, blen, k = _group_test_plane(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen, maxbits)
    while k > kstop and blen < maxbits:
        blk, blen, k = _group_test_plane(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen,
                                         maxbits)
    # the rest, branch-free: all four values significant, planes sent verbatim
    tail = _encode_tail(u0, u1, u2, u3, max(k, 1), max(maxbits - blen, 0))
    blk |= (tail << np.uint64(min(blen, 63))) if (blen < maxbits and k > 0) else _U0
    return blk & low_mask(maxbits)


@njit(inline="always")
def decode_block_1d(blk, out, base, t, maxbits):
    """Decode a block given as its ``maxbits`` (<= 64) bits into ``t`` values at ``out[base:]``."""
    proto = out
    if blk & _U1 == 0:
        for i in range(t):
            out[base + i] = 0
        return
    if is_single(proto):
        ebits, ebias, intprec = 8, 127, 32
    else:
        ebits, ebias, intprec = 11, 1023, 64
    emax = np.int64((blk >> _U1) & low_mask(ebits)) - ebias
    r = (blk & low_mask(maxbits)) >> np.uint64(1 + ebits)
    bits = maxbits - 1 - ebits
    z = min(ctz64(r), bits, intprec)
    r = r >> np.uint64(z) if z < 64 else _U0
    bits -= z
    k = intprec - z
    u0 = _U0
    u1 = _U0
    u2 = _U0
    u3 = _U0
    n = 0
    while bits > 0 and k > 0:
        if n == 4:
            t0, t1, t2, t3 = _decode_tail(r, k, bits)
            u0 |= t0
            u1 |= t1
            u2 |= t2
            u3 |= t3
            break
        k -= 1
        mm = min(n, bits)
        p = r & low_mask(mm)
        r >>= np.uint64(mm)
        bits -= mm
        d = GT_DEC[(n * 8 + min(bits, 7)) * 128 + np.int64(r & np.uint64(127))]
        used = (d >> 8) & 15
        p |= np.uint64(d & 15)
        r >>= np.uint64(used)
        bits -= used
        n = d >> 12
        kk = np.uint64(k)
        u0 |= (p & _U1) << kk
        u1 |= ((p >> _U1) & _U1) << kk
        u2 |= ((p >> np.uint64(2)) & _U1) << kk
        u3 |= ((p >> np.uint64(3)) & _U1) << kk
    m = nbmask(proto)
    a = wrap_int(np.int64(wrap_uint((u0 ^ m) - m, proto)), proto)
    b = wrap_int(np.int64(wrap_uint((u1 ^ m) - m, proto)), proto)
    c = wrap_int(np.int64(wrap_uint((u2 ^ m) - m, proto)), proto)
    d = wrap_int(np.int64(wrap_uint((u3 ^ m) - m, proto)), proto)
    a, b, c, d = inv_lift4(a, b, c, d, proto)
    if is_single(proto):
        s = as_float(POW2[emax - 30 + POW2_BIAS], proto)
    else:
        s = as_float(POW2[emax - 62 + POW2_BIAS], proto)
    out[base] = s * as_float(a, proto)
    if t > 1:
        out[base + 1] = s * as_float(b, proto)
    if t > 2:
        out[base + 2] = s * as_float(c, proto)
    if t > 3:
        out[base + 3] = s * as_float(d, proto)
