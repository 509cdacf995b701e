"""Alltoall and Ialltoall: pipelined pairwise exchanges of compressed blocks (blocks of the
ranks on this rank's node plain, on a job whose nodes hold several ranks)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import collectives
from ..algorithms.common import Ctx
from ..buffers import is_in_place, parse, same_count
from ..pipeline import Call, Pipeline

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["call"]


def call(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, settings: dict[str, Any],
         nonblocking: bool = False) -> Call:
    """``comm.Alltoall`` (or, ``nonblocking``, ``comm.Ialltoall``)."""
    pol = pipeline.decision.policy(settings)
    p = pipeline.comm.Get_size()
    rbuf = parse(recvbuf, "recvbuf", blocks=p)
    sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf", blocks=p)
    same_count(sbuf, rbuf, "Alltoall")
    n = rbuf.count
    x = sbuf.data(0, n * p) if sbuf.compressible else None

    def body(ctx: Ctx, engine: Engine) -> str | None:
        assert x is not None
        local = engine.local_ranks(pol, sbuf.on_device)
        collectives.alltoall(ctx, x, rbuf.array, n, local)
        return "alltoall-hierarchical" if local else None

    return Call("Ialltoall" if nonblocking else "Alltoall", "Alltoall", pol, [sbuf, rbuf],
                n * p * sbuf.itemsize, MPI.Intracomm.Alltoall, (sendbuf, recvbuf), local=x,
                settings=f"Alltoall n={n}", body=body,
                nonblocking=MPI.Intracomm.Ialltoall if nonblocking else None)
