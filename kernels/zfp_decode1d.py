"""ZFP fixed-rate decoding of one 1D block held in a 64-bit register, in branch-free steps.

The inverse of :mod:`zfp_encode1d`, cut the same way so that the CPU driver
can run many blocks in lockstep (SIMD) and a GPU thread one block:

1. :func:`decode_start_1d`: header and the all-zero leading planes;
2. :func:`decode_step_1d`: one bit plane while not every value is significant
   (verbatim bits, then zfp's group tests, through the table ``GT_DEC``),
   repeated while any block has one due;
3. :func:`decode_finish_1d`: the remaining planes (sent verbatim), then the
   inverse negabinary map, lifting and cast.

:func:`decode_block_1d` chains them for one block. The bits read are those
of the general path in :mod:`zfp_block` (and LLNL zfp); tests check both
against zfpy.
"""
from __future__ import annotations

import numpy as np

from .bitstream import low_mask
from .intbits import as_float, ctz64, imax, imin, is_single, reverse_nibbles64, wrap_int, wrap_uint
from .jit import njit
from .zfp_block import POW2, POW2_BIAS, inv_lift4, nbmask

__all__ = ["GT_DEC", "block_bits", "decode_block_1d", "decode_finish_1d", "decode_start_1d",
           "decode_step_1d", "fits_register"]

_U0 = np.uint64(0)
_U1 = np.uint64(1)


def _group_tests_decode(n: int, w: int, budget: int) -> tuple[int, int, int]:
    """zfp's step 3 decoder for a 4-value plane: ``(plane bits, bits read, new n)``.

    Like zfp, a group test read as 1 sets value n's bit even when the budget
    ends before the scan finds it.
    """
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


def _group_test_table() -> np.ndarray:
    """Step 3 of a 4-value plane never reads more than 7 bits, so every case is tabulated.

    ``GT_DEC[(n*8 + min(budget, 7))*128 + next 7 bits]`` packs
    plane bits | bits read << 8 | new n << 12.
    """
    dec = np.zeros(4 * 8 * 128, dtype=np.int32)
    for n in range(4):
        for budget in range(8):
            for w in range(128):
                bits, used, nn = _group_tests_decode(n, w, budget)
                dec[(n * 8 + budget) * 128 + w] = bits | used << 8 | nn << 12
    return dec


GT_DEC = _group_test_table()


@njit(inline="always")
def fits_register(dims, maxbits):
    """True when a block of this shape and budget is coded in one register."""
    return dims == 1 and maxbits <= 64


@njit(inline="always")
def decode_start_1d(blk, maxbits, proto):
    """State after the header and the leading all-zero planes: ``(r, bits, n, k, emax)``.

    ``r`` holds the block's unread bits, ``bits`` how many of the budget are
    left, ``n`` the significant values, ``k`` the planes not yet read. An
    empty block (flag bit 0) has nothing to read.
    """
    if is_single(proto):
        ebits, ebias, intprec = 8, 127, 32
    else:
        ebits, ebias, intprec = 11, 1023, 64
    nonzero = (blk & _U1) != _U0
    emax = np.int64((blk >> _U1) & low_mask(ebits)) - ebias
    r = (blk & low_mask(maxbits)) >> np.uint64(1 + ebits)
    bits = maxbits - 1 - ebits
    z = imin(imin(ctz64(r), bits), intprec)
    r = r >> np.uint64(imin(z, 63))
    bits -= z
    return r, bits if nonzero else 0, 0, intprec - z, emax


@njit(inline="always")
def decode_step_1d(r, bits, n, k, u0, u1, u2, u3):
    """Read plane k-1 if one is due (budget and planes left, n < 3).

    With n = 3 a plane is 4 bits, the last value 3's bit (the group test on
    the last value needs no scan), read with the verbatim planes by
    :func:`decode_finish_1d`.

    Returns ``(r, bits, n, k, u0, u1, u2, u3, due)``; a plane that is not due
    leaves the state as it is.
    """
    due = (bits > 0) & (k > 0) & (n < 3)
    mm = imin(n, bits)
    p = r & low_mask(mm)
    r1 = r >> np.uint64(mm)
    b1 = bits - mm
    d = np.int64(GT_DEC[(imin(n, 3) * 8 + imin(imax(b1, 0), 7)) * 128
                        + np.int64(r1 & np.uint64(127))])
    used = (d >> 8) & 15
    p |= np.uint64(d & 15)
    kk = np.uint64(imax(k - 1, 0))
    p = p if due else _U0
    u0 |= (p & _U1) << kk
    u1 |= ((p >> _U1) & _U1) << kk
    u2 |= ((p >> np.uint64(2)) & _U1) << kk
    u3 |= ((p >> np.uint64(3)) & _U1) << kk
    r = (r1 >> np.uint64(used)) if due else r
    bits = (b1 - used) if due else bits
    n = (d >> 12) if due else n
    k -= np.int64(due)
    return r, bits, n, k, u0, u1, u2, u3, due


@njit(inline="always")
def _compact4(t, i):
    """Bits i, i+4, ..., i+60 of ``t`` to bits 0..15."""
    v = (t >> np.uint64(i)) & np.uint64(0x1111111111111111)
    v = (v | (v >> np.uint64(3))) & np.uint64(0x0303030303030303)
    v = (v | (v >> np.uint64(6))) & np.uint64(0x000F000F000F000F)
    v = (v | (v >> np.uint64(12))) & np.uint64(0x000000FF000000FF)
    return (v | (v >> np.uint64(24))) & np.uint64(0xFFFF)


@njit(inline="always")
def _place16(w, k):
    """The 16 planes ``w`` (plane k-1 in bit 15) moved to planes k-1..k-16 (planes < 0 dropped)."""
    return (w << np.uint64(imax(k - 16, 0))) if k >= 16 else (w >> np.uint64(imin(16 - k, 63)))


@njit(inline="always")
def _inv_lift4_32(x, y, z, w):
    """zfp's inverse lifting with 32-bit wraparound, for int64 values congruent mod 2**32.

    Only the arithmetic shifts need their operand wrapped (``w``, given
    wrapped, and ``y`` after the first step); additions, subtractions and
    left shifts commute with wrapping, so the results are congruent mod
    2**32 to zfp's and the caller wraps them once.
    """
    y = np.int64(np.int32(y + (w >> 1)))
    w = w - (y >> 1)
    y = y + w
    w = (w << 1) - y
    z = z + x
    x = (x << 1) - z
    y = y + z
    z = (z << 1) - y
    w = w + x
    x = (x << 1) - w
    return x, y, z, w


@njit(inline="always")
def decode_finish_1d(r, bits, n, k, u0, u1, u2, u3, emax, proto):
    """The block's 4 values once no plane step is due.

    If at least three values are significant, the rest of the budget holds
    planes k-1, k-2, ... as 4 bits each (value 0 first): up to 16 planes.
    """
    t = r & low_mask(imax(bits, 0))
    # reverse the order of the 16 nibbles: plane k-1 in the top nibble
    t = reverse_nibbles64(t)
    tail = (n >= 3) & (bits > 0) & (k > 0)
    t = t if tail else _U0
    u0 |= _place16(_compact4(t, 0), k)
    u1 |= _place16(_compact4(t, 1), k)
    u2 |= _place16(_compact4(t, 2), k)
    u3 |= _place16(_compact4(t, 3), k)
    m = nbmask(proto)
    if is_single(proto):
        # 32-bit ints congruent mod 2**32 in int64 lanes: see _inv_lift4_32
        a, b, c, d = _inv_lift4_32(np.int64((u0 ^ m) - m), np.int64((u1 ^ m) - m),
                                   np.int64((u2 ^ m) - m),
                                   wrap_int(np.int64((u3 ^ m) - m), proto))
        s = as_float(POW2[emax - 30 + POW2_BIAS], proto)
        # int32 -> float32 is one SIMD instruction where int64 -> float32 may not be
        return (s * as_float(np.int32(a), proto), s * as_float(np.int32(b), proto),
                s * as_float(np.int32(c), proto), s * as_float(np.int32(d), proto))
    a = wrap_int(np.int64(np.uint64(wrap_uint((u0 ^ m) - m, proto))), proto)
    b = wrap_int(np.int64(np.uint64(wrap_uint((u1 ^ m) - m, proto))), proto)
    c = wrap_int(np.int64(np.uint64(wrap_uint((u2 ^ m) - m, proto))), proto)
    d = wrap_int(np.int64(np.uint64(wrap_uint((u3 ^ m) - m, proto))), proto)
    a, b, c, d = inv_lift4(a, b, c, d, proto)
    s = as_float(POW2[emax - 62 + POW2_BIAS], proto)
    return s * as_float(a, proto), s * as_float(b, proto), s * as_float(c, proto), s * as_float(
        d, proto)


@njit(inline="always")
def decode_block_1d(blk, maxbits, proto):
    """The 4 values (of ``proto``'s float type) of a block given as its ``maxbits`` (<= 64) bits."""
    r, bits, n, k, emax = decode_start_1d(blk, maxbits, proto)
    u0 = u1 = u2 = u3 = _U0
    due = True
    while due:
        r, bits, n, k, u0, u1, u2, u3, due = decode_step_1d(r, bits, n, k, u0, u1, u2, u3)
    # an empty block reads no planes: its values decode to +0
    return decode_finish_1d(r, bits, n, k, u0, u1, u2, u3, emax, proto)


@njit(inline="always")
def block_bits(words, b, maxbits):
    """The ``maxbits`` (<= 64) bits of block ``b`` of a fixed-rate stream of 64-bit words."""
    pos = b * maxbits
    w = pos >> 6
    sh = pos & 63
    blk = words[w] >> np.uint64(sh)
    if sh + maxbits > 64 and w + 1 < words.size:
        blk |= words[w + 1] << np.uint64(64 - sh)
    return blk & low_mask(maxbits)
