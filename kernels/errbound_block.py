"""Error-bounded quantizer: the per-block logic of the ``errbound`` codec.

A value ``x`` becomes the integer ``q = floor(x / step + 1/2)`` (``step`` =
twice the error bound, so ``|x - q * step| <= step / 2``), zigzag-coded as
``z = 2q`` for ``q >= 0``, ``-2q - 1`` below. The decoder's value is
``q * step`` computed in float64 and rounded to the buffer's dtype; the
encoder checks that value against the bound for every value and stores a
block whose check fails (a bound below the dtype's rounding, ``|q|`` past 31
bits) raw, its values' bytes verbatim.

Each block of 32 values is coded the cheapest of these ways, its code byte
saying which (exact costs in whole bytes, ties to the first):

* width ``w`` (code ``w``, 0-32): every ``z`` in ``w`` bit planes, ``w`` the
  bit length of the block's largest (a block of zeros: no payload at all);
* zero mask (code ``MASK + w``): a 32-bit mask of the non-zeros, then each
  non-zero ``z - 1`` gathered to the first lanes, in ``w`` planes of as many
  bits as there are non-zeros (sparse blocks, such as ReLU gradients');
* delta of order 1, 2 or 3 (codes ``DELTA``, ``DELTA2``, ``DELTA3`` plus
  ``w``): the zigzag codes of the residuals ``q[i]`` minus the polynomial
  through the 1, 2 or 3 values before it (Lorenzo predictors on the
  quantized integers, so the bound holds exactly) in ``w`` planes; the
  ``HISTORY`` values before a block are those before it in its group (0
  before a group's start): a random walk (order 1), smooth data (orders 2
  and 3). Orders 2 and 3 are tried only where order 1's residuals are
  narrower than the values, the narrowest order taken (the lowest of a tie);
* raw (code ``RAW``), also where every coding costs more than the values'
  bytes (a short last block only).

A plane is one 32-bit little-endian word: bit ``i`` is bit ``w - 1 - j`` of
code ``i`` in plane ``j`` (the most significant plane first, lanes past a
short block 0), so every block is a whole number of bytes and a block's
codes are read with vector operations, as bitplane's planes are: one
comparison and one mask move per plane to write, byte accumulators to read
(``errbound_vector.py``, the CPU drivers'). The functions here are the scalar
reference of the same bytes: :func:`block_code` returns each block's code and
bit count (a multiple of 8), :func:`block_codes` fills a block's code slots
with the codes its planes hold, :func:`pack_group` writes a group,
:func:`unpack_group` reads one and reports a group whose blocks run past its
bytes (hostile bytes) instead of reading beyond them, :func:`block_values` and
:func:`mask_values` make a block's values from its decoded codes, and
:func:`reconstruct_block` makes a block's decoded values from the encoder's
input and the block's code.

The warp-cooperative CUDA kernels (``errbound_cuda.py``: a lane a value)
share the per-value and per-block decisions: :func:`quantize_checked_value`
(a value's integer and check), :func:`choose_code` (a block's code from the
widths of its values and residuals), and the small helpers (zigzag codes,
bit lengths, code bytes' fields, the dequantization).

These functions allocate nothing and use only scalars and element access,
so the same source compiles for the CPU drivers (``errbound_cpu.py``) and as
device functions for the CUDA kernels. Their caller hands the block
functions a scratch row of ``SCRATCH`` int64 (a block's history, quantized
values and codes: a CPU driver's row per parallel iteration). Every integer
is an explicit 64-bit scalar (in Numba ``uint64`` mixed with ``int64``
silently becomes ``float64``). The wire format is in
``docs/format.md`` (section errbound).

Speed (the CPU compiler's view): a block is first quantized and checked in
one loop without branches (``_quantize_checked``), which the compiler
vectorizes only when it sees all of it: the loop functions are inlined by
Numba (``NUMBA_INLINE``: an LLVM-inlined callee's loops stay scalar here),
the array index is unsigned (a signed one carries Python's negative-index
wraparound, which stops vectorizing), and a full block's trip count is the
constant ``BLOCK``. The loops use only what AVX2 has (AVX-512 is not on
every x86-64 host): float64 to integer and back through int32, not int64;
no 64-bit multiply (each delta order's loop has its coefficients as
constants: shifts and adds). The widths then come from integer loops over
the block (the maxima of the codes of the values and of the residuals).
The decoder adds each delta order's prediction back with shifts and adds,
the last three values in locals (a serial loop per delta block).
"""
from __future__ import annotations

import numpy as np

from .errbound_layout import BLOCK, DELTA, DELTA2, DELTA3, GROUP, MASK, NONFINITE, RAW, WIDEST
from .intbits import clz64, imax, is_single
from .jit import NUMBA_INLINE, njit
from .rounding import add_rn, floor_rn, mul_rn

__all__ = ["BLOCK", "GROUP", "NONFINITE", "RAW", "SCRATCH", "block_code", "block_code_after",
           "block_codes", "block_values", "carry_history", "mask_values", "pack_group",
           "reconstruct_block", "unpack_group"]

#: the largest |q| coded (so a zigzag code fits 32 bits)
_Q_MAX = 2147483647.0
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U8 = np.uint64(8)
_BYTE = np.uint64(0xFF)
#: values before a block that its delta codes predict from (the highest order)
HISTORY = 3
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
def _floor(s):
    """``floor(s)`` as an int64 for ``|s| <= 2**31 - 1`` (:func:`~.rounding.floor_rn`,
    converted through int32: its conversions to and from float64 vectorize on every x86-64
    vector unit, int64's need AVX-512: with AVX2 a loop of them ran 3x slower)."""
    return np.int64(np.int32(floor_rn(s)))


@njit(inline="always")
def _nearest(v, inv_step):
    """``floor(v * inv_step + 1/2)`` of a value in range (of a block that is not raw): its
    integer, as the encoder codes it."""
    return _floor(add_rn(mul_rn(v, inv_step), 0.5))


@njit(inline="always")
def _dequantized(v, step):
    """The decoded value of the integer ``v``: ``v * step`` (the caller's store rounds it to
    the dtype). ``v`` converts through int32 (exact: a coded value's ``|q|`` is below
    ``2**31``), whose conversion vectorizes with AVX2 where int64's does not."""
    return np.float64(np.int32(v)) * step


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


@njit(inline=NUMBA_INLINE)
def _quantize(x, start, n, inv_step, q):
    """``q[HISTORY + i]`` = the quantized ``x[start + i]``, for a block that is not raw
    (every value in range)."""
    base = np.uint64(start)  # (an unsigned index: no negative-index wraparound to vectorize)
    for i in range(n):
        q[_slot(i)] = _nearest(np.float64(x[base + np.uint64(i)]), inv_step)


@njit(inline=NUMBA_INLINE)
def _quantize_checked(x, start, n, inv_step, step, bound, q):
    """:func:`_quantize` with every value's check, without a branch (the loop vectorizes):
    0, RAW (a value out of range or off by more than ``bound``) or NONFINITE. One test per
    value: a value out of range (NaN and Inf included) is checked against 0, so its error
    is past any bound (NaN's is NaN, which ``not <=`` counts), and its slot holds 0, as
    :func:`_quantized` makes it (a later block's history); only a block that fails is
    scanned again for NaN and Inf."""
    off = np.int64(0)
    base = np.uint64(start)  # (an unsigned index: no negative-index wraparound to vectorize)
    for i in range(n):
        qi, fails = quantize_checked_value(np.float64(x[base + np.uint64(i)]), inv_step, step,
                                           bound, is_single(x))
        off += np.int64(fails)
        q[_slot(i)] = qi
    if off == np.int64(0):
        return np.int64(0)
    for i in range(n):
        v = np.float64(x[base + np.uint64(i)])
        if v - v != 0.0:  # (NaN for NaN and Inf)
            return np.int64(NONFINITE)
    return np.int64(RAW)


@njit(inline="always")
def quantize_checked_value(v, inv_step, step, bound, single):
    """``(q, fails)`` of one value: its integer (0 where out of range), and whether the
    decoder's ``q * step`` misses it by more than ``bound`` (a value out of range, NaN and
    Inf included, is checked against 0: its error is past any bound, NaN's is NaN, which
    ``not <=`` counts)."""
    s = add_rn(mul_rn(v, inv_step), 0.5)
    inside = abs(s) <= _Q_MAX  # (False for NaN; tested before the floor, which the
    tf = floor_rn(s if inside else 0.0)  # simulator's int conversion would refuse)
    error = abs(v - _reconstructed(tf, step, single))
    return np.int64(np.int32(tf)), not error <= bound


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
def block_code(x, start, end, inv_step, step, bound, single, q):
    """``(code byte, payload bits)`` of ``x[start:end]``: the cheapest coding, RAW, or
    NONFINITE for a block holding NaN or Inf. ``q``: scratch of ``SCRATCH`` int64."""
    _history(x, start, inv_step, q)
    return block_code_after(x, start, end, inv_step, step, bound, single, q)


@njit(inline="always")
def carry_history(q, first):
    """``q[0:HISTORY]``: the next block's history, 0 where it starts its group (``first``)
    and else the last values of the block whose value slots ``q`` holds (a full block,
    as every block but a buffer's last is): the values :func:`_history` computes again."""
    for j in range(HISTORY):
        q[j] = np.int64(0) if first else q[np.uint64(BLOCK + j)]


@njit(inline=NUMBA_INLINE)
def block_code_after(x, start, end, inv_step, step, bound, single, q):
    """:func:`block_code` of a block whose history ``q[0:HISTORY]`` holds (a caller that
    codes a group's blocks in order: :func:`carry_history`)."""
    n = np.int64(end) - np.int64(start)
    if n == np.int64(BLOCK):  # (a trip count the compiler knows: the loop vectorizes whole)
        status = _quantize_checked(x, start, np.int64(BLOCK), inv_step, step, bound, q)
    else:
        status = _quantize_checked(x, start, n, inv_step, step, bound, q)
    if status == np.int64(NONFINITE):
        return status, np.int64(0)
    raw_bits = n * np.int64(32 if single else 64)
    if status == np.int64(RAW):
        return status, raw_bits
    # the largest zigzag code of the values and of their residuals of order 1
    widest = np.int64(0)
    nonzero = np.int64(0)
    widest1 = np.int64(0)
    for i in range(n):
        j = _slot(i)
        z = _zz(q[j])
        widest = imax(widest, z)
        nonzero += np.int64(z != np.int64(0))
        widest1 = imax(widest1, _zz(_residual(q, j, np.int64(1), np.int64(0), np.int64(0))))
    widest2 = np.int64(0)
    widest3 = np.int64(0)
    if needs_higher_orders(widest, widest1):
        for i in range(n):
            j = _slot(i)
            widest2 = imax(widest2, _zz(_residual(q, j, np.int64(2), np.int64(-1),
                                                  np.int64(0))))
            widest3 = imax(widest3, _zz(_residual(q, j, np.int64(3), np.int64(-3),
                                                  np.int64(1))))
    return choose_code(n, raw_bits, widest, nonzero, widest1, widest2, widest3)


@njit(inline="always")
def needs_higher_orders(widest, widest1):
    """Whether a block's residuals of orders 2 and 3 are priced: only where those of order 1
    are narrower than the values (never on noise-like blocks such as gradients': each order
    there widens the residuals)."""
    w = _bit_length(widest)
    return w > np.int64(0) and _bit_length(widest1) < w


@njit(inline="always")
def choose_code(n, raw_bits, widest, nonzero, widest1, widest2, widest3):
    """``(code byte, payload bits)`` of a block of ``n`` values (not raw by their check)
    from the largest zigzag code of its values (``widest``), its non-zeros, and the largest
    of its residuals of orders 1-3 (``widest2`` and ``widest3`` read only where
    :func:`needs_higher_orders`): :func:`choose_code_of_widths` of their bit lengths."""
    return choose_code_of_widths(n, raw_bits, _bit_length(widest),
                                 _bit_length(widest - np.int64(1)), nonzero,
                                 _bit_length(widest1), _bit_length(widest2),
                                 _bit_length(widest3))


@njit(inline="always")
def choose_code_of_widths(n, raw_bits, w, wz, nonzero, w1, w2, w3):
    """``(code byte, payload bits)`` of a block of ``n`` values (not raw by their check):
    the cheapest coding, RAW where even that costs more than ``raw_bits``. ``w``: the bit
    length of its values' largest zigzag code; ``wz``: that of its non-zeros' codes minus
    one (read only where it holds both zeros and non-zeros); ``w1``-``w3``: those of its
    residuals of orders 1-3 (orders 2 and 3 read only where ``w1 < w``). (Branches: a
    version with selects ran the encode 5-15% slower.)"""
    code = w
    best = np.int64(4) * w
    if nonzero > np.int64(0) and nonzero < n:
        cost = np.int64(4) + ((nonzero * wz + np.int64(7)) >> np.int64(3))
        if cost < best:
            code = np.int64(MASK) + wz
            best = cost
    if w > np.int64(0):
        order = np.int64(1)
        wd = w1
        if wd < w:  # (needs_higher_orders)
            if w2 < wd:
                order = np.int64(2)
                wd = w2
            if w3 < wd:
                order = np.int64(3)
                wd = w3
        if wd <= np.int64(WIDEST) and np.int64(4) * wd < best:
            code = _delta_code(order) + wd
            best = np.int64(4) * wd
    if np.int64(8) * best > raw_bits:  # (a short last block of wide codes)
        return np.int64(RAW), raw_bits
    return code, np.int64(8) * best


@njit(inline="always")
def _delta_code(order):
    """The first code byte of delta codes of ``order`` (1-3)."""
    if order == np.int64(1):
        return np.int64(DELTA)
    return np.int64(DELTA2) if order == np.int64(2) else np.int64(DELTA3)


@njit(inline="always")
def is_mask(code):
    """Whether a (valid, not RAW) code byte is a zero mask's."""
    return code >= np.int64(MASK) and code < np.int64(DELTA)


@njit(inline="always")
def plane_width(code):
    """The planes of a (valid, not RAW) code byte: its ``w``."""
    if code < np.int64(MASK):
        return code
    if code < np.int64(DELTA):
        return code - np.int64(MASK)
    if code < np.int64(DELTA2):
        return code - np.int64(DELTA)
    return code - (np.int64(DELTA2) if code < np.int64(DELTA3) else np.int64(DELTA3))


@njit(inline="always")
def _delta_order(code):
    """The residuals' order of a code byte (0: the values themselves; not a mask's)."""
    if code < np.int64(MASK):
        return np.int64(0)
    if code < np.int64(DELTA2):
        return np.int64(1)
    return np.int64(2) if code < np.int64(DELTA3) else np.int64(3)


@njit(inline=NUMBA_INLINE)
def block_codes(x, start, n, code, inv_step, q):
    """The code slots of block ``x[start:start + n]`` coded with ``code`` (not 0, not RAW):
    the first ``count`` hold the zigzag codes its planes hold, those of lanes past a short
    block 0 (a plane word covers 32 lanes). Returns ``(w, count, mask)``: the planes'
    width, the codes in them (``n``, or a mask block's non-zeros) and the mask (0 but for a
    mask block)."""
    if n == np.int64(BLOCK):  # (a trip count the compiler knows: the loop vectorizes)
        _quantize(x, start, np.int64(BLOCK), inv_step, q)
    else:
        _quantize(x, start, n, inv_step, q)
        for i in range(n, BLOCK):
            q[_code_slot(i)] = np.int64(0)
    w = plane_width(code)
    if is_mask(code):
        m = np.int64(0)
        count = np.int64(0)
        for i in range(n):  # (no branch: a zero writes 0 to the next non-zero's slot)
            z = _zz(q[_slot(i)])
            nz = np.int64(z != np.int64(0))
            m |= nz << np.int64(i)
            q[_code_slot(count)] = z - nz
            count += nz
        return w, count, m
    order = _delta_order(code)
    if order > np.int64(0):  # residuals: from the block's history
        _history(x, start, inv_step, q)
    _zigzags(q, n, order)
    return w, n, np.int64(0)


@njit(inline="always")
def _store4(out, p, word):
    """``out[p:p + 4]`` = the low 32 bits of ``word`` (uint64), little-endian."""
    at = np.uint64(p)
    out[at] = np.uint8(word & _BYTE)
    out[at + _U1] = np.uint8((word >> _U8) & _BYTE)
    out[at + np.uint64(2)] = np.uint8((word >> np.uint64(16)) & _BYTE)
    out[at + np.uint64(3)] = np.uint8((word >> np.uint64(24)) & _BYTE)


@njit(inline="always")
def _load4(buf, p):
    """``buf[p:p + 4]`` as a little-endian uint64."""
    at = np.uint64(p)
    return (np.uint64(buf[at]) | (np.uint64(buf[at + _U1]) << _U8)
            | (np.uint64(buf[at + np.uint64(2)]) << np.uint64(16))
            | (np.uint64(buf[at + np.uint64(3)]) << np.uint64(24)))


@njit(inline="always")
def _plane(q, j, w, count):
    """Plane ``j`` of ``w`` of the first ``count`` code slots: bit ``w - 1 - j`` of each,
    code ``i`` at bit ``i``."""
    shift = np.int64(w) - np.int64(1) - np.int64(j)
    word = _U0
    for i in range(count):
        word |= np.uint64((q[_code_slot(i)] >> shift) & np.int64(1)) << np.uint64(i)
    return word


@njit(inline=NUMBA_INLINE)
def put_planes(out, p, q, w):
    """The ``w`` planes of the 32 code slots, ``out[p:p + 4w]``."""
    for j in range(w):
        _store4(out, np.int64(p) + np.int64(4 * j), _plane(q, j, w, BLOCK))


@njit(inline="always")
def put_bits(out, p, stop, acc, fill, value, nbits):
    """Append the ``nbits`` (<= 32) low bits of ``value`` (no higher bits set) to the
    writer ``(p, acc, fill)`` ending before ``out[stop]``: ``fill`` bits pending in
    ``acc``, the next byte at ``out[p]``. While 8 bytes lie ahead, every append stores the
    whole word and keeps fewer than 8 bits pending (no branch on the bits); near ``stop``,
    four bytes at a time once 32 bits are pending."""
    acc |= value << np.uint64(fill)
    fill += np.int64(nbits)
    if p + np.int64(8) <= np.int64(stop):
        _store8(out, p, acc)
        whole = fill >> np.int64(3)
        p += whole
        acc >>= np.uint64(whole << np.int64(3))
        fill &= np.int64(7)
    elif fill >= np.int64(32):
        _store4(out, p, acc)
        acc >>= np.uint64(32)
        fill -= np.int64(32)
        p += np.int64(4)
    return p, acc, fill


@njit(inline="always")
def flush_bits(out, p, acc, fill):
    """Store the writer's last ``fill`` (< 32) bits."""
    while fill > np.int64(0):
        out[p] = np.uint8(acc & _BYTE)
        acc >>= _U8
        fill -= np.int64(8)
        p += np.int64(1)


@njit(inline=NUMBA_INLINE)
def _put_mask_planes(out, p, stop, q, count, w):
    """A mask block's ``w`` planes of its ``count`` gathered codes, ``count`` bits each, one
    after the other from ``out[p]`` (least significant bit first), to a whole byte."""
    acc = _U0
    fill = np.int64(0)
    for j in range(w):
        p, acc, fill = put_bits(out, p, stop, acc, fill, _plane(q, j, w, count), count)
    flush_bits(out, p, acc, fill)


@njit(inline=NUMBA_INLINE)
def pack_group(x, xb, group, inv_step, codes, out, pos, stop, itemsize, q):
    """Write group ``group`` of ``x`` (``xb``: its bytes; ``codes``: every block's code
    byte) at ``out[pos:stop]``, block after block. ``q``: scratch of ``SCRATCH`` int64."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    for b in range(first, last):
        start, end = _block_values(b, x.size)
        n = end - start
        code = np.int64(codes[b])
        if code == np.int64(RAW):
            p = raw_bytes(xb, start, end, itemsize, out, p)
            continue
        if code == np.int64(0):
            continue
        w, count, m = block_codes(x, start, n, code, inv_step, q)
        if is_mask(code):
            _store4(out, p, np.uint64(m))
            _put_mask_planes(out, p + np.int64(4), stop, q, count, w)
            p += np.int64(4) + mask_nbytes(count, w)
        else:
            put_planes(out, p, q, w)
            p += np.int64(4) * w


@njit(inline="always")
def raw_bytes(xb, start, end, itemsize, out, p):
    """A raw block: the bytes of values ``start:end`` (``xb``: the values' bytes) at
    ``out[p:]``; returns the position after them."""
    for j in range(start * np.int64(itemsize), end * np.int64(itemsize)):
        out[p] = xb[j]
        p += np.int64(1)
    return p


@njit(inline=NUMBA_INLINE)
def zeros_block(q, n, out, start):
    """A block of zeros decoded (:func:`_zeros`; a full block's trip count a constant the
    compiler knows: one vector store)."""
    if n == np.int64(BLOCK):
        _zeros(q, np.int64(BLOCK), out, start)
    else:
        _zeros(q, n, out, start)


@njit(inline="always")
def mask_head(buf, p, stop, n, w):
    """``(mask, count, size)`` of the mask block of ``n`` values and width ``w`` at
    ``buf[p:stop]``: its mask (a uint64), its non-zeros and its planes' bytes; ``size`` -1
    where the block runs past ``stop`` or its mask has bits past its values."""
    if p + np.int64(4) > stop:
        return _U0, np.int64(0), np.int64(-1)
    m = _load4(buf, p)
    count = popcount32(m)
    size = mask_nbytes(count, w)
    if (m >> np.uint64(n)) != _U0 or p + np.int64(4) + size > stop:
        return m, count, np.int64(-1)
    return m, count, size


@njit(inline="always")
def mask_nbytes(count, w):
    """The bytes of a mask block's planes: ``count`` codes in ``w`` planes."""
    return (np.int64(count) * np.int64(w) + np.int64(7)) >> np.int64(3)


@njit(inline="always")
def popcount32(m):
    """The set bits of a 32-bit mask (a uint64): the parallel bit count without a loop or
    an intrinsic (this code runs in the CUDA simulator too; LLVM turns the idiom into one
    ``popcnt`` where the host has it)."""
    x = m - ((m >> _U1) & np.uint64(0x55555555))
    x = (x & np.uint64(0x33333333)) + ((x >> np.uint64(2)) & np.uint64(0x33333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F)
    return np.int64(((x * np.uint64(0x01010101)) >> np.uint64(24)) & _BYTE)


@njit(inline="always")
def plane_bits(buf, p, off, nbits):
    """``nbits`` (<= 32) bits of the bit string at ``buf[p:]`` from its bit ``off`` (the
    caller has checked that they lie in the buffer): at most 5 byte loads."""
    at = np.int64(p) + (np.int64(off) >> np.int64(3))
    low = np.int64(off) & np.int64(7)
    word = _U0
    for t in range((low + np.int64(nbits) + np.int64(7)) >> np.int64(3)):
        word |= np.uint64(buf[at + t]) << np.uint64(8 * t)
    return (word >> np.uint64(low)) & ((_U1 << np.uint64(nbits)) - _U1)


@njit(inline=NUMBA_INLINE)
def get_planes(buf, p, w, q):
    """The 32 code slots from the ``w`` plane words at ``buf[p:p + 4w]``."""
    for i in range(BLOCK):
        q[_code_slot(i)] = np.int64(0)
    for j in range(w):
        word = _load4(buf, np.int64(p) + np.int64(4 * j))
        shift = np.int64(w) - np.int64(1) - np.int64(j)
        for i in range(BLOCK):
            q[_code_slot(i)] |= np.int64((word >> np.uint64(i)) & _U1) << shift


@njit(inline=NUMBA_INLINE)
def _get_mask_planes(buf, p, count, w, q):
    """The first ``count`` code slots from a mask block's ``w`` planes at ``buf[p:]``."""
    for i in range(BLOCK):
        q[_code_slot(i)] = np.int64(0)
    for j in range(w):
        word = plane_bits(buf, p, np.int64(j) * np.int64(count), count)
        shift = np.int64(w) - np.int64(1) - np.int64(j)
        for i in range(count):
            q[_code_slot(i)] |= np.int64((word >> np.uint64(i)) & _U1) << shift


@njit(inline="always")
def _unzigzag(z):
    return np.int64(z >> _U1) ^ -np.int64(z & _U1)


@njit(inline=NUMBA_INLINE)
def block_values(q, n, code, out, start, step):
    """Decode a block of values or residuals (``code``: width or delta) whose code slots
    hold its codes: each value :func:`_emit`-ted, residuals plus their predictions."""
    order = _delta_order(code)
    if order == np.int64(0):
        for i in range(n):
            _emit(q, i, _unzigzag(np.uint64(q[_code_slot(i)])), out, start, step)
        return
    for i in range(n):
        q[_slot(i)] = _unzigzag(np.uint64(q[_code_slot(i)]))
    _undo_residuals(q, n, order, out, start, step)


@njit(inline=NUMBA_INLINE)
def mask_values(q, n, m, out, start, step):
    """Decode a mask block whose first code slots hold its non-zeros' codes minus one: each
    value :func:`_emit`-ted, 0 where the mask ``m`` (an int64) has no bit."""
    count = np.int64(0)
    for i in range(n):
        bit = (m >> np.int64(i)) & np.int64(1)
        z = np.uint64(q[_code_slot(count)] + np.int64(1))
        _emit(q, i, _unzigzag(z) * bit, out, start, step)
        count += bit


@njit(inline=NUMBA_INLINE)
def raw_values(buf, p, outb, start, bend, itemsize, out, inv_step, q):
    """A raw block: its bytes from ``buf[p:]`` into ``outb``, and each value's integer
    (:func:`_quantized`, as the encoder's history takes it) into its slot."""
    for j in range(start * np.int64(itemsize), bend * np.int64(itemsize)):
        outb[j] = buf[p]
        p += np.int64(1)
    for i in range(bend - start):
        q[_slot(i)] = _quantized(np.float64(out[start + i]), inv_step)


@njit(inline=NUMBA_INLINE)
def unpack_group(buf, pos, end, group, codes, step, inv_step, out, outb, itemsize, q):
    """Decode group ``group`` from ``buf[pos:end]`` into ``out`` (``outb``: its bytes);
    False where the group's blocks run past ``end`` or a mask has bits past its block
    (hostile bytes). ``q``: scratch of ``SCRATCH`` int64."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    stop = np.int64(end)
    for j in range(HISTORY):  # a group starts from zeros
        q[j] = np.int64(0)
    for b in range(first, last):
        start, bend = _block_values(b, out.size)
        n = bend - start
        code = np.int64(codes[b])
        if code == np.int64(0):  # a block of zeros
            zeros_block(q, n, out, start)
            continue
        if code == np.int64(RAW):
            if p + n * np.int64(itemsize) > stop:
                return False
            raw_values(buf, p, outb, start, bend, itemsize, out, inv_step, q)
            p += n * np.int64(itemsize)
        elif is_mask(code):
            w = plane_width(code)
            m, count, size = mask_head(buf, p, stop, n, w)
            if size < np.int64(0):
                return False
            _get_mask_planes(buf, p + np.int64(4), count, w, q)
            mask_values(q, n, np.int64(m), out, start, step)
            p += np.int64(4) + size
        else:
            w = plane_width(code)
            if p + np.int64(4) * w > stop:
                return False
            get_planes(buf, p, w, q)
            block_values(q, n, code, out, start, step)
            p += np.int64(4) * w
        for j in range(HISTORY):  # the last values become the next block's history
            q[j] = q[n + j]
    return True


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
