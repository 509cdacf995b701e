"""The performance model: how long a call takes plain, and compressed by each algorithm.

Every prediction is built from the numbers of a :class:`Calibration` (measured by
:mod:`mpicomp.calibration` on this job's communicator) and the codec's measured speed:

* ``F_m(b)``: plain MPI collective ``m`` on ``b`` bytes (interpolated between the measured sizes, a line beyond them);
* ``X(b)``: one ring step (every rank sends ``b`` bytes right, receives
  ``b`` from the left);
* ``E``, ``D``: encode and decode seconds per raw byte; ``A``: ``acc += x``
  seconds per byte; ``g``: the agreement allreduce, the scan of the
  input for its largest magnitude before it (``S n``; none for the ring
  allreduce and the data-movement collectives with a codec whose encoders
  screen host data, bitplane) and the fixed cost of a compressed call's
  Python work (measured on a tiny ring allreduce);
* ``n``: the call's raw bytes as ``comm.stats()`` counts them, ``rho``
  the codec's wire bytes per raw byte, ``p`` ranks.

===========================  ==================================================================
call                         compressed time
===========================  ==================================================================
Allreduce, ring              g + overlapped(W, C) (below), with
                             W = 2(p-1) k X(rho n / (p k)), C = E n + D n (2p-1)/p + A n (p-1)/p
                             + k (4p-2) K (K: one kernel call's fixed cost; k (4p-2) calls)
Allreduce, direct            g + overlapped(W, C) as the ring's, with W = 2 k X(rho n (p-1) /
                             (p k)): its two rounds each send p - 1 chunks
                             at once (priced as one exchange of their bytes), the reduce-scatter's
                             and the allgather's in k pieces; C the ring's (only when named:
                             the price assumes links as busy as the ring's, and the simulated
                             cluster measured it slower, docs/algorithms.md)
Allreduce, allgather         g + E n + F_Allgather(rho n) + D n p + A n (p-1)
Allreduce, hierarchical     by rails (every node holds L ranks): g + N + R - min(N, R)
                             (1 - 1/S), N = RS(n) + AG(n): node Reduce_scatter and Allgather
                             fits, R = overlapped(W', C'): the ring above over the P nodes on
                             n / L bytes (the rails' exchange fit, all L rails at once), in S
                             segments whose node collectives run behind the rings;
                             by leaders (nodes of different sizes): g + R(n) + overlapped(W',
                             C') + B(n): node Reduce and Bcast fits, the ring over the P node
                             leaders on n bytes (their exchange fit)
Allreduce, rec. doubling     g + L X(rho n) + L (E + 2D + A) n (+ 2 X(rho n) + 2(E+D) n
                             when p is not a power of two), L = floor(log2 p)
Allgather(v), Gather         g + E n + F_Allgather(rho n) + D n p
Allgather, node-aware        g + E n + B(m) + (P-1) (X'(m) + B(m)) + D n p, m = ppn rho n:
                             node B(roadcast) fit for the node's streams, the leaders'
                             exchange fit X' once per other node (P nodes)
Alltoall                     g + E n + F_Alltoall(rho n) + D n
Alltoall, node-aware         g + (E + D) n f + F_Alltoall(rho n), f = 1 - ppn/p: only the
                             blocks between nodes are coded; the plain ones between ranks of a
                             node move through shared memory while the network carries the
                             others, and a plain Alltoall's time on such a job is its
                             network's, so they are priced free
Bcast, chain                 g + overlapped((k + p - 2) X(rho n / k), (E + D) n + 3 k K): the
                             chain of the buffer's k pieces, where chained(p, k)
                             (mpicomp.algorithms.chain: few ranks or many pieces)
Bcast                        g + E n + F_Bcast(rho n) + D n (elsewhere)
Bcast, node-aware            g + E n + 2 B(rho n) + ceil(log2 P) X'(rho n) + D n
Scatter                      g + E n p + F_Bcast(rho n p) + D n
Reduce_scatter(_block)       g + overlapped(W, C), W = (p-1) k X(rho n / (p k)),
                             C = (E + D + A) n (p-1)/p + 3 k (p-1) K
Reduce                       reduce-scatter as above + E n / p + F_Allgather(rho n / p) + D n
Send (point to point)        E n + X(rho n) + D n
===========================  ==================================================================

A variable codec's ``rho`` is the stream ratio its kind of call learned
(:mod:`mpicomp.ratios`; its upper bound until then), and the algorithms
that exchange stream sizes first add ``F_Allgather(8)`` (Allgather(v),
Gather, Reduce, the allgather allreduce) or ``F_Bcast(8)`` (Bcast but its
chain, Scatter): :func:`size_exchange`.

Plain times are the fitted ``F_m(n)`` of the matching MPI collective
(Allgatherv and Gather use Allgather's, Scatter Bcast's of ``n p`` bytes,
Reduce Allreduce's, Reduce_scatter Reduce_scatter_block's, Send ``X(n)``).
The ring cuts each of its ``p`` chunks into ``k`` pieces
(:func:`mpicomp.algorithms.common.pieces`) and overlaps the codec work on
one piece with the transfer of others: with cores to spare its time is the
larger of its wire time ``W`` and its codec time ``C``, plus the time one
piece takes through both (``(W + C) / k``) to fill and drain the pipeline;
where ranks share cores less hides, or the two even slow each other down.
The calibration measures the fraction ``f`` that hides (``overlap``, -1 to
1), and the ring takes
``W + C - f (min(W, C) - (W + C) / k)``; so does the Bcast's chain. The other algorithms
run their codec before and after their transfers: the model adds the times.

The automatic policy compresses a call only when the predicted compressed
time beats plain by the factor :data:`GAIN`, and runs the allreduce
algorithm with the smallest prediction. All inputs are the same on every
rank, so is every decision.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from .algorithms.chain import chained
from .algorithms.common import MAX_PIECES, pieces_of, screens_in_encoder
from .algorithms.hierarchical import segments
from .calibration_data import FORMAT_VERSION, Calibration, Fit

__all__ = ["ALLREDUCE_ALGORITHMS", "FORMAT_VERSION", "GAIN", "Calibration", "Fit", "Prediction",
           "plain_time", "predict", "ring_terms", "size_exchange"]

#: compress only when plain is predicted to take at least this many times longer
GAIN = 1.2

#: the allreduce algorithms the model chooses from (homomorphic and direct only when asked
#: for; hierarchical too where nodes hold several ranks and the calibration measured them)
ALLREDUCE_ALGORITHMS = ("ring", "allgather", "recursive_doubling")

#: the collectives that run node-aware where a job spans nodes of several ranks (or with
#: the algorithm "hierarchical"); their prediction is that of the way that runs
_NODE_AWARE = ("Alltoall", "Allgather", "Bcast")

#: the fitted plain collective each method's plain time comes from
_PLAIN_OF = {
    "Allreduce": "Allreduce", "Reduce": "Allreduce",
    "Allgather": "Allgather", "Allgatherv": "Allgather", "Gather": "Allgather",
    "Alltoall": "Alltoall",
    "Bcast": "Bcast", "Scatter": "Bcast",
    "Reduce_scatter_block": "Reduce_scatter_block", "Reduce_scatter": "Reduce_scatter_block",
}

METHODS = (*_PLAIN_OF, "Send")


# -- measuring ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Prediction:
    """What the model expects of one call (seconds)."""

    method: str
    nbytes: int
    plain_s: float
    compressed_s: float
    algorithm: str
    candidates: dict[str, float]
    compress: bool

    @property
    def speedup(self) -> float:
        """Predicted plain time / compressed time."""
        return self.plain_s / self.compressed_s if self.compressed_s > 0 else math.inf

    def describe(self) -> str:
        others = ", ".join(f"{a} {t * 1e3:.3g} ms" for a, t in self.candidates.items()
                           if a != self.algorithm)
        return (f"model: plain {self.plain_s * 1e3:.3g} ms, compressed "
                f"{self.compressed_s * 1e3:.3g} ms ({self.algorithm}"
                f"{'; ' + others if others else ''}) -> "
                f"{'compress' if self.compress else 'plain'}")


def plain_time(cal: Calibration, method: str, nbytes: float) -> float:
    """Predicted seconds of plain MPI ``method`` on ``nbytes`` raw bytes."""
    if method == "Send":
        return cal.exchange.time(nbytes)
    if method not in _PLAIN_OF:
        raise ValueError(f"the model knows {list(METHODS)}, not {method!r}")
    if method == "Scatter":
        nbytes *= cal.layout.size
    return cal.plain[_PLAIN_OF[method]].time(nbytes)


def _overlapped(wire: float, codec: float, k: int, overlap: float) -> float:
    """A pipeline of ``k`` pieces whose transfers (``wire`` s in all) overlap its codec work
    to the measured extent ``overlap`` (1: fully, 0: not at all, below 0: the two slow
    each other down)."""
    hidden = overlap * max(min(wire, codec) - (wire + codec) / k, 0.0)
    return wire + codec - hidden


def _ring_steps(cal: Calibration, n: float, rho: float, steps: int, k: int,
                p: int | None = None, link: Any = None) -> float:
    """Wire seconds of ``steps`` ring steps of a chunk of ``n / p`` raw bytes in ``k`` pieces
    (``p`` ranks, default all; ``link``: the exchange fit, default the ranks' ring)."""
    p = p or cal.layout.size
    return steps * k * (link or cal.exchange).time(rho * n / (p * k))


def _agree(cal: Calibration, n: float, scan: bool = True) -> float:
    """``g``: the scan of the input for its largest magnitude, the agreement, and the
    fixed cost of a compressed call's own work (``scan=False``: a speculative call,
    whose encoders screen the data, has no scan)."""
    return cal.agree_s + (cal.scan_s_per_byte * n if scan else 0.0) + cal.fixed_s


#: the node fits of the allreduce by rails (uniform nodes; a calibration from before it
#: lacks them and is priced by leaders, as it then ran)
_RAIL_FITS = ("Reduce_scatter", "Allgather", "rail_exchange")


def _by_rails_priced(cal: Calibration) -> bool:
    """Whether the node-aware allreduce is priced by rails (else by leaders)."""
    return cal.node is not None and cal.layout.uniform and all(f in cal.node for f in _RAIL_FITS)


def _by_rails(cal: Calibration, n: float, rho: float, e: float, d: float, k: int) -> float:
    """The node-aware allreduce on ``P`` nodes of ``L`` ranks: node Reduce_scatter, the
    ``L`` rails' rings at once, each over the ``P`` nodes on ``n / L`` bytes, node
    Allgather."""
    assert cal.node is not None
    big, m = cal.layout.nodes, n / cal.layout.ppn
    codec = (e * m + d * m * (2 * big - 1) / big + cal.add_s_per_byte * m * (big - 1) / big
             + k * (4 * big - 2) * cal.call_s)
    wire = _ring_steps(cal, m, rho, 2 * (big - 1), k, big, cal.node["rail_exchange"])
    rings = _overlapped(wire, codec, k, cal.overlap)
    node = cal.node["Reduce_scatter"].time(n) + cal.node["Allgather"].time(n)
    # in S segments, all but one segment's node collectives run behind the rings: they are
    # shared-memory copies that MPI progresses inside the rings' waits (measured on 2 x 2
    # simulated hosts, docs/performance/model.md: they hid even where the codec overlap did not)
    hidden = min(node, rings) * (1 - 1 / segments(int(n)))
    return _agree(cal, n) + node + rings - hidden


def _hierarchical(cal: Calibration, n: float, rho: float, e: float, d: float, k: int) -> float:
    """The node-aware allreduce: by rails on uniform nodes, else node Reduce, the ring over
    the ``P`` node leaders, node Bcast."""
    assert cal.node is not None
    if _by_rails_priced(cal):
        return _by_rails(cal, n, rho, e, d, k)
    big = cal.layout.nodes
    codec = (e * n + d * n * (2 * big - 1) / big + cal.add_s_per_byte * n * (big - 1) / big
             + k * (4 * big - 2) * cal.call_s)
    wire = _ring_steps(cal, n, rho, 2 * (big - 1), k, big, cal.node["leader_exchange"])
    return (_agree(cal, n) + cal.node["Reduce"].time(n) + _overlapped(wire, codec, k, cal.overlap)
            + cal.node["Bcast"].time(n))


def ring_terms(cal: Calibration, n: float, rho: float, e: float, d: float, k: int,
               speculative: bool = False) -> dict[str, float]:
    """The terms of the flat ring allreduce's prediction (seconds): ``g``, the wire ``W``,
    the codec ``C``, the part of them the pipeline ``hidden``s, and the prediction
    ``ring`` = ``g + W + C - hidden`` (``model_check --calibration`` prints them)."""
    p, a = cal.layout.size, cal.add_s_per_byte
    g = _agree(cal, n, scan=not speculative)
    wire = _ring_steps(cal, n, rho, 2 * (p - 1), k)
    codec = e * n + d * n * (2 * p - 1) / p + a * n * (p - 1) / p + k * (4 * p - 2) * cal.call_s
    overlapped = _overlapped(wire, codec, k, cal.overlap)
    return {"g": g, "W": wire, "C": codec, "hidden": wire + codec - overlapped,
            "ring": g + overlapped}


def _allreduce_times(cal: Calibration, n: float, rho: float, e: float, d: float,
                     p: int, k: int, speculative: bool = False) -> dict[str, float]:
    x, a, g = cal.exchange, cal.add_s_per_byte, _agree(cal, n)
    levels = p.bit_length() - 1
    folded = p != 1 << levels
    terms = ring_terms(cal, n, rho, e, d, k, speculative)
    times = {
        "ring": terms["ring"],
        "allgather": g + e * n + cal.plain["Allgather"].time(rho * n) + d * n * p
                     + a * n * (p - 1),
        "recursive_doubling": g + levels * (x.time(rho * n) + (e + 2 * d + a) * n)
                              + (2 * (x.time(rho * n) + (e + d) * n) if folded else 0.0),
        # the packed words are added by a Python MPI op: a rough estimate, never chosen alone
        "homomorphic": g + (e + d) * n + 2 * cal.plain["Allreduce"].time(rho * n),
    }
    both = rho * n * (p - 1) / p  # what each round sends, all its messages together
    wire = 2 * k * x.time(both / k)
    times["direct"] = terms["g"] + _overlapped(wire, terms["C"], k, cal.overlap)
    return times


def compressed_times(cal: Calibration, method: str, n: float, rho: float, e: float,
                     d: float, k: int = 1, speculative: bool = False) -> dict[str, float]:
    """Predicted seconds of each way to run ``method`` compressed (algorithm -> seconds);
    ``k``: the pieces per ring chunk (a Bcast's: of its whole buffer); ``speculative``:
    the codec screens the data in its encoders (bitplane, host buffers), so the ring
    allreduce and the data-movement collectives have no scan."""
    p = cal.layout.size
    x, a, g = cal.exchange, cal.add_s_per_byte, _agree(cal, n)
    rs = g + _overlapped(_ring_steps(cal, n, rho, p - 1, k),
                        (e + d + a) * n * (p - 1) / p + 3 * k * (p - 1) * cal.call_s, k,
                        cal.overlap)
    if method == "Allreduce":
        times = _allreduce_times(cal, n, rho, e, d, p, k, speculative)
        if cal.node is not None:
            # the leaders' chunks are p / P times larger than the flat ring's, the rails'
            # (n / L over P ranks) the same size
            k_nodes = k if _by_rails_priced(cal) else max(1, round(k * p / cal.layout.nodes))
            times["hierarchical"] = _hierarchical(cal, n, rho, e, d,
                                                  min(k_nodes, MAX_PIECES))
        return times
    lay = cal.layout
    nodes_aware = lay.spans_nodes and lay.ppn > 1 and cal.node is not None
    g = _agree(cal, n, scan=not speculative)  # the data-movement collectives below
    if method in ("Allgather", "Allgatherv", "Gather"):
        times = {method.lower(): g + e * n + cal.plain["Allgather"].time(rho * n) + d * n * p}
        if method == "Allgather" and nodes_aware:
            assert cal.node is not None
            big, pack = lay.nodes, rho * n * lay.ppn
            times["allgather-hierarchical"] = (
                g + e * n + cal.node["Bcast"].time(pack)
                + (big - 1) * (cal.node["leader_exchange"].time(pack) + cal.node["Bcast"].time(pack))
                + d * n * p)
        return times
    if method == "Alltoall":
        times = {"alltoall": g + e * n + cal.plain["Alltoall"].time(rho * n) + d * n}
        if lay.spans_nodes and lay.ppn > 1:
            f = 1.0 - lay.ppn / p  # the share of blocks between nodes (the fullest node)
            times["alltoall-hierarchical"] = (g + (e + d) * n * f
                                              + cal.plain["Alltoall"].time(rho * n))
        return times
    if method == "Bcast":  # (k: the pieces of the whole buffer)
        if chained(p, k):  # the root's encode and a decode overlap the chain's transfers
            times = {"bcast": g + _overlapped((k + p - 2) * x.time(rho * n / k),
                                             (e + d) * n + 3 * k * cal.call_s, k,
                                             cal.overlap)}
        else:
            times = {"bcast": g + e * n + cal.plain["Bcast"].time(rho * n) + d * n}
        if nodes_aware:
            assert cal.node is not None
            hops = math.ceil(math.log2(lay.nodes))
            times["bcast-hierarchical"] = (
                g + e * n + 2 * cal.node["Bcast"].time(rho * n)
                + hops * cal.node["leader_exchange"].time(rho * n) + d * n)
        return times
    if method == "Scatter":
        return {"scatter": g + e * n * p + cal.plain["Bcast"].time(rho * n * p) + d * n}
    if method in ("Reduce_scatter_block", "Reduce_scatter"):
        return {"ring": rs}
    if method == "Reduce":
        return {"ring": rs + e * n / p + cal.plain["Allgather"].time(rho * n / p) + d * n}
    if method == "Send":
        return {"frame": e * n + x.time(rho * n) + d * n}
    raise ValueError(f"the model knows {list(METHODS)}, not {method!r}")


#: a variable codec's size exchange (one int64 a rank) by algorithm: the plain collective
#: that carries it; the others receive into the upper bound and read the count
_SIZE_EXCHANGE = {
    "allgather": "Allgather", "allgatherv": "Allgather", "gather": "Allgather",
    "allgather-hierarchical": "Allgather", "bcast": "Bcast", "bcast-hierarchical": "Bcast",
    "scatter": "Bcast",
}


def size_exchange(cal: Calibration, method: str, algorithm: str, k: int) -> float:
    """The time of a variable codec's size exchange in ``algorithm`` of ``method``: one
    int64 a rank (the Reduce's ring, like Allgather's, before the root's gather; none in
    the Bcast's chain). ``k``: the pieces of the call's buffer
    (:func:`~.algorithms.common.pieces_of`), which decide whether a Bcast goes down the
    chain; required, so that no caller prices a chained Bcast's exchange by mistake."""
    if method == "Reduce":
        return cal.plain["Allgather"].time(8.0)
    if algorithm == "bcast" and chained(cal.layout.size, k):
        return 0.0
    plain = _SIZE_EXCHANGE.get(algorithm)
    return cal.plain[plain].time(8.0) if plain is not None else 0.0


def predict(cal: Calibration, method: str, nbytes: int, codec: Any, dtype: Any,
            speed: tuple[float, float], algorithm: str = "auto",
            gain: float = GAIN, on_device: bool = False,
            rho: float | None = None, call_s: float | None = None) -> Prediction:
    """The prediction for one call (``algorithm``: what the policy says, or ``"auto"``).

    ``speed`` is the codec's (encode, decode) seconds per raw byte
    (:func:`mpicomp.calibration.codec_speed`); a codec with guarded encodes screens
    host buffers speculatively (no scan first). ``rho``: a variable codec's stream
    ratio (:mod:`mpicomp.ratios`; None: its upper bound); its calls also pay their
    size exchange (:func:`size_exchange`). ``call_s``: what one codec call costs beyond
    its bytes where it was measured for this codec (device memory:
    :func:`mpicomp.calibration.codec_call_s`), instead of the host's ``cal.call_s``.
    """
    if call_s is not None:
        cal = dataclasses.replace(cal, call_s=call_s)
    dt = np.dtype(dtype)
    count = max(int(nbytes) // dt.itemsize, 1)
    if rho is None:
        rho = codec.encoded_nbytes(count, dt) / (count * dt.itemsize)
    e, d = speed
    plain = plain_time(cal, method, nbytes)
    k = pieces_of(codec, count if method == "Bcast" else count // cal.layout.size, dt,
                  on_device)
    speculative = screens_in_encoder(codec, on_device)
    times = compressed_times(cal, method, float(nbytes), rho, e, d, k, speculative)
    if codec.variable:
        times = {a: t + size_exchange(cal, method, a, k) for a, t in times.items()}
    if method == "Allreduce":
        choices = [a for a in (*ALLREDUCE_ALGORITHMS, "hierarchical") if a in times]
        if algorithm == "auto":
            chosen = min(choices, key=lambda a: times[a])
        elif algorithm in times:
            chosen = algorithm
        else:  # hierarchical on one node, or one rank a node: it runs the ring
            chosen = "ring"
        times = {a: times[a] for a in (*choices, chosen)}
    elif method in _NODE_AWARE and algorithm in ("auto", "hierarchical"):
        flat = method.lower()
        chosen = flat + "-hierarchical" if flat + "-hierarchical" in times else flat
    else:
        chosen = next(iter(times))
    compressed = times[chosen]
    return Prediction(method, int(nbytes), plain, compressed, chosen, times,
                      plain > gain * compressed)
