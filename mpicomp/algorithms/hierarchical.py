"""Node-aware (hierarchical) allreduce: plain inside a node, compressed between nodes.

Ranks that share a node reach each other through shared memory, which
moves bytes faster than a CPU codec encodes them; only the network between
nodes gains from compression. So, as MVAPICH and NCCL split intra- and
inter-node work, and where every node holds the same number ``L`` of ranks
(two levels, as NCCL's rings of the same local rank on every node):

1. each node sums its ranks' buffers with plain ``MPI_Reduce_scatter`` on
   the node's communicator: rank ``j`` of a node holds the node's sum of
   part ``j`` of the buffer (``L`` parts);
2. the ranks of place ``j`` on every node (rail ``j``, one rank per node)
   run the compressed ring allreduce in pieces (:mod:`.ring`) on part ``j``;
   the ``L`` rails run at once, each on ``1/L`` of the buffer;
3. each node gathers the parts with plain ``MPI_Allgatherv`` in place.

Large buffers run in segments (:func:`segments`): the node reduce-scatter of
segment ``i + 1`` and the node allgather of segment ``i`` (nonblocking,
progressed by the rings' own MPI calls) move through shared memory while
the rails' rings of segment ``i`` use the network.

Every rank of a rail ends with the same bits of its part (the ring gives
every participant the same bits), and the node allgather copies them
exactly, so every rank ends with the same bits. A value is quantized once
per node (``P`` times for ``P`` nodes, against ``p`` in the flat ring).
Against the flat ring over all ``p = P L`` ranks a node sends
``2 (P - 1) / P`` compressed buffers to the network instead of
``2 (p - 1) / p`` (1.5x fewer bytes on 2 nodes of 2 ranks), and each rank
codes ``1/L`` of the buffer's ring instead of all of it.

Where nodes hold different numbers of ranks the rails would not reach every
node; then the node's leader (its lowest rank) does it alone:

1. each node sums its ranks' buffers on its leader with plain ``MPI_Reduce``;
2. the leaders, one per node, run the compressed ring on the node sums;
3. each leader hands the result to its node with plain ``MPI_Bcast``.

The other ranks of a node wait for the whole leader ring in the
broadcast: they wait in a nonblocking ``MPI_Ibcast`` and sleep between
tests (:func:`.common.poll`), since where ranks share cores a blocking MPI
wait would spin on the core the leader encodes on. The node, leader and
rail communicators come from :mod:`mpicomp.topology`, built once per private communicator.
"""
from __future__ import annotations

from itertools import accumulate
from typing import Any

from mpi4py import MPI

from . import ring
from .common import Ctx, split

__all__ = ["MAX_SEGMENTS", "SEGMENT_BYTES", "allreduce", "segments"]

#: the allreduce by rails runs in segments of about this many bytes (at most
#: MAX_SEGMENTS), so that one segment's node reduce-scatter and allgather move through
#: shared memory while another's rails run their rings over the network
SEGMENT_BYTES = 4 << 20
MAX_SEGMENTS = 4


def allreduce(ctx: Ctx, x: Any, out: Any, node: MPI.Intracomm,
              leaders: MPI.Intracomm, rail: MPI.Intracomm | None = None) -> None:
    """``out`` = the sum of ``x`` over all ranks (host buffers, one dimension); by rails
    when ``rail`` is given (every node holds the same number of ranks), else by leaders."""
    if rail is not None and node.Get_size() > 1:
        _by_rails(ctx, x, out, node, rail)
    else:
        _by_leaders(ctx, x, out, node, leaders)


def segments(nbytes: int) -> int:
    """How many segments the allreduce by rails cuts a buffer of ``nbytes`` into: one per
    :data:`SEGMENT_BYTES`, from 1 to :data:`MAX_SEGMENTS`."""
    return max(1, min(MAX_SEGMENTS, nbytes // SEGMENT_BYTES))


def _by_rails(ctx: Ctx, x: Any, out: Any, node: MPI.Intracomm, rail: MPI.Intracomm) -> None:
    size, me = node.Get_size(), node.Get_rank()
    rail_ctx = ctx.on(rail)
    seg_counts, seg_displs = split(x.size, segments(x.nbytes))
    cuts = [split(c, size) for c in seg_counts]  # each segment's parts: (counts, displs)
    parts = ctx.values("node-part", sum(counts[me] for counts, _ in cuts), x.dtype)
    starts = [0, *accumulate(counts[me] for counts, _ in cuts[:-1])]  # in `parts`

    def reduce_scatter(i: int) -> MPI.Request:
        counts, _ = cuts[i]
        with ctx.rec.mpi():
            req = node.Ireduce_scatter(x[seg_displs[i] : seg_displs[i] + seg_counts[i]],
                                       parts[starts[i] : starts[i] + counts[me]],
                                       recvcounts=counts, op=MPI.SUM)
        ctx.rec.sent((seg_counts[i] - counts[me]) * x.itemsize)
        return req

    gathers = []
    pending = reduce_scatter(0)
    for i, (counts, displs) in enumerate(cuts):
        ctx.wait(pending)
        if i + 1 < len(cuts):  # the next segment's node sum moves while this one's rails run
            pending = reduce_scatter(i + 1)
        seg = out[seg_displs[i] : seg_displs[i] + seg_counts[i]]
        if counts[me]:  # (the same on every rank of the rail: every node cuts alike)
            ring.allreduce(rail_ctx, parts[starts[i] : starts[i] + counts[me]],
                           seg[displs[me] : displs[me] + counts[me]])
        with ctx.rec.mpi():
            gathers.append(node.Iallgatherv(MPI.IN_PLACE, [seg, (counts, displs)]))
        ctx.rec.sent(counts[me] * x.itemsize * (size - 1))
    ctx.waitall(gathers)


def _by_leaders(ctx: Ctx, x: Any, out: Any, node: MPI.Intracomm,
                leaders: MPI.Intracomm) -> None:
    leader = node.Get_rank() == 0
    several = node.Get_size() > 1
    total = x
    if several:
        total = ctx.values("node-sum", x.size, x.dtype) if leader else None
        with ctx.rec.mpi():
            node.Reduce(x, total, op=MPI.SUM, root=0)
        if not leader:
            ctx.rec.sent(x.nbytes)
    if leader:
        ring.allreduce(ctx.on(leaders), total, out)
    if several:
        ctx.wait(node.Ibcast(out, root=0), idle=not leader)
        if leader:
            ctx.rec.sent(out.nbytes)
