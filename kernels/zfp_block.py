"""ZFP fixed-rate coding of one block: the per-block logic of LLNL zfp 1.0.1.

Everything here works on one block of 4**dims values held in small arrays,
allocates nothing, and uses only scalar integer/float operations, so the same
functions compile for the CPU (``numba.njit``) and, as device functions, for
the GPU. The format is described in ``docs/format.md``.

Integer block values are held in int64/uint64 arrays; ``wrap_int`` /
``wrap_uint`` reproduce the 32-bit arithmetic zfp uses for float32 data,
including wraparound on the degenerate blocks described in the docs.
"""
from __future__ import annotations

import numpy as np

from .bitstream import flush, get_bits, low_mask, put_bits, put_zeros, refill, skip_bits
from .intbits import as_float, clz64, ctz64, imax, imin, is_single, wrap_int, wrap_uint
from .jit import njit

__all__ = [
    "PERM",
    "block_exponent",
    "encode_blocks",
    "decode_block_ints",
    "encode_block_ints",
    "fwd_cast",
    "fwd_lift4",
    "fwd_xform",
    "gather_block",
    "inv_cast",
    "inv_lift4",
    "inv_xform",
    "pad_block",
]

_U1 = np.uint64(1)


def _perm_tables() -> np.ndarray:
    """Coefficient order by sequency: zfp's ``perm_1``, ``perm_2`` and ``perm_3``.

    Returned as one int64 array: entries [0:4] for 1D, [4:20] for 2D and
    [20:84] for 3D. Coefficients are ordered by total sequency i+j(+k); the
    order within a level is zfp's and is part of the format.
    """
    order_2d = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (0, 2), (2, 1), (1, 2),
                (3, 0), (0, 3), (2, 2), (3, 1), (1, 3), (3, 2), (2, 3), (3, 3)]
    order_3d = [
        (0, 0, 0),
        (1, 0, 0), (0, 1, 0), (0, 0, 1),
        (0, 1, 1), (1, 0, 1), (1, 1, 0), (2, 0, 0), (0, 2, 0), (0, 0, 2),
        (1, 1, 1), (2, 1, 0), (2, 0, 1), (0, 2, 1), (1, 2, 0), (1, 0, 2), (0, 1, 2),
        (3, 0, 0), (0, 3, 0), (0, 0, 3),
        (2, 1, 1), (1, 2, 1), (1, 1, 2), (0, 2, 2), (2, 0, 2), (2, 2, 0),
        (3, 1, 0), (3, 0, 1), (0, 3, 1), (1, 3, 0), (1, 0, 3), (0, 1, 3),
        (1, 2, 2), (2, 1, 2), (2, 2, 1), (3, 1, 1), (1, 3, 1), (1, 1, 3),
        (3, 2, 0), (3, 0, 2), (0, 3, 2), (2, 3, 0), (2, 0, 3), (0, 2, 3),
        (2, 2, 2), (3, 2, 1), (3, 1, 2), (1, 3, 2), (2, 3, 1), (2, 1, 3), (1, 2, 3),
        (0, 3, 3), (3, 0, 3), (3, 3, 0),
        (3, 2, 2), (2, 3, 2), (2, 2, 3), (1, 3, 3), (3, 1, 3), (3, 3, 1),
        (2, 3, 3), (3, 2, 3), (3, 3, 2),
        (3, 3, 3),
    ]
    perm = [0, 1, 2, 3]
    perm += [i + 4 * j for i, j in order_2d]
    perm += [i + 4 * j + 16 * k for i, j, k in order_3d]
    assert sorted(perm[4:20]) == list(range(16)) and sorted(perm[20:]) == list(range(64))
    return np.array(perm, dtype=np.int64)


PERM = _perm_tables()
PERM_OFFSET = (0, 0, 4, 20)  # index by dims


@njit(inline="always")
def pad_block(p, off, n, s):
    """zfp's ``pad_block``: fill a partial 4-vector of ``n`` (1..3) values at stride ``s``."""
    if n <= 1:
        p[off + s] = p[off]
    if n <= 2:
        p[off + 2 * s] = p[off + s]
    if n <= 3:
        p[off + 3 * s] = p[off]


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


#: 2**k as float64 for k in [-POW2_BIAS, 1024): the block scale factors
POW2_BIAS = 1100
POW2 = np.ldexp(1.0, np.arange(-POW2_BIAS, 1024)).astype(np.float64)


@njit(inline="always")
def block_exponent(xbits, base, t, proto):
    """Common exponent of the ``t`` values at ``xbits[base:]`` (raw float bits).

    Returns ``(emax, nonzero, nonfinite)``: zfp's emax is the frexp exponent
    of the largest magnitude, clamped to ``1 - EBIAS`` (padding repeats
    values of the block, so the real values decide it); ``nonzero`` is False
    for an all-zero block and ``nonfinite`` True if it holds NaN or Inf.
    """
    if is_single(proto):
        absmask = np.uint64(0x7FFFFFFF)
        mant = np.uint64(23)
        inf = np.uint64(0x7F800000)
        bias = 127
    else:
        absmask = np.uint64(0x7FFFFFFFFFFFFFFF)
        mant = np.uint64(52)
        inf = np.uint64(0x7FF0000000000000)
        bias = 1023
    amax = np.uint64(0)
    for i in range(t):
        a = np.uint64(xbits[base + i]) & absmask
        amax = imax(amax, a)
    # frexp exponent of a normal number with biased exponent E is E - bias + 1
    e = np.int64(amax >> mant) - bias + 1
    e = imax(e, 1 - bias)
    return e, amax != 0, amax >= inf


@njit(inline="always")
def scale_overflows(emax, proto):
    """True when zfp's scale 2**(P-2-emax) overflows the float type (tiny blocks)."""
    if is_single(proto):
        return 30 - emax > 127
    return 62 - emax > 1023


@njit
def fwd_cast(fblock, iblock, size, emax):
    """Block floating point: ``iblock[i] = (Int)(2**(P-2-emax) * fblock[i])``.

    Where the scale overflows the float type (tiny blocks, see docs), zfp's
    conversion yields the integer minimum for every value; so does this.
    """
    if is_single(fblock):
        k = 30 - emax
        lowest = np.int64(-(2 ** 31))
    else:
        k = 62 - emax
        lowest = np.int64(-(2 ** 63))
    if scale_overflows(emax, fblock):
        for i in range(size):
            iblock[i] = lowest
    else:
        # float64 arithmetic gives the same truncated integers as zfp's
        # float32 product: the scale is a power of two and |result| < 2**30.
        s = POW2[k + POW2_BIAS]
        for i in range(size):
            iblock[i] = np.int64(s * np.float64(fblock[i]))


@njit
def inv_cast(iblock, fblock, size, emax):
    """Inverse of :func:`fwd_cast`: ``fblock[i] = 2**(emax-(P-2)) * (Scalar)iblock[i]``."""
    # Same operation order and precision as zfp: int -> float, then scale.
    if is_single(fblock):
        s = as_float(POW2[emax - 30 + POW2_BIAS], fblock)
    else:
        s = as_float(POW2[emax - 62 + POW2_BIAS], fblock)
    for i in range(size):
        fblock[i] = s * as_float(iblock[i], fblock)


@njit(inline="always")
def fwd_lift4(x, y, z, w, proto):
    """zfp's forward lifting step on a 4-vector, with the wraparound of zfp's Int."""
    x = wrap_int(x + w, proto) >> 1
    w = wrap_int(w - x, proto)
    z = wrap_int(z + y, proto) >> 1
    y = wrap_int(y - z, proto)
    x = wrap_int(x + z, proto) >> 1
    z = wrap_int(z - x, proto)
    w = wrap_int(w + y, proto) >> 1
    y = wrap_int(y - w, proto)
    w = wrap_int(w + (y >> 1), proto)
    y = wrap_int(y - (w >> 1), proto)
    return x, y, z, w


@njit(inline="always")
def inv_lift4(x, y, z, w, proto):
    """zfp's inverse lifting step on a 4-vector, with the wraparound of zfp's Int."""
    y = wrap_int(y + (w >> 1), proto)
    w = wrap_int(w - (y >> 1), proto)
    y = wrap_int(y + w, proto)
    w = wrap_int(wrap_int(w << 1, proto) - y, proto)
    z = wrap_int(z + x, proto)
    x = wrap_int(wrap_int(x << 1, proto) - z, proto)
    y = wrap_int(y + z, proto)
    z = wrap_int(wrap_int(z << 1, proto) - y, proto)
    w = wrap_int(w + x, proto)
    x = wrap_int(wrap_int(x << 1, proto) - w, proto)
    return x, y, z, w


@njit
def fwd_lift(p, off, s, proto):
    """Forward lifting of the 4-vector ``p[off::s]`` (in place)."""
    p[off], p[off + s], p[off + 2 * s], p[off + 3 * s] = fwd_lift4(
        p[off], p[off + s], p[off + 2 * s], p[off + 3 * s], proto)


@njit
def inv_lift(p, off, s, proto):
    """Inverse lifting of the 4-vector ``p[off::s]`` (in place)."""
    p[off], p[off + s], p[off + 2 * s], p[off + 3 * s] = inv_lift4(
        p[off], p[off + s], p[off + 2 * s], p[off + 3 * s], proto)


@njit
def fwd_xform(p, dims, proto):
    """Decorrelating transform of a block: along x, then y, then z."""
    if dims == 1:
        fwd_lift(p, 0, 1, proto)
    elif dims == 2:
        for y in range(4):
            fwd_lift(p, 4 * y, 1, proto)
        for x in range(4):
            fwd_lift(p, x, 4, proto)
    else:
        for z in range(4):
            for y in range(4):
                fwd_lift(p, 4 * y + 16 * z, 1, proto)
        for x in range(4):
            for z in range(4):
                fwd_lift(p, 16 * z + x, 4, proto)
        for y in range(4):
            for x in range(4):
                fwd_lift(p, x + 4 * y, 16, proto)


@njit
def inv_xform(p, dims, proto):
    """Inverse of :func:`fwd_xform`: along z, then y, then x."""
    if dims == 1:
        inv_lift(p, 0, 1, proto)
    elif dims == 2:
        for x in range(4):
            inv_lift(p, x, 4, proto)
        for y in range(4):
            inv_lift(p, 4 * y, 1, proto)
    else:
        for y in range(4):
            for x in range(4):
                inv_lift(p, x + 4 * y, 16, proto)
        for x in range(4):
            for z in range(4):
                inv_lift(p, 16 * z + x, 4, proto)
        for z in range(4):
            for y in range(4):
                inv_lift(p, 4 * y + 16 * z, 1, proto)


@njit(inline="always")
def nbmask(proto):
    if is_single(proto):
        return np.uint64(0xAAAAAAAA)
    return np.uint64(0xAAAAAAAAAAAAAAAA)


@njit
def fwd_order(iblock, ublock, size, perm_off, proto):
    """Reorder by sequency and map two's complement to negabinary."""
    m = nbmask(proto)
    for i in range(size):
        v = wrap_uint(np.uint64(iblock[PERM[perm_off + i]]), proto)
        ublock[i] = wrap_uint(v + m, proto) ^ m


@njit
def inv_order(ublock, iblock, size, perm_off, proto):
    """Map negabinary back to two's complement and undo the sequency order."""
    m = nbmask(proto)
    for i in range(size):
        v = wrap_uint((ublock[i] ^ m) - m, proto)
        iblock[PERM[perm_off + i]] = wrap_int(np.int64(np.uint64(v)), proto)


@njit
def encode_block_ints(words, idx, acc, fill, ublock, size, maxbits, intprec):
    """zfp's ``encode_few_ints``: embedded coding of bit planes, MSB first.

    Writes at most ``maxbits`` bits and returns the writer state and the number
    of bits written. Same bits as zfp, produced a run at a time: leading
    all-zero planes cost one 0 bit each, and a group test plus the zeros
    before the next one-bit are emitted as one pattern.
    """
    bits = maxbits
    ormask = np.uint64(0)
    for i in range(size):
        ormask |= ublock[i]
    # planes above the highest set bit, coded while no value is significant
    z = imin(intprec - (64 - clz64(ormask)), bits)
    idx, acc, fill = put_zeros(words, idx, acc, fill, z)
    bits -= z
    k = intprec - z
    n = 0
    while bits > 0 and k > 0:
        k -= 1
        kk = np.uint64(k)
        x = np.uint64(0)
        for i in range(size):
            x |= ((ublock[i] >> kk) & _U1) << np.uint64(i)
        # step 2: the first n bits of the plane go out verbatim
        m = imin(n, bits)
        if m > 0:
            idx, acc, fill = put_bits(words, idx, acc, fill, x & low_mask(m), m)
            x = x >> np.uint64(m) if m < 64 else np.uint64(0)
            bits -= m
        # step 3: group tests, each followed by the zeros up to the next one-bit
        while bits > 0 and n < size:
            if x == 0:
                idx, acc, fill = put_zeros(words, idx, acc, fill, 1)
                bits -= 1
                break
            t = ctz64(x)
            if n + t == size - 1:
                length = t + 1  # a one in the last place is implied
                pattern = _U1
            else:
                length = t + 2
                pattern = _U1 | (_U1 << np.uint64(t + 1))
            if length > bits:
                length = bits
                pattern &= low_mask(length)
            idx, acc, fill = put_bits(words, idx, acc, fill, pattern, length)
            bits -= length
            x = x >> np.uint64(t + 1) if t < 63 else np.uint64(0)
            n += t + 1
    return idx, acc, fill, maxbits - bits


@njit
def decode_block_ints(words, pos, win, avail, ublock, size, maxbits, intprec):
    """zfp's ``decode_ints``: inverse of :func:`encode_block_ints`.

    Reads at most ``maxbits`` bits; returns the reader state and the number of
    bits read. Runs of zeros are consumed a window at a time.
    """
    for i in range(size):
        ublock[i] = 0
    bits = maxbits
    n = 0
    k = intprec
    # leading empty planes: one 0 bit each while no value is significant
    while bits > 0 and k > 0:
        win, avail = refill(words, pos, win, avail, 1)
        z = imin(imin(ctz64(win), avail), imin(bits, k))
        if z == 0:
            break
        pos, win, avail = skip_bits(pos, win, avail, z)
        bits -= z
        k -= z
    while bits > 0 and k > 0:
        k -= 1
        m = imin(n, bits)
        bits -= m
        x, pos, win, avail = get_bits(words, pos, win, avail, m)
        while n < size and bits > 0:
            bits -= 1
            b, pos, win, avail = get_bits(words, pos, win, avail, 1)
            if b == 0:
                break
            # scan: at most `limit` bits, stopping after the first one-bit
            limit = imin(size - 1 - n, bits)
            if limit > 0:
                win, avail = refill(words, pos, win, avail, limit)
                w = win & low_mask(limit)
                if w != 0:
                    j = ctz64(w) + 1
                    n += j - 1
                else:
                    j = limit
                    n += limit
                pos, win, avail = skip_bits(pos, win, avail, j)
                bits -= j
            x += _U1 << np.uint64(n)
            n += 1
        kk = np.uint64(k)
        i = 0
        while x != 0:
            ublock[i] += (x & _U1) << kk
            x >>= _U1
            i += 1
    return pos, win, avail, maxbits - bits


@njit(inline="always")
def header_bits(proto):
    """1 + EBITS: the bits of a non-empty block's header."""
    if is_single(proto):
        return 9
    return 12


@njit
def encode_block(words, idx, acc, fill, xbits, base, t, fblock, iblock, ublock, dims, maxbits):
    """Encode one gathered block of 4**dims floats as exactly ``maxbits`` bits.

    ``xbits[base:base + t]`` are the raw bits of the block's real values.

    Returns the writer state and whether the block held NaN/Inf.
    """
    size = 1 << (2 * dims)
    proto = fblock
    emax, nonzero, nonfinite = block_exponent(xbits, base, t, proto)
    if not nonzero:
        idx, acc, fill = put_zeros(words, idx, acc, fill, maxbits)
        return idx, acc, fill, nonfinite
    hb = header_bits(proto)
    if is_single(proto):
        e = np.uint64(emax + 127)
        intprec = 32
    else:
        e = np.uint64(emax + 1023)
        intprec = 64
    idx, acc, fill = put_bits(words, idx, acc, fill, (e << _U1) | _U1, hb)
    fwd_cast(fblock, iblock, size, emax)
    fwd_xform(iblock, dims, proto)
    fwd_order(iblock, ublock, size, PERM_OFFSET[dims], proto)
    idx, acc, fill, used = encode_block_ints(words, idx, acc, fill, ublock, size, maxbits - hb,
                                             intprec)
    idx, acc, fill = put_zeros(words, idx, acc, fill, maxbits - hb - used)
    return idx, acc, fill, nonfinite


@njit
def encode_blocks(x, xbits, words, b0, b1, dims, maxbits, fblock, iblock, ublock):
    """Encode blocks ``b0 <= b < b1`` (``b0`` starts a 64-bit word) of the flat ``x``.

    The general path of the CPU driver and of the GPU chunk kernel; returns
    the number of blocks holding NaN/Inf.
    """
    size = 1 << (2 * dims)
    idx = (b0 * maxbits) >> 6
    acc = np.uint64(0)
    fill = 0
    bad = 0
    for b in range(b0, b1):
        base = b * size
        t = imin(size, x.size - base)
        gather_block(x, base, t, fblock, dims)
        idx, acc, fill, nonfinite = encode_block(words, idx, acc, fill, xbits, base, t,
                                                 fblock, iblock, ublock, dims, maxbits)
        bad += np.int64(nonfinite)
    flush(words, idx, acc, fill)
    return bad


@njit
def decode_block(words, pos, win, avail, fblock, iblock, ublock, dims, maxbits):
    """Decode one block of exactly ``maxbits`` bits into ``fblock`` (4**dims values)."""
    size = 1 << (2 * dims)
    proto = fblock
    start = pos
    flag, pos, win, avail = get_bits(words, pos, win, avail, 1)
    if flag == 0:
        for i in range(size):
            fblock[i] = 0
    else:
        if is_single(proto):
            ebits, ebias, intprec = 8, 127, 32
        else:
            ebits, ebias, intprec = 11, 1023, 64
        e, pos, win, avail = get_bits(words, pos, win, avail, ebits)
        emax = np.int64(e) - ebias
        pos, win, avail, _ = decode_block_ints(
            words, pos, win, avail, ublock, size, maxbits - 1 - ebits, intprec
        )
        inv_order(ublock, iblock, size, PERM_OFFSET[dims], proto)
        inv_xform(iblock, dims, proto)
        inv_cast(iblock, fblock, size, emax)
    end = start + maxbits
    if pos != end:
        # skip the block's padding: re-position the reader at the next block
        pos = end
        avail = 0
    return pos, win, avail
