"""Bcast and Ibcast: a pipelined chain of compressed pieces from the root where it is not the
slower (:mod:`mpicomp.algorithms.chain`), else the root's stream in one ``MPI_Bcast``
(node-aware on a job whose nodes hold several ranks: compressed between nodes, plain inside
each)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import collectives
from ..algorithms.common import Ctx
from ..buffers import parse
from ..pipeline import Call, Pipeline

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["call"]


def call(pipeline: Pipeline, buf: Any, root: int, settings: dict[str, Any],
         nonblocking: bool = False) -> Call:
    """``comm.Bcast`` (or, ``nonblocking``, ``comm.Ibcast``)."""
    pol = pipeline.decision.policy(settings)
    b = parse(buf, "buf")
    local = b.data() if (b.compressible and pipeline.comm.Get_rank() == root) else None

    def body(ctx: Ctx, engine: Engine) -> str | None:
        if engine.local_ranks(pol, b.on_device):
            collectives.bcast_nodes(ctx, b.data(), root, engine.layout().node_of,
                                    *engine.node_comms())
            return "bcast-hierarchical"
        collectives.bcast(ctx, b.data(), root)
        return None

    return Call("Ibcast" if nonblocking else "Bcast", "Bcast", pol, [b], b.nbytes,
                MPI.Intracomm.Bcast, (buf, root), local=local,
                settings=f"Bcast n={b.count} root={root}", body=body,
                nonblocking=MPI.Intracomm.Ibcast if nonblocking else None)
