"""A full ``errbound`` block quantized, checked and priced on 32 lanes (CPU only).

``errbound_block.block_code_after`` does this a value at a time on int64
slots, which the compiler vectorizes on 64-bit lanes (with AVX2: 4 a
vector, no 64-bit maximum or conversion instructions). :func:`price_block_vec32` does the
same arithmetic on whole vectors in LLVM IR (``vector_ir``): the 32 values'
integers on 32-bit lanes, each value's check, and the bit lengths the
choice needs (the values' zigzag codes, the non-zeros' codes minus one,
the residuals of orders 1-3), each a bitwise OR over the lanes, whose bit
length is the largest code's. :func:`residual_codes` makes the zigzag codes
of the chosen order for the planes the same way. A float32 block is quantized
in single precision where that is provably float64's result (:func:`_quantize_single`),
else in float64 as the format has it.

Integers on 32 bits give the int64 results exactly where nothing overflows:
every integer and the history's below ``2**27`` in magnitude (a residual of
order 3 is then below ``2**30``). A block outside that, or with a value that
fails its check (a raw block, NaN or Inf), is left to the scalar code: the
same bytes either way (``tests/test_errbound.py`` compares them). The codes
of a chosen order never overflow: a delta code of width ``w <= 32`` has
residuals that fit 32 bits, which their computation modulo ``2**32`` gives.
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .errbound_block import HISTORY
from .errbound_layout import BLOCK
from .vector_ir import I32, I64, call_intrinsic, element_pointer, load, splat, store, vector

__all__ = ["CODES32", "FALLBACK", "VALUES32", "packed_codes", "packed_values",
           "price_block_vec32", "residual_codes"]

#: ``price_block_vec32``'s status for a block the scalar code prices
FALLBACK = 1
_LANES = BLOCK
_W32 = vector(I32, _LANES)
_F64 = vector(ir.DoubleType(), _LANES)
_F32 = vector(ir.FloatType(), _LANES)
#: the largest magnitude of the 32-bit path (as a bound on the zigzag codes' OR)
_GUARD = 1 << 28
#: the int64 slots of ``q`` where :func:`price_block_vec32` packs a full block's values
#: and its mask codes as int32 lanes (its code slots: 16 int64 slots each)
VALUES32 = HISTORY + BLOCK
CODES32 = HISTORY + BLOCK + BLOCK // 2
#: ``floor(x * inv_step + 1/2)``'s largest magnitude (31 bits)
_Q_MAX = 2147483647.0


def _or_lanes(b, v):
    """The bitwise OR of the lanes of ``v``."""
    return call_intrinsic(b, f"llvm.vector.reduce.or.v{_LANES}i32", I32, v)


def _bit_length(b, v):
    """The bits the non-negative ``v`` (i32) needs, as an i64 (0 for 0)."""
    zeros = call_intrinsic(b, "llvm.ctlz.i32", I32, v, ir.Constant(ir.IntType(1), 0))
    return b.zext(b.sub(ir.Constant(I32, 32), zeros), I64)


def _zigzag(b, d):
    """The zigzag codes of the i32 lanes ``d``: ``2d`` for ``d >= 0``, ``-2d - 1`` below."""
    return b.xor(b.shl(d, splat(b, 1, _W32)), b.ashr(d, splat(b, 31, _W32)))


def _history_vector(b, context, qtype, qv):
    """The 32-lane vector whose last three lanes hold the history slots ``q[0:3]`` (oldest
    first) as i32, zeros elsewhere: the lanes a shuffle puts before the block's values."""
    h = ir.Constant(_W32, [0] * _LANES)
    for j in range(HISTORY):
        slot = b.load(element_pointer(context, b, qtype, qv, ir.Constant(I64, j)))
        h = b.insert_element(h, b.trunc(slot, I32), ir.Constant(I32, _LANES - HISTORY + j))
    return h


def _before(b, h, v, k):
    """The lanes of ``v`` moved up by ``k`` (lane ``i``: ``v[i - k]``), the history's last
    ``k`` values in the lowest lanes."""
    lanes = [_LANES - k + i if i < k else _LANES + i - k for i in range(_LANES)]
    return b.shuffle_vector(h, v, ir.Constant(vector(I32, _LANES), lanes))


def _residuals(b, h, v):
    """The residuals of orders 1, 2 and 3 of the block's values ``v`` (i32 lanes) after
    the history ``h``: ``v - p1``, ``v - 2 p1 + p2``, ``v - 3 p1 + 3 p2 - p3`` with ``pk``
    the values ``k`` before."""
    p1, p2, p3 = (_before(b, h, v, k) for k in (1, 2, 3))
    d1 = b.sub(v, p1)
    d2 = b.add(b.sub(d1, p1), p2)
    d3 = b.sub(b.add(b.sub(d2, p1), b.add(p2, p2)), p3)
    return d1, d2, d3


def _quantize_double(b, xs, invv, stepv, boundv, single):
    """``(the integers as <32 x i32>, the lanes that fail their check as an i32 mask)`` of
    the values ``xs`` (float32 where ``single``) in float64, as the format has it:
    ``floor(x * inv_step + 1/2)`` where its magnitude is at most ``2**31 - 1`` (0
    elsewhere, NaN included), checked on the decoder's ``q * step`` (rounded to float32
    for float32 values) against ``bound``."""
    xd = b.fpext(xs, _F64) if single else xs
    s = b.fadd(b.fmul(xd, splat(b, invv, _F64)), ir.Constant(_F64, [0.5] * _LANES))
    fabs = f"llvm.fabs.v{_LANES}f64"
    inside = b.fcmp_ordered("<=", call_intrinsic(b, fabs, _F64, s),
                            ir.Constant(_F64, [_Q_MAX] * _LANES))
    t = call_intrinsic(b, f"llvm.floor.v{_LANES}f64", _F64,
                       b.select(inside, s, ir.Constant(_F64, [0.0] * _LANES)))
    rec = b.fmul(t, splat(b, stepv, _F64))
    if single:
        rec = b.fpext(b.fptrunc(rec, _F32), _F64)
    err = call_intrinsic(b, fabs, _F64, b.fsub(xd, rec))
    fails = b.fcmp_unordered(">", err, splat(b, boundv, _F64))
    return b.fptosi(t, _W32), b.bitcast(fails, I32)


def _quantize_single(b, xs, invv, stepv, boundv):
    """:func:`_quantize_double` of float32 values, in float32 where that gives the same
    integers and no check can fail, else in float64 (the whole block).

    With ``s = fl(fl(x * fl(inv_step)) + 1/2)`` in float32 and ``d = s - floor(s)``, every
    lane with ``|s| <= 2**22`` and ``m <= d <= 1 - m``, ``m = (|s| + 1) 2**-21``, has
    ``floor(s)`` equal to the float64 integer and passes its check, when ``2**-100 <=
    step <= 2**100`` and ``bound >= step / 2`` (the codec's ``bound``; proof: ``s``
    differs from ``x * inv_step + 1/2``, exact, by at most ``(|s| + 1) 2**-22`` and ``d``
    by ``2**-24`` more, so that exact value lies at least ``3 (|s| + 1) 2**-24`` inside
    ``(floor(s), floor(s) + 1)``: float64's rounding, 29 bits finer, cannot move it
    across, and ``|x - q step|`` is then at least ``3 (|s| + 1) 2**-24
    step`` below ``step / 2``, more than the decoder's rounding of ``q * step`` to
    float32 can add, at most ``|q| 2**-24 step`` and ``2**-150``). A block with any other
    lane (a value near a rounding boundary, about one block in a few hundred on
    gradients; NaN, Inf, a magnitude past ``2**22``) takes float64 whole: the same
    integers and checks as :func:`_quantize_double` either way."""
    f32 = ir.FloatType()
    inv32 = b.fptrunc(invv, f32)
    s = b.fadd(b.fmul(xs, splat(b, inv32, _F32)), ir.Constant(_F32, [0.5] * _LANES))
    t = call_intrinsic(b, f"llvm.floor.v{_LANES}f32", _F32, s)
    d = b.fsub(s, t)
    size = call_intrinsic(b, f"llvm.fabs.v{_LANES}f32", _F32, s)
    m = b.fmul(b.fadd(size, ir.Constant(_F32, [1.0] * _LANES)),
               ir.Constant(_F32, [2.0 ** -21] * _LANES))
    lanes_ok = b.and_(b.and_(b.fcmp_ordered(">=", d, m),
                             b.fcmp_ordered("<=", d, b.fsub(ir.Constant(_F32, [1.0] * _LANES),
                                                            m))),
                      b.fcmp_ordered("<=", size, ir.Constant(_F32, [2.0 ** 22] * _LANES)))
    f64 = ir.DoubleType()
    scale_ok = b.and_(b.and_(b.fcmp_ordered(">=", stepv, ir.Constant(f64, 2.0 ** -100)),
                             b.fcmp_ordered("<=", stepv, ir.Constant(f64, 2.0 ** 100))),
                      b.fcmp_ordered(">=", boundv, b.fmul(stepv, ir.Constant(f64, 0.5))))
    every = b.icmp_unsigned("==", b.bitcast(lanes_ok, I32), ir.Constant(I32, 0xFFFFFFFF))
    vp = cgutils.alloca_once(b, _W32)
    fp = cgutils.alloca_once(b, I32)
    with b.if_else(b.and_(every, scale_ok), likely=True) as (fast, slow):
        with fast:
            b.store(b.fptosi(t, _W32), vp)
            b.store(ir.Constant(I32, 0), fp)
        with slow:
            v, failed = _quantize_double(b, xs, invv, stepv, boundv, True)
            b.store(v, vp)
            b.store(failed, fp)
    return b.load(vp), b.load(fp)


@intrinsic
def price_block_vec32(typingctx, x, start, inv_step, step, bound, q):
    """``(status, w, wz, nonzero, w1, w2, w3, mask)`` of the full block ``x[start:start +
    32]`` whose history ``q[0:3]`` holds: its integers packed as int32 lanes at slot
    :data:`VALUES32` of ``q`` (and its last three in their int64 value slots: the next
    block's history), each non-zero's zigzag code minus one (0 for a zero: a mask block's
    codes) packed at :data:`CODES32` (a load of 128 bytes where int64 slots took 256 and
    a conversion each way), then status 0, ``errbound_block.choose_code_of_widths``' arguments (the
    bit lengths of the largest zigzag code of the values, of the non-zeros' codes minus
    one, the count of non-zeros, the bit lengths of the largest residual codes of orders
    1-3) and the mask of the non-zeros (bit ``i``: value ``i``). Status
    :data:`FALLBACK` (the other fields 0) for a block that fails a check or lies outside
    the 32-bit path (the module's docstring): the caller prices it with the scalar code.

    Each step is ``errbound_block.quantize_checked_value``'s: ``s = x * inv_step + 1/2``
    (two roundings), ``floor(s)`` where ``|s| <= 2**31 - 1`` (0 elsewhere, NaN included),
    the decoder's ``q * step`` (rounded to float32 for a float32 buffer) more than
    ``bound`` from ``x`` (or NaN) fails."""
    result = types.UniTuple(types.int64, 8)
    sig = result(x, start, inv_step, step, bound, q)
    single = x.dtype == types.float32

    def codegen(context, b, signature, args):
        xv, startv, invv, stepv, boundv, qv = args
        f64 = ir.DoubleType()
        elem = ir.FloatType() if single else f64
        xs = load(b, element_pointer(context, b, signature.args[0], xv, startv),
                  vector(elem, _LANES))
        if single:  # (float32: single precision where it gives the same integers, below)
            v, failed = _quantize_single(b, xs, invv, stepv, boundv)
        else:
            v, failed = _quantize_double(b, xs, invv, stepv, boundv, False)
        store(b, v, _packed(context, b, signature.args[5], qv, VALUES32))
        for lane in range(_LANES - HISTORY, _LANES):  # (the next block's history, int64)
            b.store(b.sext(b.extract_element(v, ir.Constant(I32, lane)), I64),
                    element_pointer(context, b, signature.args[5], qv,
                                    ir.Constant(I64, HISTORY + lane)))
        h = _history_vector(b, context, signature.args[5], qv)
        z = _zigzag(b, v)
        z_or = _or_lanes(b, z)
        widest = b.or_(z_or, _or_lanes(b, _zigzag(b, h)))
        ok = b.and_(b.icmp_unsigned("==", failed, ir.Constant(I32, 0)),
                    b.icmp_unsigned("<", widest, ir.Constant(I32, _GUARD)))
        zero = ir.Constant(I64, 0)
        out = cgutils.alloca_once(b, context.get_value_type(result))
        b.store(context.make_tuple(b, result, [ir.Constant(I64, FALLBACK)] + [zero] * 7), out)
        with b.if_then(ok, likely=True):
            nonzero = b.icmp_unsigned("!=", z, splat(b, 0, _W32))
            count = call_intrinsic(b, "llvm.ctpop.i32", I32, b.bitcast(nonzero, I32))
            less = b.sub(z, b.zext(nonzero, _W32))  # (each non-zero's code minus one)
            widths = [_bit_length(b, z_or), _bit_length(b, _or_lanes(b, less)),
                      b.zext(count, I64)]
            widths += [_bit_length(b, _or_lanes(b, _zigzag(b, d))) for d in _residuals(b, h, v)]
            store(b, less, _packed(context, b, signature.args[5], qv, CODES32))  # (a mask
            # block's codes)
            mask = b.zext(b.bitcast(nonzero, I32), I64)
            b.store(context.make_tuple(b, result, [zero] + widths + [mask]), out)
        return b.load(out)

    return sig, codegen


def _packed(context, b, qtype, qv, slot):
    """A pointer to the 32 int32 lanes packed from int64 slot ``slot`` of ``q``."""
    return b.bitcast(element_pointer(context, b, qtype, qv, ir.Constant(I64, slot)),
                     _W32.as_pointer())


def packed_values(context, b, qtype, qv):
    """The values :func:`price_block_vec32` packed into ``q`` (``<32 x i32>``)."""
    return load(b, _packed(context, b, qtype, qv, VALUES32), _W32)


def packed_codes(context, b, qtype, qv):
    """The mask block's codes :func:`price_block_vec32` packed into ``q``."""
    return load(b, _packed(context, b, qtype, qv, CODES32), _W32)


def residual_codes(context, b, qtype, qv, orderv, packed=False):
    """IR of the zigzag codes (``<32 x i32>``) of the residuals of ``orderv`` (an i64: 0,
    the values themselves, or 1-3) of a full block whose history and value slots ``q``
    holds (``packed``: its values packed by :func:`price_block_vec32`), each modulo
    ``2**32``: exact for any order whose codes fit 32 bits (the planes of a width or delta
    code, ``errbound_vector.put_residual_planes_vec32``)."""
    if packed:
        v = packed_values(context, b, qtype, qv)
    else:
        v = b.trunc(load(b, element_pointer(context, b, qtype, qv, ir.Constant(I64, HISTORY)),
                         vector(I64, _LANES)), _W32)
    h = _history_vector(b, context, qtype, qv)
    d = v
    for k, dk in zip((1, 2, 3), _residuals(b, h, v), strict=True):
        d = b.select(b.icmp_signed("==", orderv, ir.Constant(I64, k)), dk, d)
    return _zigzag(b, d)
