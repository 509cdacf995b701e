"""ZFP fixed-rate encoding of one 1D block in a 64-bit register, in branch-free steps.

For ``dims=1`` and budgets of at most 64 bits (rates <= 16) a block is built
in one uint64. The work is cut into steps that take and return scalars and
contain no data-dependent branches or table lookups, so that the CPU driver
can run them for many blocks in lockstep (the compiler turns the loops over
blocks into SIMD code) while a GPU thread runs them for one block:

1. :func:`coefficients_1d`: block exponent, zfp's cast to integers (done
   with integer arithmetic on the float bits), forward lifting, negabinary;
2. :func:`planes_start_1d`: header, and the state before the first bit plane;
3. :func:`plane_step_1d`: one bit plane while not every value is significant
   (verbatim bits, then zfp's group tests), repeated while any block is due;
4. :func:`finish_1d`: the remaining planes, sent verbatim, and the cut at
   the budget.

:func:`encode_block_1d` chains them for one block. The bits are those of the
general path in :mod:`zfp_block` (and of LLNL zfp); tests check both against
zfpy.
"""
from __future__ import annotations

import numpy as np

from .bitstream import low_mask
from .intbits import clz64, imax, imin, is_single, reverse_nibbles64
from .jit import njit
from .zfp_block import fwd_lift4, nbmask

__all__ = [
    "TINY_U32",
    "TINY_U64",
    "coefficients_1d",
    "encode_block_1d",
    "finish_1d",
    "plane_step_1d",
    "planes_start_1d",
]

_U0 = np.uint64(0)
_U1 = np.uint64(1)


def _tiny_coefficients(bits: int) -> np.ndarray:
    """Negabinary coefficients of every block whose scale overflows (zfp casts all 4 to INT_MIN).

    Computed once, in Python, with zfp's wrapping lifting and negabinary map.
    """
    proto = np.float32(0) if bits == 32 else np.float64(0)
    imin = -(1 << (bits - 1))
    coeffs = getattr(fwd_lift4, "py_func", fwd_lift4)(imin, imin, imin, imin, proto)
    m = int(getattr(nbmask, "py_func", nbmask)(proto))
    full = (1 << bits) - 1
    return np.array([(((v & full) + m) & full) ^ m for v in coeffs], dtype=np.uint64)


#: the coefficients of a float32 / float64 block whose scale overflows (docs/format.md)
TINY_U32 = _tiny_coefficients(32)
TINY_U64 = _tiny_coefficients(64)


@njit(inline="always")
def _fixed_point(b, emaxb, proto):
    """zfp's cast ``(Int)(2**(P-2-emax) * f)`` of the float with raw bits ``b``, in integers.

    ``emaxb`` is the block's largest biased exponent (scale not overflowing).
    The float product is exact or truncates to 0 (the scale is a power of
    two), so shifting the significand gives the same integer.
    """
    if is_single(proto):
        mbits, emask, shift, dmax = 23, 255, 6, 31  # 6 = (P-2) - 24 significand bits
    else:
        mbits, emask, shift, dmax = 52, 2047, 9, 63
    eb = np.int64((b >> np.uint64(mbits)) & np.uint64(emask))
    mant = (b & low_mask(mbits)) | (np.uint64(eb != 0) << np.uint64(mbits))
    # subnormals have the exponent of the smallest normal; d < 0 only in
    # blocks whose scale overflows, whose values are not used
    d = imin(imax(emaxb - imax(eb, 1), 0), dmax)
    mag = np.int64((mant << np.uint64(shift)) >> np.uint64(d))
    neg = np.int64(b >> np.uint64(63 if not is_single(proto) else 31))
    return (mag ^ -neg) + neg


@njit(inline="always")
def coefficients_1d(b0, b1, b2, b3, proto):
    """Raw bits (uint64) of 4 floats -> ``(u0, u1, u2, u3, e, nonzero, nonfinite)``.

    ``u`` are zfp's negabinary coefficients, ``e`` the biased block exponent
    of the header. A block whose scale overflows (tiny magnitudes, see
    docs/format.md) gets zfp's coefficients for it.
    """
    if is_single(proto):
        absmask = np.uint64(0x7FFFFFFF)
        mbits = np.uint64(23)
        inf = np.uint64(0x7F800000)
        tiny_below = 29  # biased exponent where 2**(30-emax) overflows float32
        m = np.uint64(0xAAAAAAAA)
        full = np.uint64(0xFFFFFFFF)
        tiny = TINY_U32
    else:
        absmask = np.uint64(0x7FFFFFFFFFFFFFFF)
        mbits = np.uint64(52)
        inf = np.uint64(0x7FF0000000000000)
        tiny_below = 61
        m = np.uint64(0xAAAAAAAAAAAAAAAA)
        full = np.uint64(0xFFFFFFFFFFFFFFFF)
        tiny = TINY_U64
    amax = imax(imax(b0 & absmask, b1 & absmask), imax(b2 & absmask, b3 & absmask))
    emaxb = np.int64(amax >> mbits)
    # the values fit 2 bits below the integer width, so int64 lifting never wraps
    a, b, c, d = fwd_lift4(_fixed_point(b0, emaxb, proto), _fixed_point(b1, emaxb, proto),
                           _fixed_point(b2, emaxb, proto), _fixed_point(b3, emaxb, proto),
                           np.float64(0))
    small = emaxb < tiny_below
    u0 = tiny[0] if small else ((np.uint64(np.int64(a)) + m) & full) ^ m
    u1 = tiny[1] if small else ((np.uint64(np.int64(b)) + m) & full) ^ m
    u2 = tiny[2] if small else ((np.uint64(np.int64(c)) + m) & full) ^ m
    u3 = tiny[3] if small else ((np.uint64(np.int64(d)) + m) & full) ^ m
    # header exponent: frexp exponent + bias = biased exponent + 1
    return u0, u1, u2, u3, np.uint64(emaxb + 1), amax != 0, amax >= inf


@njit(inline="always")
def planes_start_1d(u0, u1, u2, u3, e, proto):
    """State before the first bit plane: ``(c0, c1, c2, c3, k, kstop, blk, blen)``.

    After plane k, the values 0..n-1 are significant with n = 1 + max{i :
    u_i has a one in a plane >= k}. With c_i = bit length of u_i | ... | u_3,
    plane k-1 is coded with n = #{i : c_i > k}: no plane depends on the
    last. Planes >= c0 are all zero (one 0 bit each, counted in ``blen``).
    Below ``kstop`` (plane c2-1, where value 2 becomes significant) at
    least three values are significant, and a plane with n = 3 is coded
    like one with n = 4: three verbatim bits, then a group test on value 3
    that is one bit, value 3's bit (a one needs no scan). So those planes
    go to :func:`finish_1d`. ``blk`` holds the header.
    """
    if is_single(proto):
        hb, intprec = 9, 32
    else:
        hb, intprec = 12, 64
    c3 = 64 - clz64(u3)
    c2 = 64 - clz64(u2 | u3)
    c1 = 64 - clz64(u1 | u2 | u3)
    c0 = 64 - clz64(u0 | u1 | u2 | u3)
    return c0, c1, c2, c3, c0, imax(c2 - 1, 0), (e << _U1) | _U1, hb + intprec - c0


@njit(inline="always")
def _group_tests(p, n):
    """zfp's group tests for the plane bits ``p`` (4 bits) of values n..3 (n <= 3).

    Returns ``(pattern, length)``: a 1 before the scan from value n and
    after every one-bit found, each one-bit preceded by the zeros before it,
    a final 0 if the scan ends before value 3, and no bit for a one at value
    3 (implied).
    """
    y = p >> np.uint64(n)
    y0 = y & _U1
    y1 = (y >> _U1) & _U1
    y2 = (y >> np.uint64(2)) & _U1
    y3 = (y >> np.uint64(3)) & _U1
    # bit j of y goes to output position j + 1 + (ones below j)
    out = ((y0 << _U1) | (y1 << (np.uint64(2) + y0)) | (y2 << (np.uint64(3) + y0 + y1))
           | (y3 << (np.uint64(4) + y0 + y1 + y2)))
    # bit length of y < 16 (no vector clz on every CPU)
    t = np.int64(y > _U0) + np.int64(y > _U1) + np.int64(y > np.uint64(3)) + np.int64(
        y > np.uint64(7))
    w = 4 - n
    short = np.int64(t < w)
    length = t + np.int64(y0 + y1 + y2 + y3) + short - np.int64(t == w)
    return (_U1 | out | (out << _U1)) & low_mask(length - short), length


@njit(inline="always")
def plane_step_1d(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen, maxbits):
    """Code plane k-1 (verbatim bits, then group tests) if it is due: ``(blk, blen, k, due)``.

    A plane is due while ``k > kstop`` and budget is left; one that is not
    leaves the state as it is.
    """
    due = (k > kstop) & (blen < maxbits)
    # c3 <= c2 <= kstop < k while a plane is due
    n = np.int64(c0 > k) + np.int64(c1 > k) + np.int64(c2 > k)
    kk = np.uint64(imax(k - 1, 0))  # plane -1 (not due) would be a bad shift
    p = (((u0 >> kk) & _U1) | (((u1 >> kk) & _U1) << _U1)
         | (((u2 >> kk) & _U1) << np.uint64(2)) | (((u3 >> kk) & _U1) << np.uint64(3)))
    pattern, length = _group_tests(p, imin(n, 3))
    bits = ((p & low_mask(n)) | (pattern << np.uint64(n))) << np.uint64(imin(blen, 63))
    blk |= bits if due else _U0
    blen += (n + length) if due else 0
    k -= np.int64(due)
    return blk, blen, k, due


@njit(inline="always")
def _spread4(v):
    """Bits 0..15 of ``v`` to bits 0, 4, ..., 60."""
    v &= np.uint64(0xFFFF)
    v = (v | (v << np.uint64(24))) & np.uint64(0x000000FF000000FF)
    v = (v | (v << np.uint64(12))) & np.uint64(0x000F000F000F000F)
    v = (v | (v << np.uint64(6))) & np.uint64(0x0303030303030303)
    return (v | (v << np.uint64(3))) & np.uint64(0x1111111111111111)


@njit(inline="always")
def finish_1d(u0, u1, u2, u3, k, blk, blen, maxbits):
    """The block's ``maxbits`` bits once no plane step is due.

    From then on (at least three values significant) each plane is 4 bits,
    value 0 first, until the budget or the planes run out (see
    :func:`planes_start_1d`): the next 16 planes (64 bits) are interleaved at once, plane k-1 in
    the lowest nibble.
    """
    sh = np.uint64(64 - imax(k, 1))
    top = np.uint64(48)
    # planes k-1..k-16 of each value, plane k-1 in bit 15, interleaved 4 ways
    t = (_spread4((u0 << sh) >> top) | (_spread4((u1 << sh) >> top) << _U1)
         | (_spread4((u2 << sh) >> top) << np.uint64(2))
         | (_spread4((u3 << sh) >> top) << np.uint64(3)))
    # reverse the order of the 16 nibbles: plane k-1 first
    t = reverse_nibbles64(t)
    t &= low_mask(imax(maxbits - blen, 0))
    blk |= (t << np.uint64(imin(blen, 63))) if (blen < maxbits and k > 0) else _U0
    return blk & low_mask(maxbits)


@njit(inline="always")
def encode_block_1d(b0, b1, b2, b3, maxbits, proto):
    """The ``maxbits`` (<= 64) bits of the block of 4 floats with raw bits ``b0..b3`` (uint64).

    Returns ``(bits, nonfinite)``; an all-zero block (and one holding NaN or
    Inf, whose bits are not meaningful) codes as 0.
    """
    u0, u1, u2, u3, e, nonzero, nonfinite = coefficients_1d(b0, b1, b2, b3, proto)
    c0, c1, c2, c3, k, kstop, blk, blen = planes_start_1d(u0, u1, u2, u3, e, proto)
    due = True
    while due:
        blk, blen, k, due = plane_step_1d(u0, u1, u2, u3, c0, c1, c2, c3, k, kstop, blk, blen,
                                          maxbits)
    blk = finish_1d(u0, u1, u2, u3, k, blk, blen, maxbits)
    return (blk if nonzero and not nonfinite else _U0), nonfinite
