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

:func:`floor_rn` is a float64 floor written as each target vectorizes or
runs it best: one ``roundpd`` on x86-64 (SSE4.1 and later) in the CPU
code, a truncation through int32 and a correction in CUDA kernels (the
CPU code once used that too: six instructions where one does).
"""
from __future__ import annotations

import numpy as np
from numba.core.target_extension import current_target
from numba.extending import overload

__all__ = ["add_rn", "floor_rn", "mul_rn"]


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


def floor_rn(s):
    """``floor(s)`` as a float64, for ``|s| <= 2**31 - 1`` (exact on every target)."""
    return np.floor(s)


@overload(floor_rn, inline="always")
def _floor_rn(s):
    if current_target() == "cuda":
        def truncated(s):  # (a truncation through int32, one less where it rounded up)
            t = np.float64(np.int32(s))
            return t - np.float64(t > s)

        return truncated
    return lambda s: np.floor(s)  # (llvm.floor: roundpd in the vector loops)
