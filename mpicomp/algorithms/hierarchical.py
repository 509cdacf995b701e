"""Node-aware (hierarchical) allreduce: plain inside a node, compressed between nodes.

Ranks that share a node reach each other through shared memory, which
moves bytes faster than a CPU codec encodes them; only the network between
nodes gains from compression. So, as MVAPICH and NCCL split intra- and
inter-node work:

1. each node sums its ranks' buffers on its leader (its lowest rank) with
   plain ``MPI_Reduce`` on the node's communicator;
2. the leaders, one per node, run the compressed pipelined ring allreduce
   (:mod:`.ring`) on the node sums;
3. each leader hands the result to its node with plain ``MPI_Bcast``.

Every rank ends with the leaders' bits, and the leaders agree bitwise (the
ring gives every participant the same bits). A value is quantized once per
node instead of once per rank (``P`` times for ``P`` nodes, against ``p``
in the flat ring), and ranks other than the leaders run no codec at all.
The other ranks of a node wait for the whole leader ring in the
broadcast: they wait in a nonblocking ``MPI_Ibcast`` and sleep between
tests (:func:`.common.poll`), since where ranks share cores a blocking MPI
wait would spin on the core the leader encodes on. The node
and leader communicators come from
:func:`mpicomp.topology.node_comms`, built once per engine.
"""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from . import ring
from .common import Ctx

__all__ = ["allreduce"]


def allreduce(ctx: Ctx, x: Any, out: Any, node: MPI.Intracomm,
              leaders: MPI.Intracomm) -> None:
    """``out`` = the sum of ``x`` over all ranks (host buffers)."""
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
        ring.allreduce(Ctx(leaders, ctx.codec, ctx.rec, ctx.memory), total, out)
    if several:
        ctx.wait(node.Ibcast(out, root=0), idle=not leader)
        if leader:
            ctx.rec.sent(out.nbytes)
