"""Fixed-width integer helpers shared by the CPU and GPU kernels.

Block codecs do their integer work in 64-bit registers. ``wrap_int`` and
``wrap_uint`` bring a result back to the width of the codec's integer type
(32 bits for float32 data, 64 for float64), reproducing two's-complement
wraparound exactly as C code on ``int32_t``/``uint32_t`` would. The width is
picked at compile time from ``proto`` (a float scalar or array of the data's
dtype), so the float64 variants compile to nothing.
"""
from __future__ import annotations

import numpy as np
from numba.core import types
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros
from numba.extending import overload

from .jit import SIMULATOR, njit, python_with_compiled

__all__ = [
    "as_float", "clz64", "ctz64", "imax", "imin", "is_single", "reverse_nibbles64", "wrap_int",
    "wrap_uint",
]


def _is32(proto) -> bool:
    dt = getattr(proto, "dtype", proto)
    return dt in (types.float32, types.int32, types.uint32)


def wrap_int(v, proto):
    """Signed ``v`` wrapped to the codec integer width (pure-Python fallback)."""
    bits = 32 if np.dtype(getattr(proto, "dtype", type(proto))).itemsize == 4 else 64
    v = int(v) & ((1 << bits) - 1)
    return v - (1 << bits) if v >> (bits - 1) else v


def wrap_uint(v, proto):
    """Unsigned ``v`` wrapped to the codec integer width (pure-Python fallback)."""
    bits = 32 if np.dtype(getattr(proto, "dtype", type(proto))).itemsize == 4 else 64
    return int(v) & ((1 << bits) - 1)


def is_single(proto):
    """True when ``proto`` is (an array of) a 32-bit type."""
    return np.dtype(getattr(proto, "dtype", type(proto))).itemsize == 4


@overload(wrap_int, inline="always")
def _wrap_int(v, proto):
    if _is32(proto):
        return lambda v, proto: np.int64(np.int32(v))
    return lambda v, proto: np.int64(v)


@overload(wrap_uint, inline="always")
def _wrap_uint(v, proto):
    if _is32(proto):
        return lambda v, proto: np.uint64(v) & np.uint64(0xFFFFFFFF)
    return lambda v, proto: np.uint64(v)


@overload(is_single, inline="always")
def _is_single(proto):
    if _is32(proto):
        return lambda proto: True
    return lambda proto: False


def as_float(v, proto):
    """``v`` converted to the float type of ``proto`` (pure-Python fallback)."""
    return np.dtype(getattr(proto, "dtype", type(proto))).type(v)


@overload(as_float, inline="always")
def _as_float(v, proto):
    if _is32(proto):
        return lambda v, proto: np.float32(v)
    return lambda v, proto: np.float64(v)


def _ctz64_nopython(v):
    return np.int64(trailing_zeros(np.uint64(v)))


def _clz64_nopython(v):
    return np.int64(leading_zeros(np.uint64(v)))


if SIMULATOR:  # plain Python in simulated kernels, the intrinsics in compiled code (see jit.py)

    def ctz64(v):
        """Number of trailing zero bits of the uint64 ``v`` (64 for 0)."""
        v = int(v) & 0xFFFFFFFFFFFFFFFF
        return np.int64(64 if v == 0 else (v & -v).bit_length() - 1)

    def clz64(v):
        """Number of leading zero bits of the uint64 ``v`` (64 for 0)."""
        return np.int64(64 - (int(v) & 0xFFFFFFFFFFFFFFFF).bit_length())

    python_with_compiled(ctz64, _ctz64_nopython)
    python_with_compiled(clz64, _clz64_nopython)

else:
    ctz64 = njit(inline="always")(_ctz64_nopython)
    ctz64.__doc__ = "Number of trailing zero bits of the uint64 ``v`` (64 for 0)."
    clz64 = njit(inline="always")(_clz64_nopython)
    clz64.__doc__ = "Number of leading zero bits of the uint64 ``v`` (64 for 0)."


@njit(inline="always")
def reverse_nibbles64(t):
    """``t`` (uint64) with the order of its 16 four-bit groups reversed."""
    t = (t >> np.uint64(32)) | (t << np.uint64(32))
    t = (((t >> np.uint64(16)) & np.uint64(0x0000FFFF0000FFFF))
         | ((t & np.uint64(0x0000FFFF0000FFFF)) << np.uint64(16)))
    t = (((t >> np.uint64(8)) & np.uint64(0x00FF00FF00FF00FF))
         | ((t & np.uint64(0x00FF00FF00FF00FF)) << np.uint64(8)))
    return (((t >> np.uint64(4)) & np.uint64(0x0F0F0F0F0F0F0F0F))
            | ((t & np.uint64(0x0F0F0F0F0F0F0F0F)) << np.uint64(4)))


@njit(inline="always")
def imin(a, b):
    """``min(a, b)``; per-block code uses it because Numba's CUDA target fails to compile
    the ``min``/``max`` builtins inside inlined device functions."""
    return a if a < b else b


@njit(inline="always")
def imax(a, b):
    """``max(a, b)`` (see :func:`imin`)."""
    return a if a > b else b
