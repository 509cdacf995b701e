"""From a whole collective's ``tolerance`` to the bound of each of its encodes.

A policy's ``tolerance`` (:mod:`mpicomp.policy`) is the largest error the
result of a whole call may carry on any rank: absolute, or relative to the
largest magnitude of the call's input over all ranks (the agreement step's
number). A call's values pass through several encodes on their way to a
result, each adding at most its own bound; :func:`encodes` counts them for
each algorithm, and :func:`codec_for` divides the tolerance among them:

* data movement (Allgather(v), Alltoall, Bcast, Gather, Scatter, point to
  point): one encode per value;
* the ring (Allreduce, Reduce): ``p - 1`` hops of partial sums and the final
  chunk, ``p`` encodes; Reduce_scatter: ``p - 1`` (the ring's hops, or the direct
  algorithm's other ranks' inputs, each encoded once);
* the allgather allreduce: each of the ``p`` inputs once;
* recursive doubling: the errors of every encode below a partial sum reach it,
  ``2 (q - 1)`` in the ``log2 q`` rounds (``q`` the largest power of two up to
  ``p``), plus the folds of the ranks beyond ``q``: at most ``2p``;
* hierarchical: plain sums inside each node and a ring between nodes, at
  most ``p`` encodes.

The result is then within the tolerance of the sum computed in the dtype
without compression; the dtype's own rounding of the additions (which plain
MPI has as well, ``p * eps * sum of max|x|`` at most) comes on top.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .codecs import Codec, get_codec
from .policy import Resolved

__all__ = ["codec_for", "encodes"]

#: a bound for a call whose tolerance works out to zero (relative, all-zero input):
#: zeros cost a code byte per block, any other value goes raw (exact)
_SMALLEST = float(np.finfo(np.float64).tiny)


def encodes(algorithm: str, p: int) -> int:
    """How many encodes' errors reach one value of an allreduce result on ``p`` ranks."""
    if p <= 1:
        return 1
    if algorithm in ("ring", "direct", "allgather", "hierarchical"):
        return p
    if algorithm == "recursive_doubling":
        return 2 * p
    raise ValueError(f"tolerance: no encode count for algorithm {algorithm!r}")


def codec_for(pol: Resolved, max_abs: float, count: int) -> tuple[Codec, float, str]:
    """The errbound codec of one call whose values pass ``count`` encodes (``max_abs``: the
    largest input magnitude over all ranks), the call's absolute bound, and the debug
    line's description of both."""
    assert pol.tolerance is not None
    value, relative = pol.tolerance
    total = value * max_abs if relative else value
    bound = max(total / max(count, 1), _SMALLEST)
    return _errbound(bound, getattr(pol.codec, "shape", None)), total, (
        f"errbound, error <= {total:.3g}: {count} encode{'s' if count != 1 else ''} "
        f"of <= {bound:.3g}")


@functools.lru_cache(maxsize=64)
def _errbound(bound: float, shape: Any) -> Codec:
    """errbound at ``bound``, predicting across the policy codec's ``shape`` (None, a
    field's dimensions, or ``"auto"``)."""
    return get_codec({"id": "errbound", "tolerance": bound, "shape": shape})
