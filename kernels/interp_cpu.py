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
and the target reconstructed as ``r = p + q * step`` (float64, the decoder
computes the same bits). The step is finer on coarse levels, whose
reconstructions predict every point below them (SZ3's level-wise bounds):
the level of stride ``s = 2 h`` quantizes with ``step / f``, ``step = 2
bound`` at the finest level and ``f`` growing by :data:`ALPHA` a level up
to :data:`CAP` (:func:`level_steps`); the origin takes one level coarser's.
A target whose ``|q|`` is over :data:`MAX_Q`, or whose reconstruction
rounded to the data's dtype misses ``x`` by more than ``bound``, is an
*escape*: it keeps ``x`` exactly (``r = x``, stored apart by the caller). Every point is a target
exactly once; its code lands at the pass's offset plus its place in the
pass (C order over the targets).

Codes are zigzag-mapped (``0, -1, 1, -2, ...`` to ``0, 1, 2, 3, ...``) to
16 bits, :data:`ESCAPE` marking an escape, and written as two byte planes
(the low bytes of all codes, then the high bytes: for an entropy coder, the
high plane of smooth data is nearly all zeros).

Layout (the speed): each level's reconstructions are kept *compact*, the
grid at stride ``h`` as an array of ``ceil(n0/h) x ceil(n1/h) x
ceil(n2/h)`` values, so every loop reads and writes whole rows: a pass
along axis 0 or 1 predicts a row of targets from whole rows of the coarser
grid; a pass along axis 2 reads a row's coarser points contiguously and
writes the finer row interleaved (a store of pairs). The data's values at
each level come from a pyramid split once, finest first, into each row's
even and odd points (:func:`split_rows`). The encoder never builds the
finest grid; the decoder builds it in the output's dtype. An escape's
value is written in place after its pass (a pass's targets do not read
each other). The pyramid and the grids live in scratch kept per thread
(:mod:`scratch`): the grids alternate between the two halves of one
array, each pass writing its finer grid into the half that does not hold
its coarser one.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from . import scratch

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["ALPHA", "CAP", "ESCAPE", "MAX_Q", "decode", "encode", "escape_positions",
           "level_steps", "passes"]

#: the code of an escape (a value kept exactly)
ESCAPE = 0xFFFF
#: the largest ``|q|`` coded (its zigzag code is ``2 * MAX_Q``, below :data:`ESCAPE`)
MAX_Q = 32766
#: passes of fewer targets run on one thread (a parallel region costs more than they do)
SERIAL_BELOW = 16384
#: escapes up to which :func:`escape_positions` looks for each in turn
_FEW_ESCAPES = 64
#: the level-wise steps' factor from one level to the next coarser, and their largest
ALPHA = 1.4
CAP = 3.0


@functools.lru_cache(maxsize=64)
def passes(dims: tuple[int, int, int]) -> tuple[tuple[int, int, int, int, int], ...]:
    """The coding passes of an array of ``dims``: ``(axis, h, s, code offset, targets)``
    each, the origin's pass first (axis -1); their targets are every point once."""
    n = dims[0] * dims[1] * dims[2]
    if n == 0:
        return ()
    out = [(-1, 0, 0, 0, 1)]
    at = 1
    s = _top(dims)
    while s >= 2:
        h = s // 2
        for ax in range(3):
            count = 1
            for d in range(3):
                count *= _odd(dims[d], h) if d == ax else _ceil(dims[d], h if d < ax else s)
            if count:
                out.append((ax, h, s, at, count))
            at += count
        s = h
    if at != n:
        raise AssertionError(f"interpolation passes over {dims} code {at} points, not {n}")
    return tuple(out)


def _top(dims: tuple[int, ...]) -> int:
    top = 1
    while top < max(dims):
        top *= 2
    return top


def _ceil(n: int, step: int) -> int:
    """The multiples of ``step`` below ``n``."""
    return (n + step - 1) // step


def _odd(n: int, h: int) -> int:
    """The odd multiples of ``h`` below ``n``."""
    return (n + h - 1) // (2 * h)


# --- one target ------------------------------------------------------------------------

@njit(inline="always")
def _encode_one(v, pred, step, inv_step, bound, single):
    """``(code, reconstruction, escape, nonfinite)`` of the value ``v`` (float64)
    predicted as ``pred``, without a branch (selects)."""
    qf = np.rint((v - pred) * inv_step)
    inside = abs(qf) <= MAX_Q  # (False for NaN)
    qc = qf if inside else 0.0
    cand = pred + qc * step
    back = np.float64(np.float32(cand)) if single else cand
    ok = inside & (abs(v - back) <= bound)
    finite = v - v == 0.0
    qi = np.int64(qc)
    code = ((qi << 1) ^ (qi >> 63)) if ok else np.int64(ESCAPE)
    r = cand if ok else (v if finite else 0.0)
    return code, r, np.int64(not ok), np.int64(not finite)


@njit(inline="always")
def _decode_one(planes, k, n, pred, step):
    """``(reconstruction, damaged)`` of the code at ``planes[k]`` (high byte ``n``
    later) predicted as ``pred``: an escape's reconstruction is any value (its own is
    written after the pass), a code past :data:`MAX_Q` that is no escape is damaged."""
    code = np.int64(planes[k]) | (np.int64(planes[k + n]) << 8)
    q = (code >> 1) ^ -(code & 1)
    damaged = (code > 2 * MAX_Q) & (code != ESCAPE)
    return pred + np.float64(q) * step, np.int64(damaged)


@njit(inline="always")
def _put(planes, k, n, code):
    planes[k] = np.uint8(code & 0xFF)
    planes[k + n] = np.uint8(code >> 8)


@njit(inline="always")
def _kind(j, p):
    """How target ``j`` (between parents ``j`` and ``j + 1`` of ``p``) is predicted: 2
    cubic, 1 linear, 0 its left parent."""
    if j >= 1 and j + 2 <= p - 1:
        return 2
    if j + 1 <= p - 1:
        return 1
    return 0


@njit(inline="always")
def _predict(par, at, gap, kind):
    """The prediction of a target whose left parent is ``par[at]``, parents ``gap``
    apart (``at`` and ``gap`` unsigned), of ``kind`` (:func:`_kind`)."""
    if kind == 2:
        return (-par[at - gap] + 9.0 * par[at] + 9.0 * par[at + gap] - par[at + gap + gap]) / 16.0
    if kind == 1:
        return (par[at] + par[at + gap]) / 2.0
    return par[at]


# --- rows ------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _split_row(src, base, length, even, e, odd, o):
    """``src``'s row of ``length`` from ``base`` split: its even points to ``even`` from
    ``e``, its odd ones to ``odd`` from ``o`` (all unsigned)."""
    half = length // 2
    for j in range(half):
        uj = np.uint64(j)
        even[e + uj] = src[base + uj + uj]
        odd[o + uj] = src[base + uj + uj + np.uint64(1)]
    if length > 2 * half:
        even[e + np.uint64(half)] = src[base + np.uint64(2 * half)]


@njit(cache=True, nogil=True)
def _copy_row(par, src, out, dst, length):
    for i in range(length):
        out[dst + np.uint64(i)] = par[src + np.uint64(i)]


@njit(inline="always")
def _outer_encode_loop(par, src, gap, kind, x, xs, out, dst, planes, k0, nn, length, step,
                       inv_step, bound, single):
    """A row of ``length`` targets of a pass along an outer axis encoded: left parents from
    ``par[src]``, the parents ``gap`` apart, predicted as ``kind`` (:func:`_kind`), their
    values from ``x[xs]``, reconstructions to ``out[dst]``, codes at ``k0``; returns
    ``(nonfinite, escapes)``."""
    bad = 0
    kept = 0
    for i in range(length):
        ui = np.uint64(i)
        code, r, e, f = _encode_one(np.float64(x[xs + ui]), _predict(par, src + ui, gap, kind),
                                    step, inv_step, bound, single)
        out[dst + ui] = r
        _put(planes, k0 + ui, nn, code)
        kept += e
        bad += f
    return bad, kept


@njit(inline="always")
def _outer_decode_loop(par, src, gap, kind, out, dst, planes, k0, nn, length, step):
    """:func:`_outer_encode_loop`'s row decoded; returns the damaged codes."""
    bad = 0
    for i in range(length):
        ui = np.uint64(i)
        r, d = _decode_one(planes, k0 + ui, nn, _predict(par, src + ui, gap, kind), step)
        out[dst + ui] = r
        bad += d
    return bad


@njit(inline="always")
def _inner_encode_one(par, src, j, kind, x, xs, out, dst, store, planes, k0, nn, step,
                      inv_step, bound, single):
    """Target ``j`` of a row of a pass along axis 2 encoded (see :func:`_inner_encode_row`),
    its pair of the finer row stored when ``store``; returns ``(nonfinite, escape)``."""
    one = np.uint64(1)
    uj = np.uint64(j)
    code, r, kept, bad = _encode_one(np.float64(x[xs + uj]),
                                     _predict(par, src + uj, one, kind), step, inv_step, bound,
                                     single)
    _put(planes, k0 + uj, nn, code)
    if store:
        out[dst + uj + uj] = par[src + uj]
        out[dst + uj + uj + one] = r
    return bad, kept


@njit(inline="always")
def _inner_encode_row(par, src, p, t, x, xs, out, dst, store, planes, k0, nn, step, inv_step,
                      bound, single):
    """A row of ``t`` targets of a pass along axis 2 between its ``p`` parents
    (``par[src]`` on), their values ``x[xs]`` on, encoded: the finer row (``p + t``,
    interleaved) to ``out[dst]`` when ``store``, the codes at ``k0``; the cubic targets
    (1 to ``hi``) in loops of their own."""
    bad = 0
    kept = 0
    hi = max(min(t, p - 2), 1)
    for m in range(1 + t - hi):  # the edges: target 0 and those from hi
        j = 0 if m == 0 else hi + m - 1
        b, e = _inner_encode_one(par, src, j, _kind(j, p), x, xs, out, dst, store, planes, k0,
                                 nn, step, inv_step, bound, single)
        bad += b
        kept += e
    if store:
        if p > t:
            out[dst + np.uint64(2 * t)] = par[src + np.uint64(t)]
        for j in range(1, hi):
            b, e = _inner_encode_one(par, src, j, 2, x, xs, out, dst, True, planes, k0, nn,
                                     step, inv_step, bound, single)
            bad += b
            kept += e
    else:
        for j in range(1, hi):
            b, e = _inner_encode_one(par, src, j, 2, x, xs, out, dst, False, planes, k0, nn,
                                     step, inv_step, bound, single)
            bad += b
            kept += e
    return bad, kept


@njit(inline="always")
def _inner_decode_one(par, src, j, kind, out, dst, planes, k0, nn, step):
    one = np.uint64(1)
    uj = np.uint64(j)
    r, bad = _decode_one(planes, k0 + uj, nn, _predict(par, src + uj, one, kind), step)
    out[dst + uj + uj] = par[src + uj]
    out[dst + uj + uj + one] = r
    return bad


@njit(inline="always")
def _inner_decode_row(par, src, p, t, out, dst, planes, k0, nn, step):
    """:func:`_inner_encode_row`'s row decoded (the finer row always stored); returns the
    damaged codes."""
    bad = 0
    hi = max(min(t, p - 2), 1)
    for m in range(1 + t - hi):
        j = 0 if m == 0 else hi + m - 1
        bad += _inner_decode_one(par, src, j, _kind(j, p), out, dst, planes, k0, nn, step)
    if p > t:
        out[dst + np.uint64(2 * t)] = par[src + np.uint64(t)]
    for j in range(1, hi):
        bad += _inner_decode_one(par, src, j, 2, out, dst, planes, k0, nn, step)
    return bad


# --- passes: each a parallel loop over rows ---------------------------------------------
#
# The encoder's and the decoder's passes are kernels of their own (each compiles only
# its direction), the rows' code inlined into them (called, it runs up to 1.5x slower);
# the cubic rows (nearly all) run a loop of their own (with the kind a variable, the loop
# runs at half speed).

@njit(parallel=True, cache=True, nogil=True)
def split_rows(src, r0, r1, length, s, even, odd):
    """The rows at multiples of ``s`` along axes 0 and 1 of ``src`` (``r0 x r1`` rows of
    ``length``) split into ``even`` and ``odd`` (:func:`_split_row`), rows in C order."""
    c0 = (r0 + s - 1) // s
    c1 = (r1 + s - 1) // s
    half = length // 2
    p = length - half
    for row in prange(c0 * c1):
        a = row // c1
        base = np.uint64(((a * s) * r1 + (row - a * c1) * s) * length)
        _split_row(src, base, length, even, np.uint64(row * p), odd, np.uint64(row * half))


@njit(inline="always")
def _outer_places(row, p, t, nb, length, xsa, xsj, xsb, at):
    """Target row ``row``'s ``(left parents, reconstructions, x, codes, kind)`` places
    (:func:`outer_encode`)."""
    a = row // (t * nb)
    rest = row - a * t * nb
    j = rest // nb
    b = rest - j * nb
    src = np.uint64(((a * p + j) * nb + b) * length)
    dst = np.uint64(((a * (p + t) + 2 * j + 1) * nb + b) * length)
    xs = np.uint64(a * xsa + (2 * j + 1) * xsj + b * xsb)
    return src, dst, xs, np.uint64(at + row * length), _kind(j, p)


@njit(inline="always")
def _parent_row(row, p, t, nb, length):
    """Parent row ``row`` (``na x p x nb`` rows in C order): ``(its place, its place in the
    finer grid (its even place along the middle axis), its target row (in C order over
    ``na x t x nb``) or -1 where it has none)``."""
    a = row // (p * nb)
    rest = row - a * p * nb
    j = rest // nb
    b = rest - j * nb
    even = np.uint64(((a * (p + t) + 2 * j) * nb + b) * length)
    return np.uint64(row * length), even, (a * t + j) * nb + b if j < t else -1


@njit(parallel=True, cache=True, nogil=True)
def outer_encode(par, x, xsa, xsj, xsb, out, planes, at, n, na, p, t, nb, length, step,
                 bound, single):
    """A pass along an outer axis encoded: ``par`` holds the coarser grid as ``na x p x nb``
    rows of ``length`` (``p`` along the pass's axis), the targets are ``na x t x nb``
    rows, target ``(a, j, b, i)`` of ``x`` at ``a * xsa + (2j + 1) * xsj + b * xsb + i``;
    ``out`` (``na x (p + t) x nb`` rows) gets the parents at its even places along the
    axis and the targets' reconstructions at its odd ones, each parallel iteration a parent
    row and the target row after it; the codes go to ``planes`` from ``at`` in C order.
    Returns ``(nonfinite, escapes)``."""
    gap = np.uint64(nb * length)
    nn = np.uint64(n)
    inv_step = 1.0 / step
    bad = 0
    kept = 0
    for row in prange(na * p * nb):
        here, even, target = _parent_row(row, p, t, nb, length)
        _copy_row(par, here, out, even, length)
        if target < 0:
            continue
        src, dst, xs, k0, kind = _outer_places(target, p, t, nb, length, xsa, xsj, xsb, at)
        if kind == 2:
            b, e = _outer_encode_loop(par, src, gap, 2, x, xs, out, dst, planes, k0, nn, length,
                                      step, inv_step, bound, single)
        else:
            b, e = _outer_encode_loop(par, src, gap, kind, x, xs, out, dst, planes, k0, nn,
                                      length, step, inv_step, bound, single)
        bad += b
        kept += e
    return bad, kept


@njit(parallel=True, cache=True, nogil=True)
def outer_decode(par, out, planes, at, n, na, p, t, nb, length, step):
    """:func:`outer_encode`'s finer grid from the codes (the parents copied, the targets
    reconstructed); returns the damaged codes."""
    gap = np.uint64(nb * length)
    nn = np.uint64(n)
    bad = 0
    for row in prange(na * p * nb):
        here, even, target = _parent_row(row, p, t, nb, length)
        _copy_row(par, here, out, even, length)
        if target < 0:
            continue
        src, dst, _, k0, kind = _outer_places(target, p, t, nb, length, 0, 0, 0, at)
        if kind == 2:
            bad += _outer_decode_loop(par, src, gap, 2, out, dst, planes, k0, nn, length, step)
        else:
            bad += _outer_decode_loop(par, src, gap, kind, out, dst, planes, k0, nn, length,
                                      step)
    return bad


@njit(parallel=True, cache=True, nogil=True)
def inner_encode(par, x, out, store, planes, at, n, nrows, p, t, step, bound, single):
    """A pass along axis 2 encoded: ``par`` holds ``nrows`` rows of ``p`` coarser points,
    ``x`` the rows' ``t`` targets (odd points); the finer rows (``p + t``, interleaved)
    into ``out`` when ``store``, the codes into ``planes`` from ``at``. Returns
    ``(nonfinite, escapes)``."""
    nn = np.uint64(n)
    inv_step = 1.0 / step
    bad = 0
    kept = 0
    for row in prange(nrows):
        b, e = _inner_encode_row(par, np.uint64(row * p), p, t, x, np.uint64(row * t), out,
                                 np.uint64(row * (p + t)), store, planes,
                                 np.uint64(at + row * t), nn, step, inv_step, bound, single)
        bad += b
        kept += e
    return bad, kept


@njit(parallel=True, cache=True, nogil=True)
def inner_decode(par, out, planes, at, n, nrows, p, t, step):
    """:func:`inner_encode`'s finer rows from the codes into ``out`` (float64, or the data's
    dtype at the finest level); returns the damaged codes."""
    nn = np.uint64(n)
    bad = 0
    for row in prange(nrows):
        bad += _inner_decode_row(par, np.uint64(row * p), p, t, out, np.uint64(row * (p + t)),
                                 planes, np.uint64(at + row * t), nn, step)
    return bad


# --- the levels, coarse to fine ---------------------------------------------------------
#
# A call runs a range of levels: those whose passes are small on one thread (a parallel
# region costs more than they do), the others on the caller's threads; the pyramid is
# built first, finest level first, likewise in two calls.

#: :func:`_ceil` inside the kernels
_ceil_nb = njit(inline="always")(_ceil)


@njit(inline="always")
def _level(n0, n1, n2, h):
    """A level's finer grid (stride ``h``: ``q0 x q1 x q2``), coarser grid (``2h``: ``p0 x
    p1 x p2``) and targets along each axis (``t = q - p``)."""
    q0, q1, q2 = _ceil_nb(n0, h), _ceil_nb(n1, h), _ceil_nb(n2, h)
    p0, p1, p2 = _ceil_nb(n0, 2 * h), _ceil_nb(n1, 2 * h), _ceil_nb(n2, 2 * h)
    return q0, q1, q2, p0, p1, p2, q0 - p0, q1 - p1, q2 - p2


@njit(inline="always")
def _outer_axis(ax, q0, q1, p0, p1, p2, t0, t1):
    """The pass along axis ``ax`` (0 or 1) of a level as :func:`outer_encode` runs it:
    ``(na, p, t, nb)`` and the strides ``(xsa, xsj, xsb)`` of its targets in the
    pyramid's even points (``q0 x q1 x p2``); rows of ``p2``."""
    if ax == 0:
        return 1, p0, t0, p1, 0, q1 * p2, 2 * p2
    return q0, p1, t1, 1, q1 * p2, p2, 0


@njit(cache=True, nogil=True)
def pyramid(x, xs, geometry, lo, hi):
    """Levels ``lo`` to ``hi - 1`` of the pyramid into ``xs``: level ``l`` (``h = 2 **
    l``) the rows at multiples of ``h`` along axes 0 and 1 split into even and odd
    points; ``geometry[l]``: its source's ``(rows 0, rows 1, length, step)`` and where its
    even and odd points start and end in ``xs`` (level 0's source: ``x``, the others'
    the level before's even points)."""
    for lv in range(lo, hi):
        r0, r1, length, s, e, o, end = geometry[lv]
        if lv == 0:
            split_rows(x, r0, r1, length, s, xs[e:o], xs[o:end])
        else:
            split_rows(xs[geometry[lv - 1, 4]:geometry[lv - 1, 5]], r0, r1, length, s, xs[e:o],
                       xs[o:end])


@njit(inline="always")
def _side(grids, side, size):
    """The first ``size`` values of side ``side`` (0 or 1: the first or second half) of
    ``grids``."""
    at = side * (grids.size // 2)
    return grids[at:at + size]


@njit(inline="always")
def _other(grids, side, size):
    """The first ``size`` values of the side of ``grids`` that does not hold the current
    grid (side ``side``), and that side."""
    return _side(grids, 1 - side, size), 1 - side


@njit(cache=True, nogil=True)
def encode_range(xs, geometry, n0, n1, n2, steps, bound, single, planes, grids, side, size, at,
                 top, bottom):
    """Levels ``top`` down to ``bottom`` (``h = 2 ** level``) of the codes into ``planes``
    from ``at``, the coarser grid the first ``size`` values of side ``side`` of ``grids``
    (float64, compact; ``grids``: two halves of the points each, a pass's finer grid
    written into the side that does not hold its coarser one); returns ``(nonfinite,
    escapes, at, side, size)``, the last two the finer grid's (the finest level's: not
    built, size 0)."""
    n = n0 * n1 * n2
    bad = 0
    kept = 0
    grid = _side(grids, side, size)
    for lv in range(top, bottom - 1, -1):
        h = 1 << lv
        step = steps[lv]
        q0, q1, q2, p0, p1, p2, t0, t1, t2 = _level(n0, n1, n2, h)
        even = xs[geometry[lv, 4]:geometry[lv, 5]]  # (q0, q1, p2)
        for ax in range(2):
            na, p, t, nb, xsa, xsj, xsb = _outer_axis(ax, q0, q1, p0, p1, p2, t0, t1)
            if t:
                finer, side = _other(grids, side, na * (p + t) * nb * p2)
                b, e = outer_encode(grid, even, xsa, xsj, xsb, finer, planes, at, n, na, p, t,
                                    nb, p2, step, bound, single)
                bad += b
                kept += e
                at += na * t * nb * p2
                grid = finer
        if t2:
            odd = xs[geometry[lv, 5]:geometry[lv, 5] + q0 * q1 * t2]
            store = h > 1
            finer, side = _other(grids, side, q0 * q1 * q2 if store else 0)
            b, e = inner_encode(grid, odd, finer, store, planes, at, n, q0 * q1, p2, t2, step,
                                bound, single)
            bad += b
            kept += e
            at += q0 * q1 * t2
            grid = finer
    return bad, kept, at, side, grid.size


@njit(cache=True, nogil=True)
def origin_encode(x, planes, step, bound, single):
    """The origin's code (predicted as 0) into ``planes``: ``(reconstruction, nonfinite,
    escape)``."""
    code, r, e, f = _encode_one(np.float64(x[0]), 0.0, step, 1.0 / step, bound, single)
    _put(planes, 0, x.size, code)
    return r, f, e


@njit(inline="always")
def _apply(grid, places, values, lo, hi):
    for i in range(lo, hi):
        grid[places[i]] = values[i]


@njit(inline="always")
def _patches_of(patch_pass, k, done):
    """The end of the run of patches of pass ``done`` from ``k``."""
    while k < patch_pass.size and patch_pass[k] == done:
        k += 1
    return k


@njit(cache=True, nogil=True)
def decode_range(planes, n0, n1, n2, steps, patch_pass, patch_place, patch_value, out, grids,
                 side, size, at, k, done, top, bottom):
    """Levels ``top`` down to ``bottom`` of the reconstructions from the codes in
    ``planes`` from ``at``, the coarser grid the first ``size`` values of side ``side`` of
    ``grids`` (:func:`encode_range`); the escapes' values (``patch_value``) written into
    their pass's finer grid at ``patch_place`` after the pass numbered ``patch_pass``
    (ascending), from the ``k``-th, ``done`` passes done. The finest level's grid is
    ``out``. Returns ``(damaged, at, k, done, side, size)``, the last two the finer grid's
    (size 0 once it is ``out``)."""
    n = n0 * n1 * n2
    bad = 0
    grid = _side(grids, side, size)
    for lv in range(top, bottom - 1, -1):
        h = 1 << lv
        step = steps[lv]
        q0, q1, q2, p0, p1, p2, t0, t1, t2 = _level(n0, n1, n2, h)
        for ax in range(2):
            na, p, t, nb, _, _, _ = _outer_axis(ax, q0, q1, p0, p1, p2, t0, t1)
            if t:
                finer, side = _other(grids, side, na * (p + t) * nb * p2)
                bad += outer_decode(grid, finer, planes, at, n, na, p, t, nb, p2, step)
                at += na * t * nb * p2
                grid = finer
                lo, k = k, _patches_of(patch_pass, k, done)
                _apply(grid, patch_place, patch_value, lo, k)
                done += 1
        if t2:
            lo, k = k, _patches_of(patch_pass, k, done)
            if h == 1:  # the finest grid: the output
                bad += inner_decode(grid, out, planes, at, n, q0 * q1, p2, t2, step)
                _apply(out, patch_place, patch_value, lo, k)
                grid = _side(grids, side, 0)
            else:
                finer, side = _other(grids, side, q0 * q1 * q2)
                bad += inner_decode(grid, finer, planes, at, n, q0 * q1, p2, t2, step)
                grid = finer
                _apply(grid, patch_place, patch_value, lo, k)
            at += q0 * q1 * t2
            done += 1
    return bad, at, k, done, side, grid.size


@njit(cache=True, nogil=True)
def origin_decode(planes, n, step):
    """The origin's ``(reconstruction, damaged)``."""
    return _decode_one(planes, 0, n, 0.0, step)


@functools.lru_cache(maxsize=64)
def _levels(dims: tuple[int, int, int]) -> tuple[int, int]:
    """``(levels, the first level run in parallel)``: level ``l`` (``h = 2 ** l``) runs on
    one thread when it codes fewer than :data:`SERIAL_BELOW` points (coarser levels code
    fewer)."""
    levels = _top(dims).bit_length() - 1
    n0, n1, n2 = dims
    parallel = 0
    while parallel < levels:
        h = 1 << parallel
        if (_ceil(n0, h) * _ceil(n1, h) * _ceil(n2, h) - _ceil(n0, 2 * h) * _ceil(n1, 2 * h)
                * _ceil(n2, 2 * h)) < SERIAL_BELOW:
            break
        parallel += 1
    return levels, parallel


def level_steps(step: float, levels: int) -> np.ndarray:
    """The quantization step of each level ``l`` (``h = 2 ** l``) from the finest's
    ``step`` (twice the bound), ``levels + 1`` of them (the last, the origin's): ``step /
    f(l)`` with ``f(0) = 1``, ``f(l) = min(f(l - 1) * ALPHA, CAP)``, each rounded in
    float64 in that order (the decoder's steps are the encoder's bits)."""
    factor, steps = 1.0, np.empty(levels + 1)
    for lv in range(levels + 1):
        steps[lv] = step / factor
        factor = min(factor * ALPHA, CAP)
    return steps


@functools.lru_cache(maxsize=64)
def _steps(step: float, levels: int) -> np.ndarray:
    """:func:`level_steps`, once per step and level count (shared by the calls: read
    only)."""
    steps = level_steps(step, levels)
    steps.flags.writeable = False
    return steps


@functools.lru_cache(maxsize=64)
def _geometry(dims: tuple[int, int, int], levels: int) -> tuple[np.ndarray, int]:
    """The pyramid's levels (:func:`pyramid`'s ``geometry``) and the values it holds, once
    per shape (the array is shared by the calls: read only). A piece of a collective's
    field costs its Python as much as its kernels: made anew, these two took about 20 of a
    16K-value piece's 104 us to encode."""
    geometry = np.zeros((max(levels, 1), 7), np.int64)
    used = 0
    r0, r1, length, s = dims[0], dims[1], dims[2], 1
    for lv in range(levels):
        c0, c1 = _ceil(r0, s), _ceil(r1, s)
        size = c0 * c1 * length
        geometry[lv] = (r0, r1, length, s, used, used + c0 * c1 * _ceil(length, 2), used + size)
        used += size
        r0, r1, length, s = c0, c1, _ceil(length, 2), 2
    geometry.flags.writeable = False
    return geometry, used


def encode(x: np.ndarray, dims: tuple[int, int, int], step: float, bound: float,
           planes: np.ndarray) -> tuple[int, int]:
    """The codes of ``x`` (flat, C order over ``dims``) into ``planes`` (``2 n`` bytes);
    returns ``(nonfinite, escapes)``: find the escapes' positions with
    :func:`escape_positions`."""
    from .launch import readonly, run_kernel

    x = readonly(x)  # (one compiled signature whether the caller's buffer is writable or not)
    levels, parallel = _levels(dims)
    geometry, used = _geometry(dims, levels)
    xs = scratch.kept("interp_cpu.pyramid", max(used, 1), x.dtype)
    if parallel:
        run_kernel(pyramid, x, xs, geometry, 0, parallel)
    if levels > parallel:
        run_kernel(pyramid, x, xs, geometry, parallel, levels, serial=True)
    single = x.dtype == np.float32
    steps = _steps(float(step), levels)
    r, bad, escapes = run_kernel(origin_encode, x, planes, steps[levels], bound, single)
    grids = _grids(x.size)
    grids[0] = r
    side, size, at = 0, 1, 1
    for top, bottom, serial in ((levels - 1, parallel, True), (parallel - 1, 0, False)):
        if top >= bottom:
            b, e, at, side, size = run_kernel(encode_range, xs, geometry, *dims, steps, bound,
                                              single, planes, grids, side, size, at, top,
                                              bottom, serial=serial)
            bad += b
            escapes += e
    return bad, escapes


def _grids(n: int) -> np.ndarray:
    """Two sides of ``n`` float64 values each, which the levels' grids alternate in (this
    thread's, kept: :mod:`scratch`)."""
    return scratch.kept("interp_cpu.grids", 2 * max(n, 1), np.float64)


def decode(planes: np.ndarray, dims: tuple[int, int, int], step: float, where: np.ndarray,
           values: np.ndarray, out: np.ndarray) -> int:
    """``out`` (flat, the data's dtype) from the codes in ``planes`` and the escapes
    (``where``: flat positions, ascending and in range; ``values``: theirs, the data's
    dtype); returns the damaged codes (none in a stream :func:`encode` wrote)."""
    from .launch import run_kernel

    n = out.size
    levels, parallel = _levels(dims)
    pass_of, place = _patches(where, dims)
    order = np.argsort(pass_of, kind="stable")
    pass_of, place = pass_of[order], place[order]
    values = np.ascontiguousarray(values[order], dtype=out.dtype)
    steps = _steps(float(step), levels)
    r, bad = run_kernel(origin_decode, planes, n, steps[levels])
    grids = _grids(n)
    k = int(np.searchsorted(pass_of, 1))
    grids[0] = values[0] if k else r  # (the origin's escape)
    side, size, at, done = 0, 1, 1, 1
    for top, bottom, serial in ((levels - 1, parallel, True), (parallel - 1, 0, False)):
        if top >= bottom:
            b, at, k, done, side, size = run_kernel(decode_range, planes, *dims, steps, pass_of,
                                                    place, values, out, grids, side, size, at,
                                                    k, done, top, bottom, serial=serial)
            bad += b
    if size:  # (no pass along axis 2 at the finest level: the grid is not out yet)
        half = grids.size // 2  # (rounded to the dtype once, as the encoder checked:)
        out[...] = grids[side * half:side * half + size]
    return int(bad)


def _coords(where: np.ndarray, dims: tuple[int, int, int]) -> tuple[np.ndarray, ...]:
    """The coordinates of flat positions."""
    i0, rest = np.divmod(where, dims[1] * dims[2])
    i1, i2 = np.divmod(rest, dims[2])
    return i0, i1, i2


def _patches(where: np.ndarray, dims: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The escapes' ``(passes, places)``: each escape's pass (its number in
    :func:`passes`) and its place in that pass's finer grid (the grid at stride ``h``
    along the axes up to the pass's, ``2h`` after it). A point's pass: ``h`` the lowest
    power of two among its coordinates' bits, the axis the last whose coordinate is an
    odd multiple of it (the origin: pass 0)."""
    if where.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    i0, i1, i2 = _coords(where.astype(np.int64), dims)
    bits = i0 | i1 | i2
    h = bits & -bits
    axis = np.where(i2 & h, 2, np.where(i1 & h, 1, 0))
    level = np.zeros(where.size, np.int64)
    level[bits != 0] = np.log2(h[bits != 0]).astype(np.int64)
    number = np.zeros((_top(dims).bit_length(), 3), np.int64)
    for k, (ax, hv, _, _, _) in enumerate(passes(dims)[1:], 1):
        number[hv.bit_length() - 1, ax] = k
    pass_of = np.where(bits != 0, number[level, axis], 0)
    hs = np.maximum(h, 1)
    d1 = np.where(axis >= 1, hs, 2 * hs)
    d2 = np.where(axis >= 2, hs, 2 * hs)
    n1 = (dims[1] + d1 - 1) // d1
    n2 = (dims[2] + d2 - 1) // d2
    place = ((i0 // hs) * n1 + i1 // d1) * n2 + i2 // d2  # (the origin: 0)
    return pass_of, place


def _escape_codes(planes: np.ndarray, n: int) -> np.ndarray:
    """Where (ascending) the ``n`` codes in ``planes`` are :data:`ESCAPE` (both bytes
    0xFF). A few are found by ``argmax`` from the last (``flatnonzero`` takes about 0.15
    ns a code, most of a field's ``escape_positions``)."""
    flags = np.bitwise_and(planes[:n], planes[n:2 * n]) == 0xFF
    count = int(np.count_nonzero(flags))
    if count > _FEW_ESCAPES:
        return np.flatnonzero(flags)
    out = np.empty(count, np.int64)
    at = 0
    for k in range(count):
        at += int(np.argmax(flags[at:]))
        out[k] = at
        at += 1
    return out


def escape_positions(planes: np.ndarray, dims: tuple[int, int, int]) -> np.ndarray:
    """The flat positions (ascending, uint32) of the points :func:`encode` coded as
    escapes."""
    codes = _escape_codes(planes, dims[0] * dims[1] * dims[2])
    if codes.size == 0:
        return np.zeros(0, np.uint32)
    table = passes(dims)
    which = np.searchsorted(np.array([at for _, _, _, at, _ in table]), codes, "right") - 1
    out = []
    for number in np.unique(which):
        ax, h, s, at, _ = table[number]
        k = codes[which == number] - at
        if ax < 0:
            out.append(np.zeros(k.size, np.int64))
            continue
        steps = [h if d < ax else s for d in range(3)]
        shape = [_odd(dims[d], h) if d == ax else _ceil(dims[d], steps[d]) for d in range(3)]
        c = np.unravel_index(k, shape)
        i = [(2 * c[d] + 1) * h if d == ax else c[d] * steps[d] for d in range(3)]
        out.append((i[0] * dims[1] + i[1]) * dims[2] + i[2])
    return np.sort(np.concatenate(out)).astype(np.uint32)
