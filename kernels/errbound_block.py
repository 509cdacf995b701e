"""Error-bounded quantizer: the per-block logic of the ``errbound`` codec.

A value ``x`` becomes the integer ``q = floor(x / step + 1/2)`` (``step`` =
twice the error bound, so ``|x - q * step| <= step / 2``), zigzag-coded as
``z = 2q`` for ``q >= 0``, ``-2q - 1`` below. The decoder's value is
``q * step`` computed in float64 and rounded to the buffer's dtype; the
encoder checks that value against the bound for every value and stores a
block whose check fails (a bound below the dtype's rounding, ``|q|`` past 31
bits) raw, its values' bytes verbatim.

Each block of 32 values is coded the cheapest of these ways, its code byte
saying which (exact costs, ties to the first):

* width ``w`` (code ``w``, 0-32): every ``z`` in ``w`` bits, ``w`` the bit
  length of the block's largest (a block of zeros: no payload at all);
* Rice ``k`` (code ``RICE + k``): ``z >> k`` in unary (that many 0 bits,
  then a 1), then the ``k`` low bits of ``z``: the coding of heavy-tailed
  data such as gradients, where a few large values set the width;
* delta Rice of order 1, 2 or 3 (codes ``DELTA``, ``DELTA2``, ``DELTA3``
  plus ``k``): Rice codes of the residuals ``q[i]`` minus the polynomial
  through the 1, 2 or 3 values before it (Lorenzo predictors on the
  quantized integers, so the bound holds exactly); the ``HISTORY`` values
  before a block are those before it in its group (0 before a group's
  start): a random walk (order 1), smooth data (orders 2 and 3). Only the
  order whose residuals sum least is priced, orders 2 and 3 only where the
  differences sum below the values;
* zero mask (code ``MASK + w``): one bit per value (1: non-zero), then
  each non-zero ``z - 1`` in ``w`` bits: sparse blocks.

Blocks are bit-packed one after the other inside a group of ``GROUP``
blocks (least significant bit first), so a group is one bit stream whose
length the encoder knows from the costs: :func:`block_code` returns each
block's code and bit count, :func:`pack_group` writes a group,
:func:`unpack_group` reads one and reports a stream that runs past the
group's bytes (hostile bytes) instead of reading beyond them, and
:func:`reconstruct_block` makes a block's decoded values from the encoder's
input and the block's code.

These functions allocate nothing and use only scalars and element access,
so the same source compiles for the CPU drivers (``errbound_cpu.py``) and as
device functions for the CUDA kernels (``errbound_cuda.py``): both write the
same bytes. Their caller hands them a scratch row of ``SCRATCH`` int64 (a
block's history, quantized values and codes: a CPU driver's row per
parallel iteration, a CUDA thread's local array). Every integer is an explicit
64-bit scalar (in Numba ``uint64`` mixed with ``int64`` silently becomes
``float64``). The wire format is in ``docs/format.md`` (section errbound).

Speed (the CPU compiler's view): a block is first quantized and checked in
one loop without branches (``_quantize_checked``), which the compiler
vectorizes only when it sees all of it: the loop functions are inlined by
Numba (``NUMBA_INLINE``: an LLVM-inlined callee's loops stay scalar here),
the array index is unsigned (a signed one carries Python's negative-index
wraparound, which stops vectorizing), and a full block's trip count is the
constant ``BLOCK``. The loops use only what AVX2 has (AVX-512 is not on
every x86-64 host): float64 to integer and back through int32, not int64;
no 64-bit multiply (each delta order's loop has its coefficients as
constants: shifts and adds); unsigned shifts of the Rice sums (a signed
64-bit shift right has no AVX2 instruction). The costs then come from
integer loops over the block (the Rice codes of the values and of the
residuals priced in one). Only the packing and unpacking of bits are
serial: the writer stores a whole 64-bit
word per append and keeps under 8 bits pending, the reader tops up to 56-63
bits with one 8-byte load, both without a branch on the bits while 8 bytes
of the group lie ahead (byte-wise near its end, so a group's bytes are only
its own). The writer gathers several codes into one append of up to
``WIDE`` bits (fixed-width codes as many as fit, Rice codes two at a time
where both are short); the reader takes as many fixed-width codes from one
refill as it holds, each shifted out of the word independently, and as many
Rice codes as lie whole in it (a loop with one copy for values and one for
residuals, and one comparison per code: few enough live values that none
is kept in memory); the decoder adds each delta order's prediction back
with shifts and adds, the last three values in locals, and every decoding
loop writes each value as it decodes it (a vector pass after the loop would
reload the integers just stored one by one). A zero mask's non-zeros are
gathered into the code slots, coded as fixed-width codes, and put back at
the mask's set bits.
"""
from __future__ import annotations

import numpy as np

from .errbound_layout import BLOCK, DELTA, DELTA2, DELTA3, GROUP, MASK, NONFINITE, RAW, RICE, WIDEST
from .intbits import clz64, ctz64, imax, imin, is_single
from .jit import NUMBA_INLINE, njit
from .rounding import add_rn, mul_rn

__all__ = ["BLOCK", "GROUP", "NONFINITE", "RAW", "SCRATCH", "block_code", "pack_group",
           "reconstruct_block", "unpack_group"]

#: the largest |q| coded (so a zigzag code fits 32 bits)
_Q_MAX = 2147483647.0
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U8 = np.uint64(8)
_BYTE = np.uint64(0xFF)
#: a sum of codes above any block's (an order not costed)
_NEVER = np.int64(1) << np.int64(62)
#: values before a block that its delta codes predict from (the highest order)
HISTORY = 3
#: the most bits the writer appends at once (several codes gathered: 8 bytes hold them and
#: the fewer than 8 bits pending)
WIDE = 48
#: int64 scratch a caller hands the block functions: a block's history, its values, then
#: their codes
SCRATCH = HISTORY + 2 * BLOCK


@njit(inline="always")
def _reconstructed(qf, step, single):
    """What the decoder makes of the integer ``q`` (``qf``: its value as a float64): ``q *
    step`` rounded to the dtype (float64 here)."""
    v = mul_rn(qf, step)
    if single:
        return np.float64(np.float32(v))
    return v


@njit(inline="always")
def _floor_float(s):
    """``floor(s)`` as a float64 for ``|s| <= 2**31 - 1``: a truncation through int32 and a
    correction without a branch. int32 because its conversions to and from float64
    vectorize on every x86-64 vector unit (int64's need AVX-512: with AVX2 a loop of them
    ran 3x slower), and ``math.floor`` is a library call that blocks vectorizing."""
    t = np.float64(np.int32(s))
    return t - np.float64(t > s)


@njit(inline="always")
def _floor(s):
    """``floor(s)`` as an int64 for ``|s| <= 2**31 - 1`` (:func:`_floor_float`)."""
    return np.int64(np.int32(_floor_float(s)))


@njit(inline="always")
def _nearest(v, inv_step):
    """``floor(v * inv_step + 1/2)`` of a value in range (of a block that is not raw): its
    integer, as the encoder codes it."""
    return _floor(add_rn(mul_rn(v, inv_step), 0.5))


@njit(inline="always")
def _dequantized(v, step):
    """The decoded value of the integer ``v``: ``v * step`` (the caller's store rounds it to
    the dtype)."""
    return np.float64(v) * step


@njit(inline="always")
def _quantized(v, inv_step):
    """``floor(v * inv_step + 1/2)``, or 0 where that is not finite or past 31 bits: a
    delta block's predictor from the value before it (both sides compute it)."""
    s = add_rn(mul_rn(v, inv_step), 0.5)
    if not abs(s) <= _Q_MAX:
        return np.int64(0)
    return _floor(s)


@njit(inline="always")
def _history(x, start, inv_step, q):
    """``q[0:HISTORY]``: ``q`` of the ``HISTORY`` values before ``x[start]``, oldest first,
    0 for those before its group's start (a delta block's predictors)."""
    first = np.int64(start) - np.int64(start) % np.int64(BLOCK * GROUP)
    for j in range(HISTORY):
        at = np.int64(start) - np.int64(HISTORY) + np.int64(j)
        q[j] = _quantized(np.float64(x[at]), inv_step) if at >= first else np.int64(0)


@njit(inline="always")
def _slot(i):
    """The index in ``q`` of a block's value ``i``, unsigned (a signed index carries
    Python's negative-index wraparound, which stops loops vectorizing)."""
    return np.uint64(i) + np.uint64(HISTORY)


@njit(inline="always")
def _code_slot(i):
    """The index in ``q`` of the zigzag code of a block's value ``i`` (unsigned)."""
    return np.uint64(i) + np.uint64(HISTORY + BLOCK)


@njit(inline=NUMBA_INLINE)
def _zigzags(q, n, order):
    """The zigzag codes of the block's residuals of ``order`` (0: its values) into their
    :func:`_code_slot`: a loop that vectorizes, before the serial packing. One loop per
    order, its coefficients constants (shifts and adds: a 64-bit multiply has no AVX2
    instruction)."""
    if order == np.int64(1):
        _zigzags_of(q, n, np.int64(1), np.int64(0), np.int64(0))
    elif order == np.int64(2):
        _zigzags_of(q, n, np.int64(2), np.int64(-1), np.int64(0))
    elif order == np.int64(3):
        _zigzags_of(q, n, np.int64(3), np.int64(-3), np.int64(1))
    else:
        _zigzags_of(q, n, np.int64(0), np.int64(0), np.int64(0))


@njit(inline=NUMBA_INLINE)
def _zigzags_of(q, n, a, b, c):
    """:func:`_zigzags` of the predictor ``(a, b, c)`` (:func:`_prediction`)."""
    for i in range(n):
        q[_code_slot(i)] = _zz(_residual(q, _slot(i), a, b, c))


@njit(inline="always")
def _prediction(q, j, a, b, c):
    """The prediction of ``q[j]`` (``j`` from :func:`_slot`) from the values before it,
    ``a q[j-1] + b q[j-2] + c q[j-3]``: a delta code of order 1, 2 or 3 predicts with the
    polynomial of degree ``order - 1`` through them, ``(a, b, c)`` = ``(1, 0, 0)``,
    ``(2, -1, 0)`` or ``(3, -3, 1)``; order 0 (the values themselves) with ``(0, 0, 0)``."""
    return a * q[j - np.uint64(1)] + b * q[j - np.uint64(2)] + c * q[j - np.uint64(3)]


@njit(inline="always")
def _residual(q, j, a, b, c):
    """``q[j]`` minus its prediction."""
    return q[j] - _prediction(q, j, a, b, c)


@njit(inline="always")
def _zz(d):
    """The zigzag code of the int64 ``d`` (``|d| < 2**62``) as a non-negative int64."""
    return (d << np.int64(1)) ^ (d >> np.int64(63))


@njit(inline="always")
def _bit_length(z):
    """Bits needed for the non-negative int64 ``z`` (0 for 0)."""
    return np.int64(64) - clz64(z)


@njit(inline="always")
def _first_k(total, n):
    """The least of the three Rice parameters tried: two below the bit length of the mean
    code ``total / n``, at least 0."""
    km = _bit_length(total // np.int64(n))
    return km - np.int64(2) if km >= np.int64(2) else np.int64(0)


@njit(inline=NUMBA_INLINE)
def _quantize(x, start, n, inv_step, q):
    """``q[HISTORY + i]`` = the quantized ``x[start + i]``, for a block that is not raw
    (every value in range)."""
    base = np.uint64(start)  # (an unsigned index: no negative-index wraparound to vectorize)
    for i in range(n):
        q[_slot(i)] = _nearest(np.float64(x[base + np.uint64(i)]), inv_step)


@njit(inline=NUMBA_INLINE)
def _quantize_checked(x, start, n, inv_step, step, bound, q):
    """:func:`_quantize` with every value's check, without a branch (the loop vectorizes),
    and the block's :func:`_history`: 0, RAW (a value out of range or off by more than
    ``bound``) or NONFINITE."""
    _history(x, start, inv_step, q)
    off = np.int64(0)
    nonfinite = np.int64(0)
    base = np.uint64(start)  # (an unsigned index: no negative-index wraparound to vectorize)
    for i in range(n):
        v = np.float64(x[base + np.uint64(i)])
        s = add_rn(mul_rn(v, inv_step), 0.5)
        inside = abs(s) <= _Q_MAX  # (False for NaN; tested before the floor, which the
        tf = _floor_float(s if inside else 0.0)  # simulator's int conversion would refuse)
        error = abs(v - _reconstructed(tf, step, is_single(x)))
        off += np.int64(not inside) + np.int64(error > bound)
        nonfinite += np.int64(v - v != 0.0)  # (NaN for NaN and Inf)
        q[_slot(i)] = np.int64(np.int32(tf))
    if nonfinite:
        return np.int64(NONFINITE)
    return np.int64(RAW) if off else np.int64(0)


@njit(inline="always")
def _rice_pick(s0, s1, s2, k0, n):
    """``(k, bits)`` of the cheapest of the Rice codes with ``k0``, ``k0 + 1`` and ``k0 + 2``
    low bits, ``s0``-``s2`` the sums of the codes shifted by those (each step up in ``k``
    costs ``n`` bits and saves what the shift does)."""
    k = k0
    best = s0
    if s1 + n < best:
        k = k0 + np.int64(1)
        best = s1 + n
    if s2 + np.int64(2) * n < best:
        k = k0 + np.int64(2)
        best = s2 + np.int64(2) * n
    return k, best + n * (np.int64(1) + k0)


@njit(inline=NUMBA_INLINE)
def _rices(q, n, order, total0, total):
    """``(k, bits)`` of the cheapest Rice code of the block's values (``total0`` the sum of
    their zigzag codes), then of its residuals of ``order`` (``total`` theirs): one loop
    prices three Rice parameters of each (one loop per order, as in :func:`_zigzags`)."""
    if order == np.int64(1):
        return _rices_of(q, n, np.int64(1), np.int64(0), np.int64(0), total0, total)
    if order == np.int64(2):
        return _rices_of(q, n, np.int64(2), np.int64(-1), np.int64(0), total0, total)
    return _rices_of(q, n, np.int64(3), np.int64(-3), np.int64(1), total0, total)


@njit(inline=NUMBA_INLINE)
def _rices_of(q, n, a, b, c, total0, total):
    """:func:`_rices` of the predictor ``(a, b, c)`` (:func:`_prediction`)."""
    k0 = _first_k(total0, n)
    r0 = _first_k(total, n)
    k1 = np.uint64(k0)
    k2 = np.uint64(r0)
    s0 = _U0
    s1 = _U0
    s2 = _U0
    d0 = _U0
    d1 = _U0
    d2 = _U0
    for i in range(n):
        j = _slot(i)
        z = np.uint64(_zz(q[j]))
        d = np.uint64(_zz(_residual(q, j, a, b, c)))
        s0 += z >> k1
        s1 += z >> (k1 + _U1)
        s2 += z >> (k1 + np.uint64(2))
        d0 += d >> k2
        d1 += d >> (k2 + _U1)
        d2 += d >> (k2 + np.uint64(2))
    k, cost = _rice_pick(np.int64(s0), np.int64(s1), np.int64(s2), k0, n)
    kd, cost_d = _rice_pick(np.int64(d0), np.int64(d1), np.int64(d2), r0, n)
    return k, cost, kd, cost_d


@njit(inline=NUMBA_INLINE)
def block_code(x, start, end, inv_step, step, bound, single, q):
    """``(code byte, payload bits)`` of ``x[start:end]``: the cheapest coding, RAW, or
    NONFINITE for a block holding NaN or Inf. ``q``: scratch of ``SCRATCH`` int64."""
    n = np.int64(end) - np.int64(start)
    if n == np.int64(BLOCK):  # (a trip count the compiler knows: the loop vectorizes whole)
        status = _quantize_checked(x, start, np.int64(BLOCK), inv_step, step, bound, q)
    else:
        status = _quantize_checked(x, start, n, inv_step, step, bound, q)
    if status == np.int64(NONFINITE):
        return status, np.int64(0)
    if status == np.int64(RAW):
        return status, n * np.int64(32 if single else 64)
    # the zigzag codes' sums of the values and of their residuals of order 1, their largest
    widest = np.int64(0)
    nonzero = np.int64(0)
    total0 = np.int64(0)
    total1 = np.int64(0)
    widest_residual = np.int64(0)
    for i in range(n):
        j = _slot(i)
        z = _zz(q[j])
        d1 = _zz(_residual(q, j, np.int64(1), np.int64(0), np.int64(0)))
        widest = imax(widest, z)
        nonzero += np.int64(z != np.int64(0))
        total0 += z
        total1 += d1
        widest_residual = imax(widest_residual, d1)
    # orders 2 and 3 only where the differences beat the values (never on noise-like
    # blocks such as gradients': each order there adds to the residuals)
    total2 = _NEVER
    total3 = _NEVER
    if total1 < total0:
        total2 = np.int64(0)
        total3 = np.int64(0)
        for i in range(n):
            j = _slot(i)
            d2 = _zz(_residual(q, j, np.int64(2), np.int64(-1), np.int64(0)))
            d3 = _zz(_residual(q, j, np.int64(3), np.int64(-3), np.int64(1)))
            total2 += d2
            total3 += d3
            widest_residual = imax(widest_residual, imax(d2, d3))
    w = _bit_length(widest)
    code = w
    best = n * w
    if nonzero > np.int64(0) and nonzero < n:
        wz = _bit_length(widest - np.int64(1))
        cost = n + nonzero * wz
        if cost < best:
            code = np.int64(MASK) + wz
            best = cost
    if w > np.int64(1):
        # a delta code: the order whose residuals sum least (every residual's code within
        # 32 bits, as the decoder requires)
        order = np.int64(1)
        total = total1
        if total2 < total:
            order = np.int64(2)
            total = total2
        if total3 < total:
            order = np.int64(3)
            total = total3
        k, cost, kd, cost_d = _rices(q, n, order, total0, total)
        if k < w and cost < best:
            code = np.int64(RICE) + k
            best = cost
        if widest_residual <= np.int64(0xFFFFFFFF) and cost_d < best:
            code = _delta_code(order) + kd
            best = cost_d
    return code, best


@njit(inline="always")
def _delta_code(order):
    """The first code byte of delta codes of ``order`` (1-3)."""
    if order == np.int64(1):
        return np.int64(DELTA)
    return np.int64(DELTA2) if order == np.int64(2) else np.int64(DELTA3)


@njit(inline="always")
def _is_rice(code):
    """Whether a (valid) code byte is a Rice code of values or residuals."""
    return ((code >= np.int64(RICE) and code < np.int64(MASK))
            or code >= np.int64(DELTA2)) and code != np.int64(RAW)


@njit(inline="always")
def _rice_order(code):
    """``(order, k)`` of a Rice code byte (order 0: the values themselves)."""
    if code >= np.int64(DELTA3):
        return np.int64(3), code - np.int64(DELTA3)
    if code >= np.int64(DELTA2):
        return np.int64(2), code - np.int64(DELTA2)
    if code >= np.int64(DELTA):
        return np.int64(1), code - np.int64(DELTA)
    return np.int64(0), code - np.int64(RICE)


@njit(inline="always")
def _store8(out, p, acc):
    """``out[p:p + 8]`` = ``acc``, little-endian (one unaligned 64-bit store, once the
    compiler merges the byte stores)."""
    at = np.uint64(p)  # (unsigned indices: no negative-index wraparound)
    out[at] = np.uint8(acc & _BYTE)
    out[at + _U1] = np.uint8((acc >> _U8) & _BYTE)
    out[at + np.uint64(2)] = np.uint8((acc >> np.uint64(16)) & _BYTE)
    out[at + np.uint64(3)] = np.uint8((acc >> np.uint64(24)) & _BYTE)
    out[at + np.uint64(4)] = np.uint8((acc >> np.uint64(32)) & _BYTE)
    out[at + np.uint64(5)] = np.uint8((acc >> np.uint64(40)) & _BYTE)
    out[at + np.uint64(6)] = np.uint8((acc >> np.uint64(48)) & _BYTE)
    out[at + np.uint64(7)] = np.uint8(acc >> np.uint64(56))


@njit(inline="always")
def _load8(buf, p):
    """``buf[p:p + 8]`` as a little-endian uint64 (one unaligned load, once the compiler
    merges the byte loads)."""
    at = np.uint64(p)
    return (np.uint64(buf[at]) | (np.uint64(buf[at + _U1]) << _U8)
            | (np.uint64(buf[at + np.uint64(2)]) << np.uint64(16))
            | (np.uint64(buf[at + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(buf[at + np.uint64(4)]) << np.uint64(32))
            | (np.uint64(buf[at + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(buf[at + np.uint64(6)]) << np.uint64(48))
            | (np.uint64(buf[at + np.uint64(7)]) << np.uint64(56)))


@njit(inline="always")
def _put(out, p, stop, acc, fill, value, nbits):
    """Append the ``nbits`` (<= 32) low bits of ``value`` (no higher bits set) to the
    writer ``(p, acc, fill)`` of a group ending before ``out[stop]``: ``fill`` bits pending in
    ``acc``, the next byte at ``out[p]``. While 8 bytes of the group lie ahead, every
    append stores the whole word and keeps fewer than 8 bits pending (no branch on the
    bits); near the group's end, four bytes at a time once 32 bits are pending (the
    group's bit count says they are its own)."""
    acc |= value << np.uint64(fill)
    fill += np.int64(nbits)
    if p + np.int64(8) <= np.int64(stop):
        _store8(out, p, acc)
        whole = fill >> np.int64(3)
        p += whole
        acc >>= np.uint64(whole << np.int64(3))
        fill &= np.int64(7)
    elif fill >= np.int64(32):
        at = np.uint64(p)
        out[at] = np.uint8(acc & _BYTE)
        out[at + _U1] = np.uint8((acc >> _U8) & _BYTE)
        out[at + np.uint64(2)] = np.uint8((acc >> np.uint64(16)) & _BYTE)
        out[at + np.uint64(3)] = np.uint8((acc >> np.uint64(24)) & _BYTE)
        acc >>= np.uint64(32)
        fill -= np.int64(32)
        p += np.int64(4)
    return p, acc, fill


@njit(inline="always")
def _put_wide(out, p, stop, acc, fill, value, nbits):
    """:func:`_put` of up to ``WIDE`` bits (several codes gathered in one word): one store
    while 8 bytes of the group lie ahead (fewer than 8 bits pending, so they fit the
    64-bit word), two appends of at most 32 bits near its end."""
    if p + np.int64(8) <= np.int64(stop) or nbits <= np.int64(32):
        return _put(out, p, stop, acc, fill, value, nbits)
    p, acc, fill = _put(out, p, stop, acc, fill, value & np.uint64(0xFFFFFFFF), 32)
    return _put(out, p, stop, acc, fill, value >> np.uint64(32), nbits - np.int64(32))


@njit(inline="always")
def _flush(out, p, acc, fill):
    """Store the writer's last ``fill`` (< 32) bits."""
    while fill > np.int64(0):
        out[p] = np.uint8(acc & _BYTE)
        acc >>= _U8
        fill -= np.int64(8)
        p += np.int64(1)


@njit(inline="always")
def _group_blocks(group, nblocks):
    """The first block of ``group`` and the one past its last."""
    first = np.int64(group) * np.int64(GROUP)
    last = first + np.int64(GROUP)
    return first, (last if last < np.int64(nblocks) else np.int64(nblocks))


@njit(inline="always")
def _block_values(b, n):
    """The first value of block ``b`` and the one past its last (of ``n`` values)."""
    start = np.int64(b) * np.int64(BLOCK)
    end = start + np.int64(BLOCK)
    return start, (end if end < np.int64(n) else np.int64(n))


@njit(inline=NUMBA_INLINE)
def _put_fixed(out, p, stop, acc, fill, q, n, width):
    """Append the codes in the first ``n`` code slots in ``width`` bits each, as many at a
    time as :data:`WIDE` bits hold."""
    if width == np.int64(0):
        return p, acc, fill
    per = np.int64(WIDE) // width
    i = np.int64(0)
    while i < n:
        take = imin(per, n - i)
        word = _U0
        for j in range(take):
            word |= np.uint64(q[_code_slot(i + j)]) << np.uint64(j * width)
        p, acc, fill = _put_wide(out, p, stop, acc, fill, word, take * width)
        i += take
    return p, acc, fill


@njit(inline="always")
def _rice_word(z, k, low):
    """The Rice code of ``z`` with ``k`` low bits as a word (``z >> k`` zeros, a one, the
    low bits): for a code of fewer than 32 bits."""
    return np.uint64((np.int64(1) | ((z & low) << np.int64(1))) << (z >> k))


@njit(inline=NUMBA_INLINE)
def _put_rice(out, p, stop, acc, fill, q, n, k):
    """Append the Rice codes with ``k`` low bits of the first ``n`` code slots: two codes in
    one append where both are short (the usual case), long quotients 32 zeros at a time."""
    low = (np.int64(1) << k) - np.int64(1)
    short = np.int64(WIDE // 2) - k  # (a quotient below it: a code of at most WIDE / 2 bits)
    i = np.int64(0)
    while i + np.int64(1) < n:
        z0 = q[_code_slot(i)]
        z1 = q[_code_slot(i + np.int64(1))]
        if (z0 >> k) < short and (z1 >> k) < short:
            n0 = (z0 >> k) + k + np.int64(1)
            word = _rice_word(z0, k, low) | (_rice_word(z1, k, low) << np.uint64(n0))
            p, acc, fill = _put_wide(out, p, stop, acc, fill, word,
                                     n0 + (z1 >> k) + k + np.int64(1))
            i += np.int64(2)
            continue
        p, acc, fill = _put_rice1(out, p, stop, acc, fill, z0, k, low)
        i += np.int64(1)
    if i < n:
        p, acc, fill = _put_rice1(out, p, stop, acc, fill, q[_code_slot(i)], k, low)
    return p, acc, fill


@njit(inline="always")
def _put_rice1(out, p, stop, acc, fill, z, k, low):
    """Append one Rice code (of any length)."""
    zeros = z >> k
    if zeros + k < np.int64(32):  # the usual code: one append of all its bits
        return _put(out, p, stop, acc, fill, _rice_word(z, k, low), zeros + k + np.int64(1))
    while zeros >= np.int64(32):
        p, acc, fill = _put(out, p, stop, acc, fill, _U0, 32)
        zeros -= np.int64(32)
    p, acc, fill = _put(out, p, stop, acc, fill, _U1 << np.uint64(zeros), zeros + 1)
    return _put(out, p, stop, acc, fill, np.uint64(z & low), k)


@njit(inline=NUMBA_INLINE)
def pack_group(x, xb, group, inv_step, codes, out, pos, stop, itemsize, q):
    """Write group ``group`` of ``x`` (``xb``: its bytes; ``codes``: every block's code
    byte) as one bit stream at ``out[pos:stop]``. ``q``: scratch of ``SCRATCH`` int64."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    acc = _U0
    fill = np.int64(0)
    for b in range(first, last):
        start, end = _block_values(b, x.size)
        n = end - start
        code = np.int64(codes[b])
        if code == np.int64(RAW):
            for j in range(start * np.int64(itemsize), end * np.int64(itemsize)):
                p, acc, fill = _put(out, p, stop, acc, fill, np.uint64(xb[j]), 8)
            continue
        if code == np.int64(0):
            continue
        if n == np.int64(BLOCK):  # (a trip count the compiler knows: the loop vectorizes)
            _quantize(x, start, np.int64(BLOCK), inv_step, q)
        else:
            _quantize(x, start, n, inv_step, q)
        if code <= np.int64(WIDEST):
            _zigzags(q, n, np.int64(0))
            p, acc, fill = _put_fixed(out, p, stop, acc, fill, q, n, code)
        elif not _is_rice(code):  # a zero mask
            w = code - np.int64(MASK)
            m = np.int64(0)
            for i in range(n):
                m |= np.int64(q[_slot(i)] != np.int64(0)) << i
            p, acc, fill = _put(out, p, stop, acc, fill, np.uint64(m), n)
            rest = np.uint64(m)
            count = np.int64(0)
            while rest != _U0:  # the non-zeros' codes minus one, from the mask's set bits
                i = ctz64(rest)
                rest &= rest - _U1
                q[_code_slot(count)] = _zz(q[_slot(i)]) - np.int64(1)
                count += np.int64(1)
            p, acc, fill = _put_fixed(out, p, stop, acc, fill, q, count, w)
        else:
            order, k = _rice_order(code)
            if order > np.int64(0):  # residuals: their codes first, from the block's history
                _history(x, start, inv_step, q)
                _zigzags(q, n, order)
            else:
                _zigzags(q, n, np.int64(0))
            p, acc, fill = _put_rice(out, p, stop, acc, fill, q, n, k)
    _flush(out, p, acc, fill)


@njit(inline="always")
def _need(buf, p, end, acc, fill, nbits):
    """Refill the reader ``(p, acc, fill)`` from ``buf[p:end]`` to at least ``nbits``
    (<= 32) bits if the group holds them. ``acc``'s low ``fill`` (<= 63) bits are the
    stream's next; bits above them are the stream's too, or 0 (a load's partial byte).
    While 8 bytes of the group lie ahead, one 8-byte load tops ``acc`` up to 56-63 bits
    (no branch on the bits); near the group's end, byte by byte."""
    if p + np.int64(8) <= end:
        acc |= _load8(buf, p) << np.uint64(fill)
        p += (np.int64(63) - fill) >> np.int64(3)
        fill |= np.int64(56)
    elif fill < np.int64(nbits):
        while fill < np.int64(nbits) and p < end:
            acc |= np.uint64(buf[p]) << np.uint64(fill)
            fill += np.int64(8)
            p += np.int64(1)
    return p, acc, fill


@njit(inline="always")
def _unzigzag(z):
    return np.int64(z >> _U1) ^ -np.int64(z & _U1)


@njit(inline=NUMBA_INLINE)
def _get_fixed(buf, p, stop, acc, fill, q, n, width):
    """Read ``n`` codes of ``width`` (0-32) bits into the first ``n`` code slots: ``(p, acc,
    fill, ok)``, not ok where they run past ``stop``. One refill gives as many codes as
    its bits hold (read from the word independently of one another)."""
    if width == np.int64(0):  # (no bits: zeros)
        for i in range(n):
            q[_code_slot(i)] = np.int64(0)
        return p, acc, fill, True
    mask = (_U1 << np.uint64(width)) - _U1
    per = np.int64(56) // width  # (a refill while 8 bytes lie ahead holds 56 bits or more)
    i = np.int64(0)
    while i < n:
        p, acc, fill = _need(buf, p, stop, acc, fill, width)
        if fill < width:
            return p, acc, fill, False
        take = imin(per if fill >= np.int64(56) else np.int64(1), n - i)
        for j in range(take):
            q[_code_slot(i + j)] = np.int64((acc >> np.uint64(j * width)) & mask)
        acc >>= np.uint64(take * width)
        fill -= take * width
        i += take
    return p, acc, fill, True


@njit(inline=NUMBA_INLINE)
def _rice_slow(buf, p, stop, acc, fill, k, most):
    """One Rice code whose unary part the reader's bits do not hold whole: ``(p, acc, fill,
    z)``, ``z`` = -1 where the codes run past ``stop`` or the quotient past ``most``."""
    zeros = np.int64(0)
    while True:
        p, acc, fill = _need(buf, p, stop, acc, fill, 32)
        acc &= (_U1 << np.uint64(fill)) - _U1  # (only the bits the reader holds)
        if fill == np.int64(0):
            return p, acc, fill, np.int64(-1)
        if acc != _U0:
            break
        zeros += fill
        fill = np.int64(0)
        if zeros > most:
            return p, acc, fill, np.int64(-1)
    t = ctz64(acc)
    zeros += t
    if zeros > most:
        return p, acc, fill, np.int64(-1)
    acc >>= np.uint64(t + np.int64(1))
    fill -= t + np.int64(1)
    p, acc, fill = _need(buf, p, stop, acc, fill, k)
    if fill < k:
        return p, acc, fill, np.int64(-1)
    z = (zeros << k) | np.int64(acc & ((_U1 << np.uint64(k)) - _U1))
    acc >>= np.uint64(k)
    fill -= k
    return p, acc, fill, z


@njit(inline="always")
def _get_rice(buf, p, stop, acc, fill, q, n, k, values, out, start, step):
    """Read ``n`` Rice codes of parameter ``k``: ``(p, acc, fill, ok)``, not ok where they
    run past ``stop`` or a quotient past 32 bits. ``values`` (a constant at each call): the
    codes are the block's values, each :func:`_emit`-ted; else residuals, kept in ``q`` for
    :func:`_undo_residuals`. Every code lying whole in the reader's bits is taken without
    a refill between them (``ctz64`` of 0 is 64, past any ``fill``: no test of ``acc``)."""
    low = (_U1 << np.uint64(k)) - _U1
    most = np.int64(0xFFFFFFFF) >> k  # the largest quotient of a 32-bit code
    # The inner loop tracks room = fill - bias, and takes a code while t < room: with k <= 26
    # a quotient below fill - k <= 63 is within most, so bias = k; above, bias is past any
    # fill and the loop takes one code only (checked against most before it).
    bias = k if k <= np.int64(26) else k + np.int64(64)
    i = np.int64(0)
    while i < n:
        p, acc, fill = _need(buf, p, stop, acc, fill, 32)
        t = ctz64(acc)
        if t + k < fill and t <= most:
            room = fill - bias
            while True:  # the codes whole in acc
                v = acc >> np.uint64(t + np.int64(1))  # (t + 1 <= fill < 64)
                z = _unzigzag(np.uint64((t << k) | np.int64(v & low)))
                if values:
                    _emit(q, i, z, out, start, step)
                else:
                    q[_slot(i)] = z
                acc = v >> np.uint64(k)
                room -= t + np.int64(1) + k
                i += np.int64(1)
                t = ctz64(acc)
                if not (i < n and t < room):
                    break
            fill = room + bias
        else:
            p, acc, fill, z = _rice_slow(buf, p, stop, acc, fill, k, most)
            if z < np.int64(0):
                return p, acc, fill, False
            if values:
                _emit(q, i, _unzigzag(np.uint64(z)), out, start, step)
            else:
                q[_slot(i)] = _unzigzag(np.uint64(z))
            i += np.int64(1)
    return p, acc, fill, True


@njit(inline=NUMBA_INLINE)
def _undo_residuals(q, n, order, out, start, step):
    """``q[HISTORY + i]`` += its prediction from the values before it, in order, each then
    :func:`_emit`-ted: a serial loop, each order's coefficients spelled out (shifts and
    adds, no multiplies on the loop's chain). The values it predicts from ride in locals
    (``v1``, ``v2``, ``v3``: the last three decoded): read back from ``q``, each would wait
    on the store just made (a store-to-load round trip on every value's chain)."""
    v1 = q[HISTORY - 1]
    v2 = q[HISTORY - 2]
    if order == np.int64(1):
        for i in range(n):
            v1 = q[_slot(i)] + v1
            _emit(q, i, v1, out, start, step)
    elif order == np.int64(2):
        for i in range(n):
            v = q[_slot(i)] + (v1 << np.int64(1)) - v2
            v2 = v1
            v1 = v
            _emit(q, i, v, out, start, step)
    else:
        v3 = q[HISTORY - 3]
        for i in range(n):
            d = v1 - v2
            v = q[_slot(i)] + d + (d << np.int64(1)) + v3
            v3 = v2
            v2 = v1
            v1 = v
            _emit(q, i, v, out, start, step)


@njit(inline="always")
def _emit(q, i, v, out, start, step):
    """Value ``i`` of a block decoded: its integer ``v`` into ``q[HISTORY + i]`` (a later
    block's history, a residual's prediction) and ``v * step`` into ``out[start + i]``.
    Scalar, inside each decoding loop: its work fits beside the loop's serial chain,
    where a vector pass after it reloaded the integers just stored one by one."""
    q[_slot(i)] = v
    out[np.uint64(start) + np.uint64(i)] = _dequantized(v, step)


@njit(inline=NUMBA_INLINE)
def _zeros(q, n, out, start):
    """A block of ``n`` zeros: ``out[start:start + n]`` = 0, and the next block's history
    (a short path: the general one took several times as long per block of zeros)."""
    base = np.uint64(start)
    for i in range(n):
        out[base + np.uint64(i)] = 0.0
    for j in range(HISTORY):
        q[j] = np.int64(0)


@njit(inline=NUMBA_INLINE)
def unpack_group(buf, pos, end, group, codes, step, inv_step, out, outb, itemsize, q):
    """Decode group ``group`` from ``buf[pos:end]`` into ``out`` (``outb``: its bytes);
    False where the group's codes run past ``end`` (hostile bytes). ``q``: scratch of
    ``SCRATCH`` int64 (a block's history and integers are read into it, each value
    written to ``out`` as it is decoded; a block of zeros takes a short path)."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    stop = np.int64(end)
    acc = _U0
    fill = np.int64(0)
    for j in range(HISTORY):  # a group starts from zeros
        q[j] = np.int64(0)
    for b in range(first, last):
        start, bend = _block_values(b, out.size)
        n = bend - start
        code = np.int64(codes[b])
        if code == np.int64(0):  # a block of zeros
            if n == np.int64(BLOCK):  # (a trip count the compiler knows: one vector store)
                _zeros(q, np.int64(BLOCK), out, start)
            else:
                _zeros(q, n, out, start)
            continue
        if code == np.int64(RAW):
            for j in range(start * np.int64(itemsize), bend * np.int64(itemsize)):
                p, acc, fill = _need(buf, p, stop, acc, fill, 8)
                if fill < np.int64(8):
                    return False
                outb[j] = np.uint8(acc & _BYTE)
                acc >>= _U8
                fill -= np.int64(8)
            for i in range(n):  # (the next block's history: q of these values, as encoded)
                q[_slot(i)] = _quantized(np.float64(out[start + i]), inv_step)
        elif code <= np.int64(WIDEST):
            p, acc, fill, ok = _get_fixed(buf, p, stop, acc, fill, q, n, code)
            if not ok:
                return False
            for i in range(n):
                _emit(q, i, _unzigzag(np.uint64(q[_code_slot(i)])), out, start, step)
        elif code >= np.int64(MASK) and code <= np.int64(MASK + WIDEST):
            w = code - np.int64(MASK)
            p, acc, fill = _need(buf, p, stop, acc, fill, n)
            if fill < n:
                return False
            m = acc & ((_U1 << np.uint64(n)) - _U1)
            acc >>= np.uint64(n)
            fill -= n
            for i in range(n):
                _emit(q, i, np.int64(0), out, start, step)
            count = np.int64(0)
            rest = m
            while rest != _U0:
                rest &= rest - _U1
                count += np.int64(1)
            p, acc, fill, ok = _get_fixed(buf, p, stop, acc, fill, q, count, w)
            if not ok:
                return False
            count = np.int64(0)
            while m != _U0:  # the non-zeros, at the mask's set bits
                i = ctz64(m)
                m &= m - _U1
                _emit(q, i, _unzigzag(np.uint64(q[_code_slot(count)]) + _U1), out, start, step)
                count += np.int64(1)
        else:
            order, k = _rice_order(code)
            if order == np.int64(0):  # (two copies of the loop: no branch on the order in it)
                p, acc, fill, ok = _get_rice(buf, p, stop, acc, fill, q, n, k, True, out,
                                             start, step)
            else:
                p, acc, fill, ok = _get_rice(buf, p, stop, acc, fill, q, n, k, False, out,
                                             start, step)
            if not ok:
                return False
            if order > np.int64(0):  # residuals plus predictions (the encoder's integers)
                _undo_residuals(q, n, order, out, start, step)
        for j in range(HISTORY):  # the last values become the next block's history
            q[j] = q[n + j]
    return True


@njit(inline=NUMBA_INLINE)
def reconstruct_block(x, start, end, code, inv_step, step, out):
    """``out[start:end]``: what :func:`unpack_group` decodes of block ``x[start:end]``
    coded with ``code``, made from ``x`` itself (its encoder holds it): a raw block's
    values, a block of zeros' 0, every other value's integer (:func:`_nearest`, as
    :func:`_quantize` makes it) times ``step`` (:func:`_dequantized`, as :func:`_emit`
    writes it). A loop that vectorizes, against a decode's serial reading."""
    base = np.uint64(start)
    n = np.int64(end) - np.int64(start)
    if code == np.int64(RAW):
        for i in range(n):
            out[base + np.uint64(i)] = x[base + np.uint64(i)]
    elif code == np.int64(0):
        for i in range(n):
            out[base + np.uint64(i)] = 0.0
    else:
        for i in range(n):
            out[base + np.uint64(i)] = _dequantized(
                _nearest(np.float64(x[base + np.uint64(i)]), inv_step), step)
