"""The ``errbound`` planes with 32-lane vector operations (CPU only): the bytes of
``errbound_block``'s scalar planes.

A block's codes (its 32 int64 code slots, or the int32 lanes that
``errbound_pricing`` packed for a full block) become ``w`` plane words with one
vector shift and one mask move per plane (:func:`put_planes_vec32`: the codes
shifted left by ``32 - w`` and cut into byte vectors; plane ``j`` is the top
bits of one of them shifted left by ``j % 8``, a ``<32 x i1>`` vector read as
a 32-bit integer, one ``vpmovmskb`` on x86), and come back with bitplane's
byte accumulators (``bitplane_vector.codes_from_planes``, 8 planes at a
time): a full block straight to its values on 32-bit lanes, a delta
block's by prefix sums (:func:`values_from_planes_vec32`), a short one
into its code slots (:func:`get_planes_vec32`). :func:`pack_group_vec32` and
:func:`unpack_group_vec32` are
``errbound_block``'s ``pack_group`` and ``unpack_group`` with these planes
(the CUDA kernels and the tests' reference use the scalar ones: the same
bytes); :func:`code_group_vec32` is ``block_code`` and the packing in one
pass (each block's planes made from the integers its code quantized), and
:func:`move_bytes` a ``memmove`` (the one-pass encode's runs of groups
moved to their offsets). A mask block's planes hold only its non-zeros' bits: its codes stay
at their own lanes, each plane is made as a whole word in a scratch row of
128 bytes and packed to the non-zeros' bits by a bit extract (``pext``),
then appended with the scalar bit writer; the decoder deposits each plane's
bits back at the mask's lanes (``pdep``), so that no code is gathered or
scattered lane by lane. Without BMI2 (or with ``NUMBA_CPU_NAME`` set) a
loop over the mask's bits does the same.

A plane word is stored as the host's 32-bit integer: little-endian, as the
format has it, on every host mpicomp runs on (x86-64, aarch64, ppc64le); on
a big-endian host this module refuses to load.
"""
from __future__ import annotations

import sys

import numba
import numpy as np
from llvmlite import binding, ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .bitplane_vector import codes_from_planes
from .errbound_block import (
    BLOCK,
    HISTORY,
    NONFINITE,
    RAW,
    _block_values,
    _code_slot,
    _delta_order,
    _dequantized,
    _group_blocks,
    _history,
    _load4,
    _quantize,
    _slot,
    _store4,
    _unzigzag,
    _zigzags,
    _zz,
    block_code_after,
    block_values,
    carry_history,
    choose_code_of_widths,
    flush_bits,
    is_mask,
    mask_head,
    mask_nbytes,
    plane_bits,
    plane_width,
    put_bits,
    raw_bytes,
    raw_values,
    zeros_block,
)
from .errbound_pricing import packed_codes, price_block_vec32, residual_codes
from .jit import NUMBA_INLINE, njit
from .vector_ir import I8, I32, I64, call_intrinsic, element_pointer, load, splat, store, vector

__all__ = ["WORDS", "code_group_vec32", "move_bytes", "pack_group_vec32", "unpack_group_vec32"]

if sys.byteorder != "little":
    raise ImportError("errbound's CPU kernels store plane words in the host's byte order: "
                      f"they need a little-endian host, this one is {sys.byteorder}-endian")

#: bytes of the plane-word scratch row a caller hands the group functions (32 planes)
WORDS = 4 * 32
#: the first code slot of a block's scratch row (``errbound_block``'s layout)
_CODES = HISTORY + BLOCK
_LANES = 32
_WORDS32 = vector(I32, _LANES)
#: whether the compiled code may use BMI2's bit deposit and extract (``pdep``/``pext``: one
#: instruction each on x86-64 since Haswell and Zen 3): the host's own code only
_BMI2 = (numba.config.CPU_NAME in (None, "host")
         and bool(binding.get_host_cpu_features().get("bmi2", False)))


def _emit_planes(context, b, codes, wv, outtype, outv, posv, stopv):
    """IR storing the ``wv`` plane words of the 32 codes ``codes`` (``<32 x i32>``, none
    wider than ``wv`` bits) at ``out[pos:pos + 4 w]`` (plane ``j``: bit ``w - 1 - j`` of
    each code, code ``i`` at bit ``i``); the bytes up to ``out[stop]`` are the caller's to
    overwrite.

    The codes are shifted left by ``32 - w`` (plane ``j`` is then bit ``31 - j`` of each)
    and cut into their bytes, 32 lanes of one byte each (byte ``3 - j // 8`` of every
    code); plane ``j`` is the sign bits of that byte vector shifted left by ``j % 8`` in
    16-bit lanes (a byte's top bit after the shift is its own bit ``7 - j % 8``): one
    ``vpsllw`` and one ``vpmovmskb`` a plane on x86, where shifting and comparing the
    32-bit codes took four of each and a pack. Where ``stop`` leaves room, a byte's eight
    planes are stored whole (those past ``w`` are zero words, overwritten by what
    follows): one branch a byte, not a plane, whose outcome varies from block to block on
    noise-like data."""
    bytes32, words16 = vector(I8, _LANES), vector(ir.IntType(16), _LANES // 2)
    with b.if_then(b.icmp_signed(">", wv, ir.Constant(I64, 0)), likely=True):
        shift = b.sub(ir.Constant(I32, 32), b.trunc(wv, I32))  # (1 to 32 - 1: w >= 1)
        top = b.shl(codes, splat(b, shift, _WORDS32))

        def plane(pairs, k, r):
            moved = b.bitcast(b.shl(pairs, splat(b, r, words16)), bytes32)
            word = b.bitcast(b.icmp_signed("<", moved, splat(b, 0, bytes32)), I32)
            at = b.add(posv, ir.Constant(I64, 4 * (8 * k + r)))
            store(b, word, element_pointer(context, b, outtype, outv, at))

        for k in range(4):  # planes 8k to 8k + 7: byte 3 - k of each code
            with b.if_then(b.icmp_signed(">", wv, ir.Constant(I64, 8 * k)), likely=k < 1):
                byte = b.trunc(b.lshr(top, splat(b, 24 - 8 * k, _WORDS32)), bytes32)
                pairs = b.bitcast(byte, words16)
                room = b.icmp_signed("<=", b.add(posv, ir.Constant(I64, 32 * (k + 1))), stopv)
                with b.if_else(room, likely=True) as (whole, single):
                    with whole:
                        for r in range(8):
                            plane(pairs, k, r)
                    with single:
                        for r in range(8):
                            with b.if_then(b.icmp_signed(">", wv, ir.Constant(I64, 8 * k + r))):
                                plane(pairs, k, r)


@intrinsic
def put_planes_vec32(typingctx, q, width, out, pos, stop):
    """The ``width`` plane words of the 32 code slots of ``q`` at ``out[pos:pos + 4 width]``
    (:func:`_emit_planes`; the bytes up to ``out[stop]`` are the caller's to overwrite)."""
    sig = types.void(q, width, out, pos, stop)

    def codegen(context, b, signature, args):
        qv, wv, outv, posv, stopv = args
        codes = b.trunc(load(b, element_pointer(context, b, signature.args[0], qv,
                                                ir.Constant(I64, _CODES)), vector(I64, _LANES)),
                        _WORDS32)
        _emit_planes(context, b, codes, wv, signature.args[2], outv, posv, stopv)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def put_packed_planes_vec32(typingctx, q, width, out, pos, stop):
    """:func:`put_planes_vec32` of the mask codes ``price_block_vec32`` packed into ``q``."""
    sig = types.void(q, width, out, pos, stop)

    def codegen(context, b, signature, args):
        qv, wv, outv, posv, stopv = args
        codes = packed_codes(context, b, signature.args[0], qv)
        _emit_planes(context, b, codes, wv, signature.args[2], outv, posv, stopv)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def put_packed_residual_planes_vec32(typingctx, q, order, width, out, pos, stop):
    """:func:`put_residual_planes_vec32` of the values ``price_block_vec32`` packed into
    ``q``."""
    sig = types.void(q, order, width, out, pos, stop)

    def codegen(context, b, signature, args):
        qv, orderv, wv, outv, posv, stopv = args
        codes = residual_codes(context, b, signature.args[0], qv, orderv, packed=True)
        _emit_planes(context, b, codes, wv, signature.args[3], outv, posv, stopv)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def put_residual_planes_vec32(typingctx, q, order, width, out, pos, stop):
    """The ``width`` plane words of the zigzag codes of a full block's residuals of
    ``order`` (0: its values) at ``out[pos:pos + 4 width]``, from its history and value
    slots in ``q`` (``errbound_pricing.residual_codes``, :func:`_emit_planes`): a width or
    delta block's planes without its codes' round trip through the code slots."""
    sig = types.void(q, order, width, out, pos, stop)

    def codegen(context, b, signature, args):
        qv, orderv, wv, outv, posv, stopv = args
        codes = residual_codes(context, b, signature.args[0], qv, orderv)
        _emit_planes(context, b, codes, wv, signature.args[3], outv, posv, stopv)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def get_planes_vec32(typingctx, buf, pos, width, q):
    """The 32 code slots of ``q`` from the ``width`` plane words at ``buf[pos:]``."""
    sig = types.void(buf, pos, width, q)

    def codegen(context, b, signature, args):
        bufv, posv, wv, qv = args
        codes = codes_from_planes(context, b, signature.args[0], bufv, posv, wv, 32, 32,
                                  present=0)
        store(b, b.zext(codes, vector(I64, _LANES)),
              element_pointer(context, b, signature.args[3], qv, ir.Constant(I64, _CODES)))
        return context.get_dummy_value()

    return sig, codegen


def _prefix_sum(b, v):
    """The inclusive prefix sums of the 32 lanes of ``v`` (``<32 x i32>``): five steps,
    each adding the vector shifted up by 1, 2, 4, 8 and 16 lanes (zeros shifted in)."""
    zero = ir.Constant(_WORDS32, [0] * _LANES)
    for shift in (1, 2, 4, 8, 16):
        lanes = [i - shift if i >= shift else _LANES for i in range(_LANES)]
        v = b.add(v, b.shuffle_vector(v, zero, ir.Constant(vector(I32, _LANES), lanes)))
    return v


@intrinsic
def values_from_planes_vec32(typingctx, words, pos, width, m, plus, order, q, out, start,
                             step):
    """A full block's values from its ``width`` plane words at ``words[pos:]`` in one pass:
    the codes of a width or delta block of ``order`` (``m``: all 32 bits set, ``plus`` 0)
    or of a mask block's non-zeros minus one (``plus`` 1, ``order`` 0), deposited at the
    mask ``m``'s lanes; each value ``v`` (0 at a clear bit of ``m``) times ``step`` into
    ``out[start:start + 32]``, and the last ``HISTORY`` values into their slots of ``q``
    (the next block's history; the other value slots are left as they were).

    A delta block's residuals become values by ``order`` prefix sums (:func:`_prefix_sum`),
    each from the history's differences: order 1 is ``v = h1 + prefix(r)``; order 2 sums
    the residuals to the first differences from ``h1 - h2``, then those from ``h1``;
    order 3 first to the second differences from ``h1 - 2 h2 + h3`` (``h1``, ``h2``,
    ``h3``: the values before the block, latest first). The serial loop took one value
    after the other (``errbound_block._undo_residuals``).

    On 32-bit lanes, where :func:`get_planes_vec32` and loops over the slots went through
    int64 ones. Every step is an integer ring operation, so its result modulo ``2**32`` is
    the int64 result's, and the decoder converts each value through int32 either way: the
    same values as ``errbound_block.block_values`` and ``mask_values``, for any bytes."""
    sig = types.void(words, pos, width, m, plus, order, q, out, start, step)

    def codegen(context, b, signature, args):
        wordsv, posv, wv, mv, plusv, orderv, qv, outv, startv, stepv = args
        codes = codes_from_planes(context, b, signature.args[0], wordsv, posv, wv, 32, 32,
                                  present=0)
        lanes = ir.Constant(_WORDS32, list(range(_LANES)))
        present = b.icmp_unsigned("!=", b.and_(b.lshr(splat(b, b.trunc(mv, I32), _WORDS32),
                                                      lanes), splat(b, 1, _WORDS32)),
                                  splat(b, 0, _WORDS32))
        # the zigzag code z = code + plus, unzigzagged without forming z (2**32 for a
        # hostile code 2**32 - 1): z >> 1 = (code >> 1) + (code & plus), z & 1 = (code & 1)
        # ^ plus; the value wraps to int32 as the scalar decoder's conversion does
        plus = splat(b, b.trunc(plusv, I32), _WORDS32)
        low = b.and_(codes, splat(b, 1, _WORDS32))
        half = b.add(b.lshr(codes, splat(b, 1, _WORDS32)), b.and_(low, plus))
        v = b.xor(half, b.sub(splat(b, 0, _WORDS32), b.xor(low, plus)))
        vp = cgutils.alloca_once(b, _WORDS32)  # (in the entry block: promoted to registers)
        b.store(b.select(present, v, splat(b, 0, _WORDS32)), vp)

        def slot(j):
            return b.trunc(b.load(element_pointer(context, b, signature.args[6], qv,
                                                  ir.Constant(I64, j))), I32)

        h1, h2, h3 = slot(HISTORY - 1), slot(HISTORY - 2), slot(HISTORY - 3)
        stages = [(3, b.add(b.sub(h1, b.add(h2, h2)), h3)), (2, b.sub(h1, h2)), (1, h1)]
        for least, first in stages:  # (order 3: all three; order 0, a width or mask block:
            with b.if_then(b.icmp_signed(">=", orderv, ir.Constant(I64, least)),  # none)
                           likely=least == 1):
                b.store(b.add(_prefix_sum(b, b.load(vp)), splat(b, first, _WORDS32)), vp)
        v = b.load(vp)
        for lane in range(_LANES - HISTORY, _LANES):  # (only these are read again)
            b.store(b.sext(b.extract_element(v, ir.Constant(I32, lane)), I64),
                    element_pointer(context, b, signature.args[6], qv,
                                    ir.Constant(I64, HISTORY + lane)))
        at = element_pointer(context, b, signature.args[7], outv, startv)
        if signature.args[7].dtype == types.float32:
            _store_single(b, v, stepv, at)
        else:
            f64 = ir.DoubleType()
            store(b, b.fmul(b.sitofp(v, vector(f64, _LANES)),
                            splat(b, stepv, vector(f64, _LANES))), at)
        return context.get_dummy_value()

    return sig, codegen


def _store_single(b, v, stepv, at):
    """IR storing the float32 values of the integers ``v`` (``<32 x i32>``) times the
    float64 ``step`` at ``at``: ``v * step`` in float64 rounded to float32, as the format
    has it, computed in float32 where that is the same.

    Where ``step`` is a float32 value (the codec's steps are: ``errbound.step_of``) and
    every ``|v| <= 2**24``, each ``v`` and the step are float32 values and their exact
    product has at most 48 significant bits, so float64's product is exact and its rounding
    to float32 is the correctly rounded product, which float32's multiply gives (overflow
    to infinity and subnormal results alike): one float32 multiply a lane where float64
    took a widening, a multiply and a narrowing of twice the vectors. Any other block
    (a step of another encoder's, an integer past 24 bits) takes float64."""
    f32, f64 = ir.FloatType(), ir.DoubleType()
    single = b.fptrunc(stepv, f32)
    exact = b.fcmp_ordered("==", b.fpext(single, f64), stepv)
    small = b.icmp_unsigned("<=", b.add(v, splat(b, 1 << 24, _WORDS32)),
                            splat(b, 1 << 25, _WORDS32))  # (|v| <= 2**24, as unsigned)
    every = b.icmp_unsigned("==", b.bitcast(small, I32), ir.Constant(I32, 0xFFFFFFFF))
    with b.if_else(b.and_(exact, every), likely=True) as (fast, wide):
        with fast:
            store(b, b.fmul(b.sitofp(v, vector(f32, _LANES)), splat(b, single,
                                                                   vector(f32, _LANES))), at)
        with wide:
            x = b.fmul(b.sitofp(v, vector(f64, _LANES)), splat(b, stepv, vector(f64, _LANES)))
            store(b, b.fptrunc(x, vector(f32, _LANES)), at)


@intrinsic
def popcount64(typingctx, v):
    """The set bits of the int64 ``v`` (``llvm.ctpop``: one instruction where the host has
    it, a vector of them in a loop that vectorizes)."""
    sig = types.int64(types.int64)

    def codegen(context, b, signature, args):
        return call_intrinsic(b, "llvm.ctpop.i64", I64, args[0])

    return sig, codegen


@intrinsic
def move_bytes(typingctx, buf, dst, src, count):
    """``buf[dst:dst + count] = buf[src:src + count]`` (int64 positions the caller has
    checked), overlapping or not: one ``llvm.memmove`` (the C library's, at memory speed)."""
    sig = types.void(buf, dst, src, count)

    def codegen(context, b, signature, args):
        bufv, dstv, srcv, countv = args
        cgutils.raw_memmove(b, element_pointer(context, b, signature.args[0], bufv, dstv),
                            element_pointer(context, b, signature.args[0], bufv, srcv),
                            countv, 1)
        return context.get_dummy_value()

    return sig, codegen


def _bmi2(name):
    """An intrinsic of BMI2's ``pdep``/``pext`` on 32 bits: ``f(value, mask)`` (uint64s)."""

    @intrinsic
    def bits(typingctx, value, mask):
        sig = types.uint64(types.uint64, types.uint64)

        def codegen(context, b, signature, args):
            v32, m32 = (b.trunc(a, I32) for a in args)
            return b.zext(call_intrinsic(b, f"llvm.x86.bmi.{name}.32", I32, v32, m32), I64)

        return sig, codegen

    return bits


@njit(inline="always")
def _deposit_loop(value, mask):
    """``pdep`` without BMI2: the low bits of ``value`` at the set bits of ``mask``."""
    out = np.uint64(0)
    k = np.uint64(0)
    while mask != np.uint64(0):
        low = mask & (~mask + np.uint64(1))
        out |= low * ((value >> k) & np.uint64(1))
        k += np.uint64(1)
        mask &= mask - np.uint64(1)
    return out


@njit(inline="always")
def _extract_loop(value, mask):
    """``pext`` without BMI2: the bits of ``value`` at the set bits of ``mask``, packed low."""
    out = np.uint64(0)
    k = np.uint64(0)
    while mask != np.uint64(0):
        low = mask & (~mask + np.uint64(1))
        out |= np.uint64(value & low != np.uint64(0)) << k
        k += np.uint64(1)
        mask &= mask - np.uint64(1)
    return out


#: ``deposit(value, mask)``: the low bits of ``value`` at the set bits of ``mask``
deposit = _bmi2("pdep") if _BMI2 else _deposit_loop
#: ``extract(value, mask)``: the bits of ``value`` at the set bits of ``mask``, packed low
extract = _bmi2("pext") if _BMI2 else _extract_loop


@njit(inline="always")
def _load8(buf, at):
    """The 8 bytes at ``buf[at:]`` as a little-endian uint64 (one load; the caller has
    checked that they lie in ``buf``)."""
    u = np.uint64(at)
    return (np.uint64(buf[u]) | (np.uint64(buf[u + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(buf[u + np.uint64(2)]) << np.uint64(16))
            | (np.uint64(buf[u + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(buf[u + np.uint64(4)]) << np.uint64(32))
            | (np.uint64(buf[u + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(buf[u + np.uint64(6)]) << np.uint64(48))
            | (np.uint64(buf[u + np.uint64(7)]) << np.uint64(56)))


@njit(inline="always")
def _deposit_planes(buf, p, w, count, m, words):
    """A mask block's ``w`` planes of ``count`` bits each at ``buf[p:]``, each deposited at
    the mask ``m``'s bits into a plane word of ``words``. Where the last plane's 8-byte
    load lies in ``buf`` (every block but a stream's last few), one load a plane in a loop
    without checks; otherwise ``errbound_block.plane_bits``' byte loads."""
    if np.int64(p) + mask_nbytes(count, w) + np.int64(8) <= np.int64(buf.size):
        low = (np.uint64(1) << np.uint64(count)) - np.uint64(1)
        off = np.int64(0)
        for j in range(w):
            word = _load8(buf, np.int64(p) + (off >> np.int64(3)))
            _store4(words, np.int64(4 * j),
                    deposit((word >> np.uint64(off & np.int64(7))) & low, m))
            off += count
    else:
        for j in range(w):
            _store4(words, np.int64(4 * j), deposit(plane_bits(buf, p, np.int64(j) * count,
                                                               count), m))


@njit(inline=NUMBA_INLINE)
def _mask_values_vec32(q, n, m, out, start, step):
    """``errbound_block.mask_values`` of code slots that hold each non-zero's code minus one
    at its own lane (planes deposited at the mask's bits), 0 elsewhere: a loop that
    vectorizes."""
    base = np.uint64(start)
    for i in range(n):
        bit = (m >> np.int64(i)) & np.int64(1)
        v = _unzigzag(np.uint64(q[_code_slot(i)] + np.int64(1))) * bit
        q[_slot(i)] = v
        out[base + np.uint64(i)] = _dequantized(v, step)


@njit(inline=NUMBA_INLINE)
def _mask_codes(q, n):
    """A mask block's code slots from its value slots: each non-zero's code minus one at
    its own lane (no gather: :func:`extract` packs each plane), 0 at a zero's; returns the
    mask."""
    m = np.int64(0)
    for i in range(n):
        z = _zz(q[_slot(i)])
        nz = np.int64(z != np.int64(0))
        m |= nz << np.int64(i)
        q[_code_slot(i)] = z - nz
    return m


@njit(inline=NUMBA_INLINE)
def _put_mask_block(q, n, w, out, p, stop, words):
    """A mask block of ``n`` quantized values (in their slots) at ``out[p:stop]``
    (:func:`_put_mask_planes`); returns the position after the block."""
    return _put_mask_planes(q, np.uint64(_mask_codes(q, n)), w, out, p, stop, words, False)


@njit(inline="always")
def _put_mask_planes(q, m, w, out, p, stop, words, packed):
    """A mask block whose code slots hold each non-zero's code minus one (0 at a zero's;
    ``packed``: as int32 lanes, by ``price_block_vec32``), ``m`` its mask, at
    ``out[p:stop]``: the mask, then each plane's bits of the non-zeros (:func:`extract` of
    a whole plane word made in ``words``), one plane after the other; returns the position
    after the block. (Inlined by LLVM, not Numba: Numba's inlining
    kept reference counting of the arrays in the encode's loop, three atomic calls a
    mask block.)"""
    count = popcount64(np.int64(m))
    _store4(out, p, m)
    if packed:  # (a full block priced on 32-bit lanes: its codes packed)
        put_packed_planes_vec32(q, w, words, np.int64(0), np.int64(words.size))
    else:
        put_planes_vec32(q, w, words, np.int64(0), np.int64(words.size))
    at = p + np.int64(4)
    acc = np.uint64(0)
    fill = np.int64(0)
    for j in range(w):  # each plane's bits of the non-zeros, one after the other
        at, acc, fill = put_bits(out, at, stop, acc, fill,
                                 extract(_load4(words, np.int64(4 * j)), m), count)
    flush_bits(out, at, acc, fill)
    return p + np.int64(4) + mask_nbytes(count, w)


@njit(inline=NUMBA_INLINE)
def _put_block(q, n, code, out, p, stop, words):
    """:func:`_put_block_of` (a full block's trip count a constant: the loops vectorize)."""
    if n == np.int64(BLOCK):
        return _put_block_of(q, np.int64(BLOCK), code, out, p, stop, words)
    return _put_block_of(q, n, code, out, p, stop, words)


@njit(inline=NUMBA_INLINE)
def _put_block_of(q, n, code, out, p, stop, words):
    """The planes of a block coded with ``code`` (not 0, not RAW) whose value slots hold its
    ``n`` quantized values and whose history slots those before it (a delta code's
    predictors) at ``out[p:stop]``; returns the position after them."""
    w = plane_width(code)
    if is_mask(code):
        return _put_mask_block(q, n, w, out, p, stop, words)
    if n == np.int64(BLOCK):
        put_residual_planes_vec32(q, _delta_order(code), w, out, p, stop)
    else:
        for i in range(n, BLOCK):  # (lanes past a short block: 0 in every plane)
            q[_code_slot(i)] = np.int64(0)
        _zigzags(q, n, _delta_order(code))
        put_planes_vec32(q, w, out, p, stop)
    return p + np.int64(4) * w


@njit(inline=NUMBA_INLINE)
def pack_group_vec32(x, xb, group, inv_step, codes, out, pos, stop, itemsize, q, words):
    """``errbound_block.pack_group`` with vector planes; ``words``: a scratch row of
    ``WORDS`` bytes."""
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
        if n == np.int64(BLOCK):  # (a trip count the compiler knows: the loop vectorizes)
            _quantize(x, start, np.int64(BLOCK), inv_step, q)
        else:
            _quantize(x, start, n, inv_step, q)
        if _delta_order(code) > np.int64(0):  # residuals: from the block's history
            _history(x, start, inv_step, q)
        p = _put_block(q, n, code, out, p, stop, words)


@njit
def _code_block_scalar(x, xb, start, end, inv_step, step, bound, single, codes, b, out, p,
                       stop, itemsize, q, words):
    """Block ``b`` (``x[start:end]``) priced by ``errbound_block.block_code_after`` and its
    bytes at ``out[p:stop]``; returns ``(the position after them, 1 for a block holding
    NaN or Inf, else 0)``. A function of its own, not inlined: the full blocks' loop of
    :func:`code_group_vec32` keeps its registers (inlined, its spills cost that loop a
    fifth of its time)."""
    code, nbits = block_code_after(x, start, end, inv_step, step, bound, single, q)
    nonfinite = np.int64(0)
    if code == np.int64(NONFINITE):
        nonfinite = np.int64(1)
        code = np.int64(0)
    codes[b] = np.uint8(code)
    if code == np.int64(RAW):
        p = raw_bytes(xb, start, end, itemsize, out, p)
    elif code != np.int64(0):
        p = _put_block(q, end - start, code, out, p, stop, words)
    return p, nonfinite


@njit(inline=NUMBA_INLINE)
def code_group_vec32(x, xb, group, inv_step, step, bound, single, codes, out, pos, stop,
                     itemsize, q, words):
    """``errbound_block.block_code`` of each block of group ``group`` into ``codes`` and
    :func:`pack_group_vec32`'s bytes at ``out[pos:stop]``, in one pass (each block's
    planes made from the values its code quantized); returns the position after the group
    and its blocks holding NaN or Inf (coded 0, no bytes)."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    bad = np.int64(0)
    raw_block_bits = np.int64(BLOCK) * np.int64(32 if single else 64)
    for b in range(first, last):
        start, end = _block_values(b, x.size)
        carry_history(q, b == first)  # (from the block before's value slots, kept as is)
        if end - start == np.int64(BLOCK):
            status, w, wz, nonzero, w1, w2, w3, m = price_block_vec32(x, start, inv_step, step,
                                                                      bound, q)
            if status == np.int64(0):
                code, nbits = choose_code_of_widths(np.int64(BLOCK), raw_block_bits, w, wz,
                                                    nonzero, w1, w2, w3)
                codes[b] = np.uint8(code)
                if code == np.int64(RAW):  # (never for a full block: kept for the format)
                    p = raw_bytes(xb, start, end, itemsize, out, p)
                elif is_mask(code):  # (its codes in their slots)
                    p = _put_mask_planes(q, np.uint64(m), plane_width(code), out, p, stop,
                                         words, True)
                elif code != np.int64(0):
                    put_packed_residual_planes_vec32(q, _delta_order(code), plane_width(code),
                                                     out, p, stop)
                    p += np.int64(4) * plane_width(code)
                continue
        # a short block, one that fails a check, or one of wide values: the scalar pricing
        p, nonfinite = _code_block_scalar(x, xb, start, end, inv_step, step, bound, single,
                                          codes, b, out, p, stop, itemsize, q, words)
        bad += nonfinite
    return p, bad


@njit(inline=NUMBA_INLINE)
def unpack_group_vec32(buf, pos, end, group, codes, step, inv_step, out, outb, itemsize, q,
                       words):
    """``errbound_block.unpack_group`` with vector planes; ``words``: a scratch row of
    ``WORDS`` bytes."""
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
            _deposit_planes(buf, p + np.int64(4), w, count, m, words)  # at the mask's lanes
            if n == np.int64(BLOCK):
                values_from_planes_vec32(words, np.int64(0), w, np.int64(m), np.int64(1),
                                         np.int64(0), q, out, start, step)
            else:
                get_planes_vec32(words, np.int64(0), w, q)
                _mask_values_vec32(q, n, np.int64(m), out, start, step)
            p += np.int64(4) + size
        else:
            w = plane_width(code)
            if p + np.int64(4) * w > stop:
                return False
            if n == np.int64(BLOCK):
                values_from_planes_vec32(buf, p, w, np.int64(0xFFFFFFFF), np.int64(0),
                                         _delta_order(code), q, out, start, step)
            else:  # (a buffer's short last block)
                get_planes_vec32(buf, p, w, q)
                block_values(q, n, code, out, start, step)
            p += np.int64(4) * w
        for j in range(HISTORY):  # the last values become the next block's history
            q[j] = q[n + j]
    return True
