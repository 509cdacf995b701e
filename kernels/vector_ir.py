"""Building LLVM vector IR inside Numba intrinsics (CPU kernels only).

Numba has no SIMD vector types, and LLVM's auto-vectorizer is fragile on
short fixed-size loops (a block of 32 values): it may keep a loop scalar,
widen 32-bit arithmetic to 64 bits, or add aliasing checks per block. An
``numba.extending.intrinsic`` can instead emit LLVM IR on whole vectors
(``<32 x i32>``, ``<32 x i1>``, ...), which LLVM lowers to the host's SIMD
instructions (AVX2 on current x86-64) or, on any other target, to an
equivalent instruction sequence: the IR is portable, only its speed
depends on the host. These helpers keep such code short and readable.

Everything here is target independent LLVM IR (no x86 intrinsics); vector
loads and stores are unaligned (``align 1``) so that any NumPy buffer,
including a view at an odd byte offset, is safe.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import cgutils

__all__ = ["I8", "I32", "I64", "call_intrinsic", "element_pointer", "load", "splat", "store",
           "vector"]

I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)


def vector(element: ir.Type, lanes: int) -> ir.VectorType:
    """The LLVM type ``<lanes x element>``."""
    return ir.VectorType(element, lanes)


def splat(builder: ir.IRBuilder, value: Any, vtype: ir.VectorType) -> ir.Value:
    """A ``vtype`` vector with every lane ``value`` (a Python int or an IR scalar).

    An int is taken modulo ``2**width`` of an integer lane (``1 << 63`` is the
    sign bit of an ``i64`` lane).
    """
    if isinstance(value, int):
        width = vtype.element.width
        value &= (1 << width) - 1
        if value >> (width - 1):
            value -= 1 << width
        return ir.Constant(vtype, [value] * vtype.count)
    one = builder.insert_element(ir.Constant(vtype, ir.Undefined), value, ir.Constant(I32, 0))
    mask = ir.Constant(vector(I32, vtype.count), [0] * vtype.count)
    return builder.shuffle_vector(one, ir.Constant(vtype, ir.Undefined), mask)


def call_intrinsic(builder: ir.IRBuilder, name: str, ret: ir.Type, *args: ir.Value) -> ir.Value:
    """Call the LLVM intrinsic ``name`` (fully mangled, e.g. ``llvm.umax.v32i32``)."""
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), args)


def element_pointer(context: Any, builder: ir.IRBuilder, arrtype: Any, arr: ir.Value,
                    index: ir.Value) -> ir.Value:
    """Pointer to ``arr[index]`` of a C-contiguous 1-D array (no bounds check)."""
    data = context.make_array(arrtype)(context, builder, arr).data
    return builder.gep(data, [index])


def load(builder: ir.IRBuilder, ptr: ir.Value, vtype: ir.Type) -> ir.Value:
    """Unaligned load of a ``vtype`` value from ``ptr``."""
    return builder.load(builder.bitcast(ptr, vtype.as_pointer()), align=1)


def store(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value) -> None:
    """Unaligned store of ``value`` at ``ptr``."""
    builder.store(value, builder.bitcast(ptr, value.type.as_pointer()), align=1)
