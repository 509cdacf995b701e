"""Error feedback's element-wise passes over a host bucket (``mpicomp.training.feedback``).

The host counterparts of ``feedback_cuda``: the check that what compression
lost is finite, and the residual update ``out = clip(a * prev + b * (x - rt),
-lim, lim)``, each one pass over the bucket on the rank's thread budget, in
the arrays' dtype and in NumPy's order of operations (the same bits as the
NumPy expressions they replace, without their temporaries).
:func:`bitplane_residual` is the update with ``rt`` the bitplane codec's
round trip of ``x``, in one pass: each block's values quantized and
dequantized by ``bitplane_block``'s own functions (the values its decoder
gives), no stream written, read or checked.
"""
from __future__ import annotations

import sys

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .bitplane_block import block_emax, quantize_value, value_of_code
from .bitplane_vector import LANES, residual_block_vec32
from .intbits import as_float, is_single
from .launch import readonly, run_kernel
from .scan_cpu import CHUNK

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["bitplane_residual", "count_nonfinite_difference", "residual"]


def count_nonfinite_difference(x: np.ndarray, rt: np.ndarray) -> int:
    """How many ``x[i] - rt[i]`` are NaN or Inf (1-D, same length and dtype)."""
    flags = np.zeros((x.size + CHUNK - 1) // CHUNK, np.int64)
    run_kernel(nonfinite_difference_kernel, x, rt, flags, serial=x.size <= CHUNK)
    return int(flags.sum())


def residual(x: np.ndarray, rt: np.ndarray, prev: np.ndarray | None, a: float, b: float,
             lim: float, out: np.ndarray) -> np.ndarray:
    """``out = clip(a * prev + b * (x - rt), -lim, lim)`` (``prev`` None: ``a`` is 0);
    ``out`` may be ``prev``. 1-D arrays of one float dtype."""
    t = x.dtype.type
    has_prev = prev is not None and a != 0
    run_kernel(residual_kernel, x, rt, prev if has_prev else x, has_prev, t(a), t(b),
               t(lim), out, serial=x.size <= CHUNK)
    return out


def bitplane_residual(x: np.ndarray, block_size: int, nplanes: int, pow2: np.ndarray,
                      prev: np.ndarray | None, a: float, b: float, lim: float,
                      out: np.ndarray) -> int:
    """``out = clip(a * prev + b * (x - C(x)), -lim, lim)`` with ``C`` the bitplane codec
    of ``block_size`` and ``nplanes`` (``pow2``: its decoder's table,
    ``bitplane_cpu.quantum_table``); returns the blocks holding NaN or Inf, which the codec
    refuses (their values of ``out`` are not written). 1-D arrays of one float dtype;
    ``prev`` None: ``a`` is 0."""
    t = x.dtype.type
    has_prev = prev is not None and a != 0
    bits = x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint64)
    nblocks = (x.size + block_size - 1) // block_size
    flags = np.zeros((nblocks + _BLOCKS - 1) // _BLOCKS, np.int64)
    run_kernel(bitplane_residual_kernel, readonly(x), readonly(bits), block_size, nplanes,
               pow2, readonly(prev if has_prev else x), has_prev, t(a), t(b), t(lim), out,
               flags, block_size == LANES and sys.byteorder == "little",
               serial=flags.size <= 1)
    return int(flags.sum())


#: blocks per parallel work item of :func:`bitplane_residual`
_BLOCKS = CHUNK // 32


@njit(parallel=True, cache=True, nogil=True)
def bitplane_residual_kernel(x, bits, bs, nplanes, pow2, prev, has_prev, a, b, lim, out,
                             flags, vector):
    """:func:`bitplane_residual`; ``flags[c]``: the blocks of work item ``c`` that hold
    NaN or Inf (``bitplane_cpu``'s encoder refuses them: exponent all ones). ``vector``:
    whole blocks of 32 on 32 lanes (``bitplane_vector.residual_block_vec32``), the others
    value by value (``bitplane_block``): the same values."""
    n = x.size
    mant_bits, ebits = (23, 8) if is_single(x) else (52, 11)
    m = np.int64(nplanes - 1)
    um = np.uint64(m)
    nblocks = (n + bs - 1) // bs
    zero = a - a
    for c in prange(flags.size):
        bad = 0
        for blk in range(c * _BLOCKS, min(nblocks, (c + 1) * _BLOCKS)):
            lo = blk * bs
            hi = min(lo + bs, n)
            if vector and hi - lo == LANES:
                if residual_block_vec32(x, bits, lo, nplanes, pow2, prev, has_prev, a, b, lim,
                                        out) == (1 << ebits) - 1:
                    bad += 1
                continue
            emax = block_emax(bits[lo:hi], hi - lo, mant_bits, ebits)  # (a short block's
            if emax == (1 << ebits) - 1:  # zero padding has no larger exponent)
                bad += 1
                continue
            quantum = pow2[emax]
            for i in range(lo, hi):
                code = quantize_value(bits[i], emax, m, mant_bits, ebits)
                r = a * prev[i] if has_prev else zero
                if b != zero:  # (the decoder's value: exact in the dtype)
                    r = r + b * (x[i] - as_float(value_of_code(code, um, quantum), x))
                out[i] = _clip(r, lim)
        flags[c] = bad


@njit(inline="always")
def _clip(r, lim):
    if r > lim:
        return lim
    if r < -lim:
        return -lim
    return r


@njit(parallel=True, cache=True, nogil=True)
def nonfinite_difference_kernel(x, rt, flags):
    """``flags[c]`` = the non-finite ``x[i] - rt[i]`` of chunk ``c``."""
    n = x.size
    for c in prange(flags.size):
        lo = c * CHUNK
        hi = min(lo + CHUNK, n)
        a, b = x[lo:hi], rt[lo:hi]
        bad = 0
        for i in range(a.size):
            d = a[i] - b[i]
            bad += not np.isfinite(d)
        flags[c] = bad


@njit(parallel=True, cache=True, nogil=True)
def residual_kernel(x, rt, prev, has_prev, a, b, lim, out):
    """``out[i] = clip(a * prev[i] + b * (x[i] - rt[i]), -lim, lim)``; without ``has_prev``
    the first term is 0 (``prev`` is then any array of the length), with ``b`` 0 the
    second."""
    n = x.size
    zero = a - a
    nchunks = (n + CHUNK - 1) // CHUNK
    for c in prange(nchunks):
        lo = c * CHUNK
        hi = min(lo + CHUNK, n)
        xs, rs, ps, os = x[lo:hi], rt[lo:hi], prev[lo:hi], out[lo:hi]
        for i in range(xs.size):
            v = a * ps[i] if has_prev else zero
            if b != zero:  # (b = 0: a non-finite step, whose x - rt is not to be read)
                v = v + b * (xs[i] - rs[i])
            if v > lim:
                v = lim
            elif v < -lim:
                v = -lim
            os[i] = v
