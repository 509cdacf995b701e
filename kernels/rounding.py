"""Float64 arithmetic rounded alike on the CPU and the GPU.

CUDA's compiler contracts a multiply followed by an add into one fused
multiply-add (one rounding) by default, where the CPU code rounds twice: a
quantizer's ``floor(x * inv_step + 1/2)`` can then differ by one step between
the two near a rounding boundary, and a stream that one device encodes and
the other decodes would disagree where the decoder recomputes it. Per-block
code that must give the same result on both writes such products and sums
with :func:`mul_rn` and :func:`add_rn`: plain operators on the CPU (which
never contracts without fast-math flags) and in the CUDA simulator,
libdevice's ``dmul_rn``/``dadd_rn`` in CUDA kernels (calls NVVM does not
fuse).
"""
from __future__ import annotations

from numba.core.target_extension import current_target
from numba.extending import overload

__all__ = ["add_rn", "mul_rn"]


def mul_rn(a, b):
    """``a * b`` in float64, rounded once (never fused with a following add)."""
    return a * b


def add_rn(a, b):
    """``a + b`` in float64, rounded once (never fused with a preceding multiply)."""
    return a + b


@overload(mul_rn, inline="always")
def _mul_rn(a, b):
    if current_target() == "cuda":
        from numba.cuda import libdevice

        return lambda a, b: libdevice.dmul_rn(a, b)
    return lambda a, b: a * b


@overload(add_rn, inline="always")
def _add_rn(a, b):
    if current_target() == "cuda":
        from numba.cuda import libdevice

        return lambda a, b: libdevice.dadd_rn(a, b)
    return lambda a, b: a + b
