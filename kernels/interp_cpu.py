"""Numba CPU passes of the ``errbound`` codec's shaped mode: multilevel interpolation.

An array of up to 3 dimensions ``(n0, n1, n2)`` (C order, flat here) is
coded coarse to fine. ``S`` is the smallest power of two at least every
dimension; the value at the origin comes first, predicted as 0. Then for
each stride ``s = S, S/2, ..., 2`` (``h = s / 2``) and each axis ``a`` in
turn, the *targets* are the points whose coordinate along ``a`` is an odd
multiple of ``h``, along the axes before ``a`` a multiple of ``h``, along
the axes after it a multiple of ``s``: their neighbours at ``+-h`` and
``+-3h`` along ``a`` are known (reconstructed) by then. Each target is
predicted from them:

* cubic, ``(-r[-3h] + 9 r[-h] + 9 r[+h] - r[+3h]) / 16``, with two
  neighbours known on each side;
* linear, ``(r[-h] + r[+h]) / 2``, with one on each side;
* ``r[-h]`` at the far edge.

The prediction error is quantized to ``q = rint((x - p) * (1 / step))``
with ``step = 2 * bound``, and the target reconstructed as ``r = p + q * step``
(float64, the decoder computes the same bits). A target whose ``|q|`` is
over :data:`MAX_Q`, or whose reconstruction rounded to the data's dtype
misses ``x`` by more than ``bound``, is an *escape*: it keeps ``x``
exactly (``r = x``, stored apart by the caller). Every point is a target
exactly once; its code lands at the pass's offset plus its place in the
pass (C order over the targets), so a pass's targets run in parallel.

Codes are zigzag-mapped (``0, -1, 1, -2, ...`` to ``0, 1, 2, 3, ...``) to
16 bits, :data:`ESCAPE` marking an escape, and written as two byte planes
(the low bytes of all codes, then the high bytes: for an entropy coder, the
high plane of smooth data is nearly all zeros).

Speed: most targets are cubic, and a row's cubic targets run in a loop
without branches (selects), its reconstructions and escapes first into
contiguous scratch (a loop that writes no array it reads vectorizes), then
into place; the finest level's stride (2) is a constant there. The edges'
targets go one at a time.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["ESCAPE", "MAX_Q", "code_pass", "passes"]

#: the code of an escape (a value kept exactly)
ESCAPE = 0xFFFF
#: the largest ``|q|`` coded (its zigzag code is ``2 * MAX_Q``, below :data:`ESCAPE`)
MAX_Q = 32766


def passes(dims: tuple[int, int, int]) -> list[tuple[int, int, int, int, int]]:
    """The coding passes of an array of ``dims``: ``(axis, h, s, code offset, targets)``
    each, the origin's pass first (axis -1); their targets are every point once."""
    n = dims[0] * dims[1] * dims[2]
    if n == 0:
        return []
    out = [(-1, 0, 0, 0, 1)]
    top = 1
    while top < max(dims):
        top *= 2
    at = 1
    s = top
    while s >= 2:
        h = s // 2
        for ax in range(3):
            count = 1
            for d in range(3):
                first, stride = (h, s) if d == ax else ((0, h) if d < ax else (0, s))
                count *= max(0, (dims[d] - first + stride - 1) // stride)
            if count:
                out.append((ax, h, s, at, count))
            at += count
        s = h
    if at != n:
        raise AssertionError(f"interpolation passes over {dims} code {at} points, not {n}")
    return out


@njit(inline="always")
def _grid(ax, h, s, n, d):
    """(first coordinate, stride, count) of a pass's targets along dimension ``d``."""
    if d == ax:
        first, stride = h, s
    elif d < ax:
        first, stride = 0, h
    else:
        first, stride = 0, s
    count = (n - first + stride - 1) // stride
    return first, stride, max(count, 0)


@njit(inline="always")
def _targets(n0, n1, n2, ax, h, s):
    """(first, stride, count) along each dimension of a pass's targets, then the flat
    distance of neighbours along ``ax`` and its dimension (the origin's pass: ``ax`` -1)."""
    if ax < 0:
        return 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1
    f0, d0, c0 = _grid(ax, h, s, n0, 0)
    f1, d1, c1 = _grid(ax, h, s, n1, 1)
    f2, d2, c2 = _grid(ax, h, s, n2, 2)
    stride = n1 * n2 if ax == 0 else (n2 if ax == 1 else 1)
    nax = n0 if ax == 0 else (n1 if ax == 1 else n2)
    return f0, d0, c0, f1, d1, c1, f2, d2, c2, stride, nax


@njit(inline="always")
def _predict(rec, idx, i, n, h, stride):
    """The prediction of ``rec[idx]``, at coordinate ``i`` of ``n`` along an axis whose
    neighbours lie ``stride`` values apart (see the module)."""
    left = rec[idx - h * stride]
    if i + h >= n:
        return left
    if _is_cubic(i, n, h):
        return _cubic_at(rec, np.uint64(idx), h * stride)
    return (left + rec[idx + h * stride]) / 2.0


@njit(inline="always")
def _cubic_at(rec, idx, off):
    """The cubic prediction of ``rec[idx]`` (``idx`` unsigned) from its neighbours ``off``
    apart: ``(-r[-3] + 9 r[-1] + 9 r[+1] - r[+3]) / 16``, in that order."""
    o1 = np.uint64(off)
    o3 = np.uint64(3 * off)
    return (-rec[idx - o3] + 9.0 * rec[idx - o1] + 9.0 * rec[idx + o1] - rec[idx + o3]) / 16.0


@njit(inline="always")
def _is_cubic(i, n, h):
    """Whether the target at coordinate ``i`` of ``n`` (neighbours ``h`` apart) has two
    known neighbours on each side (:func:`_predict`'s cubic case)."""
    return i >= 3 * h and i + 3 * h < n


@njit(inline="always")
def _code_one(x, rec, planes, escapes, idx, k, n, pred, step, inv_step, bound, single,
              decoding):
    """One target predicted as ``pred`` (its code at ``planes[k]``, the high byte ``n``
    later): :func:`code_pass`'s work on it, with branches (the edges' targets and the
    origin); returns its ``(bad, kept)`` counts."""
    if decoding:
        code = np.int64(planes[k]) | (np.int64(planes[n + k]) << 8)
        if code == ESCAPE:
            return 0, 0
        if code > 2 * MAX_Q:
            return 1, 0
        q = (code >> 1) ^ -(code & 1)
        rec[idx] = pred + np.float64(q) * step
        return 0, 0
    v = np.float64(x[idx])
    code = ESCAPE
    r = v
    bad = 0
    if not np.isfinite(v):
        bad = 1
        r = 0.0
    else:
        qf = np.rint((v - pred) * inv_step)
        if abs(qf) <= MAX_Q:
            cand = pred + qf * step
            back = np.float64(np.float32(cand)) if single else cand
            if abs(v - back) <= bound:
                qi = np.int64(qf)
                code = (qi << 1) ^ (qi >> 63)
                r = cand
    kept = 0
    if code == ESCAPE:
        escapes[idx] = 1
        kept = 1
    rec[idx] = r
    planes[k] = np.uint8(code & 0xFF)
    planes[n + k] = np.uint8(code >> 8)
    return bad, kept


@njit(inline="always")
def _encode_cubic(x, rec, planes, escapes, first, stride, k0, lo, hi, off, n, step,
                  inv_step, bound, single, vals, flags):
    """Targets ``lo`` to ``hi`` of a row (target ``t`` at ``first + t * stride``, its code
    at ``k0 + t``), all cubic (neighbours ``off`` apart): :func:`_code_one`'s encode
    without a branch (selects; unsigned indices), their reconstructions into ``vals``
    and escapes into ``flags`` (scratch of ``hi - lo`` or more: a loop that writes no
    array it reads, and nothing with a stride, vectorizes), then into ``rec`` and
    ``escapes``; returns the ``(bad, kept)`` counts. Every target is written
    (``escapes`` 0 or 1)."""
    bad = 0
    kept = 0
    nn = np.uint64(n)
    for t in range(lo, hi):
        idx = np.uint64(first + t * stride)
        k = np.uint64(k0 + t)
        pred = _cubic_at(rec, idx, off)
        v = np.float64(x[idx])
        qf = np.rint((v - pred) * inv_step)
        inside = abs(qf) <= MAX_Q  # (False for NaN)
        qc = qf if inside else 0.0
        cand = pred + qc * step
        back = np.float64(np.float32(cand)) if single else cand
        ok = inside & (abs(v - back) <= bound)
        finite = v - v == 0.0
        qi = np.int64(qc)
        code = ((qi << 1) ^ (qi >> 63)) if ok else np.int64(ESCAPE)
        vals[np.uint64(t - lo)] = cand if ok else (v if finite else 0.0)
        flags[np.uint64(t - lo)] = np.uint8(not ok)
        kept += np.int64(not ok)
        bad += np.int64(not finite)
        planes[k] = np.uint8(code & 0xFF)
        planes[nn + k] = np.uint8(code >> 8)
    for t in range(lo, hi):
        idx = np.uint64(first + t * stride)
        rec[idx] = vals[np.uint64(t - lo)]
        escapes[idx] = flags[np.uint64(t - lo)]
    return bad, kept


@njit(inline="always")
def _decode_cubic(rec, planes, first, stride, k0, lo, hi, off, n, step):
    """:func:`_encode_cubic`'s targets decoded, without a branch: an escape's value and a
    damaged code's target are left as ``rec`` holds them; returns the damaged codes."""
    bad = 0
    for t in range(lo, hi):
        k = np.uint64(k0 + t)
        code = np.int64(planes[k]) | (np.int64(planes[k + np.uint64(n)]) << 8)
        idx = np.uint64(first + t * stride)
        pred = _cubic_at(rec, idx, off)
        q = (code >> 1) ^ -(code & 1)
        value = pred + np.float64(q) * step
        escape = code == ESCAPE
        damaged = (code > 2 * MAX_Q) & (not escape)
        rec[idx] = rec[idx] if escape | damaged else value
        bad += np.int64(damaged)
    return bad


@njit(inline="always")
def _cubic_span(x, rec, planes, escapes, first, stride, k0, lo, hi, off, n, step, inv_step,
                bound, single, decoding, scratch):
    """A row's cubic targets ``lo`` to ``hi`` encoded (:func:`_encode_cubic`, ``scratch``
    its two arrays) or decoded (:func:`_decode_cubic`); their ``(bad, kept)``."""
    if decoding:
        return _decode_cubic(rec, planes, first, stride, k0, lo, hi, off, n, step), 0
    return _encode_cubic(x, rec, planes, escapes, first, stride, k0, lo, hi, off, n, step,
                         inv_step, bound, single, scratch[0], scratch[1])


@njit(inline="always")
def _code_targets(x, rec, planes, escapes, t_from, t_to, base, f2, d2, k0, i0, i1, ax, h,
                  nax, stride, n, step, inv_step, bound, single, decoding):
    """Targets ``t_from`` to ``t_to`` of a row, one at a time (:func:`_predict`,
    :func:`_code_one`; ``ax`` -1: the origin, predicted as 0); their ``(bad, kept)``."""
    bad = 0
    kept = 0
    for t2 in range(t_from, t_to):
        i2 = f2 + t2 * d2
        idx = base + i2
        pred = 0.0
        if ax >= 0:
            i = i0 if ax == 0 else (i1 if ax == 1 else i2)
            pred = _predict(rec, idx, i, nax, h, stride)
        b, e = _code_one(x, rec, planes, escapes, idx, k0 + t2, n, pred, step, inv_step,
                         bound, single, decoding)
        bad += b
        kept += e
    return bad, kept


@njit(parallel=True, cache=True, nogil=True)
def code_pass(x, rec, planes, escapes, vals, flags, n0, n1, n2, ax, h, s, at, step,
              inv_step, bound, single, decoding):
    """One pass's targets (flat, ``n0 * n1 * n2`` values; ``ax`` -1: the origin alone,
    predicted as 0). Encoding: the codes of ``x`` into ``planes`` (low bytes at ``at +
    k``, high bytes ``n`` later), the reconstructions into ``rec`` (float64),
    ``escapes[idx] = 1`` where a target keeps its value; ``vals`` (float64) and
    ``flags`` (uint8): scratch of the pass's targets or more. Decoding (``x``,
    ``escapes``, ``vals`` and ``flags`` unread): the reconstructions from the codes (an
    escape's value is in ``rec`` already). Returns ``(bad, escapes)``: encoding, the
    non-finite targets and the escapes; decoding, the codes past :data:`MAX_Q` that are
    not :data:`ESCAPE` (a damaged stream), and 0.

    A row's cubic targets (all of a row across the pass's axis, or, along the row's own
    axis, those between its edges) run in a loop without branches
    (:func:`_encode_cubic`, :func:`_decode_cubic`); the others one at a time
    (:func:`_code_one`)."""
    n = n0 * n1 * n2
    f0, d0, c0, f1, d1, c1, f2, d2, c2, stride, nax = _targets(n0, n1, n2, ax, h, s)
    bad = 0
    kept = 0
    for row in prange(c0 * c1):  # (the rows of both outer dimensions: a 2-D field's too)
        t0 = row // c1
        t1 = row - t0 * c1
        i0 = f0 + t0 * d0
        i1 = f1 + t1 * d1
        base = (i0 * n1 + i1) * n2
        k0 = at + row * c2
        lo = c2  # the row's cubic targets: lo to hi
        hi = c2
        if ax == 2:
            lo = 0
            while lo < c2 and not _is_cubic(f2 + lo * d2, nax, h):
                lo += 1
            hi = c2
            while hi > lo and not _is_cubic(f2 + (hi - 1) * d2, nax, h):
                hi -= 1
        elif ax >= 0 and _is_cubic(i0 if ax == 0 else i1, nax, h):
            lo = 0
        b, e = _code_targets(x, rec, planes, escapes, 0, lo, base, f2, d2, k0, i0, i1, ax, h,
                             nax, stride, n, step, inv_step, bound, single, decoding)
        bad += b
        kept += e
        if lo < hi:  # (the finest level's stride, 2, a constant when it compiles: the
            # loops vectorize there, where LLVM speculates a stride of 1 otherwise)
            scratch = vals[row * c2:(row + 1) * c2], flags[row * c2:(row + 1) * c2]  # (its own)
            if d2 == 2:
                b, e = _cubic_span(x, rec, planes, escapes, base + f2, 2, k0, lo, hi,
                                   h * stride, n, step, inv_step, bound, single, decoding,
                                   scratch)
            else:
                b, e = _cubic_span(x, rec, planes, escapes, base + f2, d2, k0, lo, hi,
                                   h * stride, n, step, inv_step, bound, single, decoding,
                                   scratch)
            bad += b
            kept += e
        b, e = _code_targets(x, rec, planes, escapes, hi, c2, base, f2, d2, k0, i0, i1, ax, h,
                             nax, stride, n, step, inv_step, bound, single, decoding)
        bad += b
        kept += e
    return bad, kept
