"""CUDA kernels of the gradient reducer (``mpicomp.training``) on device buckets.

The device counterparts of the few NumPy expressions the reducer runs on
host buckets (``mpicomp/backend/host.py``): the division of a reduced
bucket by the rank count, the check that a residual is finite, and the
error-feedback update ``out = clip(a * prev + b * (x - rt), -lim, lim)``.
Scalars are passed in the arrays' dtype, so float32 buckets are computed
in float32 as NumPy computes them.
"""
from __future__ import annotations

import math

from numba import cuda

__all__ = ["divide", "nonfinite", "nonfinite_difference", "residual"]


@cuda.jit
def divide(y, d):
    """``y[i] = y[i] / d`` (a true division, as ``np.divide``)."""
    i = cuda.grid(1)
    if i < y.size:
        y[i] = y[i] / d


@cuda.jit
def nonfinite(x, flag):
    """``flag[0] = 1`` when some ``x[i]`` is NaN or Inf (``flag`` starts at 0)."""
    i = cuda.grid(1)
    if i < x.size and not math.isfinite(x[i]):
        flag[0] = 1


@cuda.jit
def nonfinite_difference(x, rt, flag):
    """``flag[0] = 1`` when some ``x[i] - rt[i]`` is NaN or Inf (``flag`` starts at 0)."""
    i = cuda.grid(1)
    if i < x.size and not math.isfinite(x[i] - rt[i]):
        flag[0] = 1


@cuda.jit
def residual(x, rt, prev, a, b, lim, out):
    """``out[i] = clip(a * prev[i] + b * (x[i] - rt[i]), -lim, lim)``.

    ``a == 0`` leaves ``prev`` unread and ``b == 0`` leaves ``x`` and ``rt``
    unread (so a NaN there cannot leak in); ``out`` may be ``prev``.
    """
    i = cuda.grid(1)
    if i < out.size:
        v = a - a
        if a != 0:
            v = a * prev[i]
        if b != 0:
            v = v + b * (x[i] - rt[i])
        if v > lim:
            v = lim
        elif v < -lim:
            v = -lim
        out[i] = v
