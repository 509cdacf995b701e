"""One ``bitplane`` block of 32 values coded with 32-lane vector operations (CPU only).

``encode_block_vec32`` and ``decode_block_vec32`` produce exactly the bytes
and values of ``bitplane_block.encode_block``/``decode_block`` for block
size 32 and any ``P`` (float32 and float64), but as Numba intrinsics that
emit LLVM IR on whole vectors of 32 lanes (``vector_ir``), so that every
step runs on all values of the block at once:

* the block exponent is one vector maximum of the bit patterns shifted
  left by one (the sign dropped, the exponent field on top);
* quantization is the integer formula of ``docs/format.md`` in lanes of the
  data's width (32 bits for float32), with ``(sig + 2**(s-1)) >> s``
  computed as ``((sig >> (s-1)) + 1) >> 1`` (the same value, one variable
  shift less);
* the bit transposition works on 8 code bits at a time: the codes, shifted
  so that their top bit is the lane's top bit, are truncated to 32 bytes;
  a plane word is then "byte lane < 0" of those bytes shifted left by the
  plane's offset, a ``<32 x i1>`` vector read as a 32-bit integer (one
  ``vpmovmskb`` on x86: a whole plane in two instructions, where the scalar
  code spends a multiply per 8 bits). Decoding reverses it: a plane word
  read as ``<32 x i1>`` widens to 32 bytes of 0/1 that are shifted into 8
  byte accumulators.

Planes past ``P`` are skipped by branches that depend only on ``P`` (the
same for every block of a call), so no byte outside the block is touched.
Plane words are stored as little-endian 32-bit integers: the caller uses
these functions only on little-endian hosts.

Decoding multiplies ``q`` by the block's quantum ``2**a`` (``a = Emax -
BIAS + 1 - m``, the float64 of ``bitplane_cpu.quantum_table``). For float64
data that is ``float64(q) * quantum``, the general path's own operation.
For float32 it is done in float32 (half the vector work of float64) by two
normal powers of two, ``2**max(a, -126)`` and then ``2**min(a + 126, 0)``:
for ``Emax <= 254`` the first product is a normal float32 and the result a
multiple of ``2**-149`` within float32's range with at most ``m``
significant bits, so both products are exact and the result equals the
general path's float64 product rounded to float32; as no operand is
subnormal, that also holds with denormals-are-zero set (and with
flush-to-zero, a subnormal result is flushed by both paths alike). The
all-ones ``Emax`` (only in a corrupt stream) has no float32 factor, and
for float64 gives a NaN whose sign the general path flips: the caller
decodes such blocks with the general path. The sign is OR-ed into the
product's sign bit, which is what negating the non-negative product does
(``-0.0`` when ``q = 0``).
"""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

from .vector_ir import I32, I64, call_intrinsic, element_pointer, load, splat, store, vector

__all__ = ["LANES", "codes_from_planes", "decode_block_vec32", "encode_block_vec32",
           "residual_block_vec32"]

#: values per block (one plane word is one 32-bit integer)
LANES = 32

_I1 = ir.IntType(1)
_I8 = ir.IntType(8)
_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_BITS = vector(_I1, LANES)
_BYTES = vector(_I8, LANES)

# per word width: (mantissa bits, exponent field mask, largest P)
_LAYOUT = {32: (23, 0xFF, 24), 64: (52, 0x7FF, 53)}


def _check_array(arg, name: str, dtypes: tuple) -> None:
    if not (isinstance(arg, types.Array) and arg.ndim == 1 and arg.layout == "C"
            and arg.dtype in dtypes):
        raise TypingError(f"{name} must be a 1-D C-contiguous array of {dtypes}, got {arg}")


def _check_ints(**args) -> None:
    for name, arg in args.items():
        if not isinstance(arg, types.Integer):
            raise TypingError(f"{name} must be an integer, got {arg}")


def _widened(context, builder, signature, args) -> list:
    """The intrinsic's arguments, integers converted to int64 (arrays as they are)."""
    return [context.cast(builder, v, t, types.int64) if isinstance(t, types.Integer) else v
            for v, t in zip(args, signature.args)]


def _if_plane(b, nplanes, k: int, emit, present: int = 2) -> None:
    """``emit()`` in a branch taken when plane ``k`` exists (``P > k``; always for k <
    ``present``, the planes every block has: 2 for bitplane, whose ``P`` is 2 or more)."""
    if k < present:
        emit()
        return
    with b.if_then(b.icmp_signed(">", nplanes, ir.Constant(I64, k)), likely=True):
        emit()


def _each_chunk(b, nplanes, width: int, emit) -> None:
    """``emit(t)`` for each chunk ``t`` of 8 planes that holds a plane (``P > 8 t``)."""
    for t in range((_LAYOUT[width][2] + 7) // 8):
        _if_plane(b, nplanes, 8 * t, lambda t=t: emit(t))


def _quantize(b, u, width: int, nplanes):
    """The block exponent (int64) and the codes shifted to the lanes' top bits.

    ``u`` holds the 32 bit patterns; the result's lane ``i`` is ``code_i <<
    (W - P)``, i.e. the sign bit stays where it is and ``q`` sits below it.
    """
    vt = u.type
    mant, emask, _ = _LAYOUT[width]
    w = ir.IntType(width)
    top = call_intrinsic(b, f"llvm.vector.reduce.umax.v{LANES}i{width}", w,
                         b.shl(u, splat(b, 1, vt)))
    emax = call_intrinsic(b, f"llvm.umax.i{width}", w,
                          b.lshr(top, ir.Constant(w, mant + 1)), ir.Constant(w, 1))
    p = b.trunc(nplanes, w) if width < 64 else nplanes
    m = b.sub(p, ir.Constant(w, 1))
    ef = b.and_(b.lshr(u, splat(b, mant, vt)), splat(b, emask, vt))
    ee = call_intrinsic(b, f"llvm.umax.v{LANES}i{width}", vt, ef, splat(b, 1, vt))
    implicit = b.select(b.icmp_unsigned("!=", ef, splat(b, 0, vt)),
                        splat(b, 1 << mant, vt), splat(b, 0, vt))
    sig = b.or_(b.and_(u, splat(b, (1 << mant) - 1, vt)), implicit)
    # shift - 1 = mant - m + emax - ee, clamped to W - 2 (a shift of W - 1 or more gives 0)
    s1 = b.sub(splat(b, b.add(b.sub(ir.Constant(w, mant), m), emax), vt), ee)
    s1 = call_intrinsic(b, f"llvm.umin.v{LANES}i{width}", vt, s1, splat(b, width - 2, vt))
    one = splat(b, 1, vt)
    q = b.lshr(b.add(b.lshr(sig, s1), one), one)
    q = b.sub(q, b.lshr(q, splat(b, m, vt)))  # 2**m (rounded past the top) -> 2**m - 1
    sign = b.and_(u, splat(b, 1 << (width - 1), vt))
    code = b.or_(sign, b.shl(q, splat(b, b.sub(ir.Constant(w, width), p), vt)))
    return b.zext(emax, I64) if width < 64 else emax, code


def _scaled(b, code, width: int, nplanes, quantum):
    """The decoded values' bit patterns from the P-bit codes (low bits of ``code``)."""
    vt = code.type
    w = ir.IntType(width)
    p = b.trunc(nplanes, w) if width < 64 else nplanes
    m = b.sub(p, ir.Constant(w, 1))
    sign = b.shl(b.lshr(code, splat(b, m, vt)), splat(b, width - 1, vt))
    q = b.and_(code, splat(b, b.sub(b.shl(ir.Constant(w, 1), m), ir.Constant(w, 1)), vt))
    if width == 32:
        x = b.sitofp(q, vector(_F32, LANES))  # q < 2**23: exact
        hi, lo = _float32_factors(b, quantum)
        x = b.fmul(b.fmul(x, splat(b, hi, x.type)), splat(b, lo, x.type))
    else:  # q < 2**52: 2**52 + q from its bits, minus 2**52 (exact; AVX2 has no i64 -> f64)
        f64 = vector(_F64, LANES)
        magic = b.bitcast(b.or_(q, splat(b, 0x4330000000000000, vt)), f64)
        x = b.fsub(magic, splat(b, ir.Constant(_F64, 2.0 ** 52), f64))
        x = b.fmul(x, splat(b, quantum, f64))
    return b.or_(b.bitcast(x, vt), sign)


def _float32_factors(b, quantum):
    """Two normal float32 powers of two whose product is the float64 ``quantum``.

    ``max(quantum, 2**-126)`` and ``min(quantum * 2**126, 1)``: multiplying
    by both never reads a subnormal operand, so the result does not depend
    on the denormals-are-zero mode (the float64 product of the general path
    does not either).
    """
    tiny = ir.Constant(_F64, 2.0 ** -126)
    hi = call_intrinsic(b, "llvm.maxnum.f64", _F64, quantum, tiny)
    lo = call_intrinsic(b, "llvm.minnum.f64", _F64,
                        b.fmul(quantum, ir.Constant(_F64, 2.0 ** 126)), ir.Constant(_F64, 1.0))
    return b.fptrunc(hi, _F32), b.fptrunc(lo, _F32)


@intrinsic
def encode_block_vec32(typingctx, src, start, nplanes, stream, pos):
    """Encode ``src[start:start+32]`` (raw bits, uint32 or uint64) at ``stream[pos]``.

    Returns the block exponent ``Emax`` (int64; the caller stores it and
    counts ``2**ebits - 1``, NaN/Inf). The bytes are ``encode_block``'s.
    """
    _check_array(src, "src", (types.uint32, types.uint64))
    _check_array(stream, "stream", (types.uint8,))
    _check_ints(start=start, nplanes=nplanes, pos=pos)
    sig = types.int64(src, start, nplanes, stream, pos)
    width = src.dtype.bitwidth

    def codegen(context, builder, signature, args):
        b = builder
        srcv, startv, pv, streamv, posv = _widened(context, b, signature, args)
        vt = vector(ir.IntType(width), LANES)
        u = load(b, element_pointer(context, b, signature.args[0], srcv, startv), vt)
        emax, code = _quantize(b, u, width, pv)

        def chunk(t):  # planes 8t .. 8t+7: code bits W-1-8t down to W-8-8t of ``code``
            byt = b.trunc(b.lshr(code, splat(b, width - 8 - 8 * t, vt)), _BYTES)

            def plane(j):  # bit 7 - j of each byte, as one bit per value
                shifted = b.shl(byt, splat(b, j, _BYTES)) if j else byt
                word = b.bitcast(b.icmp_signed("<", shifted, splat(b, 0, _BYTES)), I32)
                off = b.add(posv, ir.Constant(I64, 4 * (8 * t + j)))
                store(b, word, element_pointer(context, b, signature.args[3], streamv, off))

            for j in range(8):
                _if_plane(b, pv, 8 * t + j, lambda j=j: plane(j))

        _each_chunk(b, pv, width, chunk)
        return emax

    return sig, codegen


def codes_from_planes(context, b, arrtype, streamv, posv, nplanes, width: int, most: int,
                      present: int = 2):
    """The 32 codes (a ``<32 x iW>`` vector, ``W`` = ``width``) of the ``nplanes`` (at most
    ``most``; at least ``present``) plane words at ``stream[pos]``, plane ``j`` holding code
    bit ``P - 1 - j``: 8 planes at a time, each plane word read as ``<32 x i1>``, widened to
    32 bytes of 0/1 and shifted into byte accumulators, each chunk then appended below the
    codes so far (``arrtype``: the stream's Numba array type)."""
    w = ir.IntType(width)
    vt = vector(w, LANES)
    codep = cgutils.alloca_once(b, vt)  # in the entry block: promoted to registers
    accp = cgutils.alloca_once(b, _BYTES)
    b.store(ir.Constant(vt, [0] * LANES), codep)

    def plane(k):  # shift plane k's bits into the byte accumulators
        off = b.add(posv, ir.Constant(I64, 4 * k))
        word = load(b, element_pointer(context, b, arrtype, streamv, off), I32)
        minus_bits = b.sext(b.bitcast(word, _BITS), _BYTES)  # -1 where the bit is set
        acc = b.load(accp)
        b.store(b.sub(b.add(acc, acc), minus_bits), accp)

    def chunk(t):  # planes 8t .. min(8t + 8, P) - 1, appended below the codes so far
        b.store(ir.Constant(_BYTES, [0] * LANES), accp)
        for k in range(8 * t, 8 * t + 8):
            _if_plane(b, nplanes, k, lambda k=k: plane(k), present)
        left = b.sub(nplanes, ir.Constant(I64, 8 * t))
        nbits = b.select(b.icmp_signed(">", left, ir.Constant(I64, 8)),
                         ir.Constant(I64, 8), left)
        nbits = b.trunc(nbits, w) if width < 64 else nbits
        code = b.or_(b.shl(b.load(codep), splat(b, nbits, vt)), b.zext(b.load(accp), vt))
        b.store(code, codep)

    for t in range((most + 7) // 8):
        _if_plane(b, nplanes, 8 * t, lambda t=t: chunk(t), present)
    return b.load(codep)


@intrinsic
def decode_block_vec32(typingctx, stream, pos, nplanes, quantum, dst, start):
    """Decode one block at ``stream[pos]`` into ``dst[start:start+32]`` (float32 or float64).

    ``quantum`` is the block's ``2**(Emax - BIAS + 1 - m)`` as a float64
    (``quantum_table``), ``Emax`` below the all-ones value (see the module
    docstring). The values are ``decode_block``'s.
    """
    _check_array(stream, "stream", (types.uint8,))
    _check_array(dst, "dst", (types.float32, types.float64))
    _check_ints(pos=pos, nplanes=nplanes, start=start)
    if quantum != types.float64:
        raise TypingError(f"quantum must be a float64, got {quantum}")
    sig = types.void(stream, pos, nplanes, quantum, dst, start)
    width = dst.dtype.bitwidth

    def codegen(context, builder, signature, args):
        b = builder
        streamv, posv, pv, qv, dstv, startv = _widened(context, b, signature, args)
        code = codes_from_planes(context, b, signature.args[0], streamv, posv, pv, width,
                                 _LAYOUT[width][2])
        out = _scaled(b, code, width, pv, qv)
        store(b, out, element_pointer(context, b, signature.args[4], dstv, startv))
        return context.get_dummy_value()

    return sig, codegen



@intrinsic
def residual_block_vec32(typingctx, x, bits, start, nplanes, pow2, prev, has_prev, a, b,
                         lim, out):
    """Error feedback's residual of the block ``x[start:start+32]`` (``bits``: its raw
    bits) under this codec: ``out[i] = clip(a * prev[i] + b * (x[i] - rt[i]), -lim, lim)``
    with ``rt`` the values ``decode_block_vec32`` gives for the block
    ``encode_block_vec32`` makes (``pow2``: ``bitplane_cpu.quantum_table``), no stream
    made; without ``has_prev`` the first term is 0 (``prev`` is not read), with ``b`` 0
    the second is left out (``x`` and ``rt`` not read), in the arrays' dtype and in that
    order of operations (``feedback_cpu.residual``'s, value by value). Returns the block
    exponent; ``out`` is not written for the all-ones one (NaN or Inf: the encoder
    refuses it)."""
    _check_array(x, "x", (types.float32, types.float64))
    _check_array(bits, "bits", (types.uint32, types.uint64))
    _check_array(pow2, "pow2", (types.float64,))
    _check_array(prev, "prev", (x.dtype,))
    _check_array(out, "out", (x.dtype,))
    _check_ints(start=start, nplanes=nplanes)
    sig = types.int64(x, bits, start, nplanes, pow2, prev, has_prev, a, b, lim, out)
    width = bits.dtype.bitwidth
    ft = _F32 if width == 32 else _F64

    def codegen(context, builder, signature, args):
        bld = builder
        (xv, bitsv, startv, pv, pow2v, prevv, hasv, av, bv, limv,
         outv) = _widened(context, bld, signature, args)
        vt = vector(ir.IntType(width), LANES)
        fv = vector(ft, LANES)

        def at(k, arr):
            return element_pointer(context, bld, signature.args[k], arr, startv)

        emax, code = _quantize(bld, load(bld, at(1, bitsv), vt), width, pv)
        allones = ir.Constant(I64, _LAYOUT[width][1])
        with bld.if_then(bld.icmp_signed("<", emax, allones), likely=True):
            quantum = bld.load(element_pointer(context, bld, signature.args[4], pow2v, emax))
            p = bld.trunc(pv, ir.IntType(width)) if width < 64 else pv
            low = bld.lshr(code, splat(bld, bld.sub(ir.Constant(ir.IntType(width), width), p),
                                       vt))
            rt = bld.bitcast(_scaled(bld, low, width, pv, quantum), fv)

            a_, b_, lim_ = (context.cast(bld, v, t, x.dtype) for v, t in (
                (av, signature.args[7]), (bv, signature.args[8]), (limv, signature.args[9])))
            zero = bld.fsub(a_, a_)
            kept = bld.fmul(splat(bld, a_, fv), load(bld, at(5, prevv), fv))
            has = bld.icmp_unsigned("!=", context.cast(bld, hasv, signature.args[6],
                                                       types.boolean), ir.Constant(_I1, 0))
            r = bld.select(has, kept, splat(bld, zero, fv))
            lost = bld.fmul(splat(bld, b_, fv), bld.fsub(load(bld, at(0, xv), fv), rt))
            r = bld.select(bld.fcmp_unordered("!=", b_, zero), bld.fadd(r, lost), r)
            top, bottom = splat(bld, lim_, fv), splat(bld, bld.fneg(lim_), fv)
            r = bld.select(bld.fcmp_ordered(">", r, top), top,
                           bld.select(bld.fcmp_ordered("<", r, bottom), bottom, r))
            store(bld, r, at(10, outv))
        return emax

    return sig, codegen
