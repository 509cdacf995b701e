"""Allgather and Iallgather: the pipelined ring allgather of compressed blocks, or, on a
job whose nodes hold several ranks, the node-aware form (plain inside a node)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import collectives
from ..algorithms.common import Ctx
from ..buffers import is_in_place, parse
from ..pipeline import Call, Pipeline

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["call"]


def call(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, settings: dict[str, Any],
         nonblocking: bool = False) -> Call:
    """``comm.Allgather`` (or, ``nonblocking``, ``comm.Iallgather``)."""
    pol = pipeline.decision.policy(settings)
    p, r = pipeline.comm.Get_size(), pipeline.comm.Get_rank()
    rbuf = parse(recvbuf, "recvbuf", blocks=p)
    n = rbuf.count
    if is_in_place(sendbuf):
        sbuf = rbuf
        x = rbuf.array[r * n : (r + 1) * n] if rbuf.compressible else None
    else:
        sbuf = parse(sendbuf, "sendbuf")
        x = sbuf.data() if sbuf.compressible else None
        if sbuf.compressible and rbuf.compressible and sbuf.count != n:
            raise ValueError(f"Allgather: sendbuf has {sbuf.count} values, recvbuf {n} per rank")
    counts, displs = [n] * p, [i * n for i in range(p)]

    def body(ctx: Ctx, engine: Engine) -> str | None:
        assert x is not None
        if engine.local_ranks(pol, sbuf.on_device):
            collectives.allgather_nodes(ctx, x, rbuf.array, engine.layout().node_of,
                                        *engine.node_comms())
            return "allgather-hierarchical"
        collectives.allgatherv(ctx, x, rbuf.array, counts, displs)
        return None

    return Call("Iallgather" if nonblocking else "Allgather", "Allgather", pol, [sbuf, rbuf],
                n * rbuf.itemsize, MPI.Intracomm.Allgather, (sendbuf, recvbuf), local=x,
                settings=f"Allgather n={n}", body=body,
                nonblocking=MPI.Intracomm.Iallgather if nonblocking else None)
