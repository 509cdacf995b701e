"""Reduce: the ring reduce-scatter with recompression, then the pieces gathered at the root
(:func:`mpicomp.algorithms.ring.reduce`); SUM only."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from ..algorithms import ring
from ..algorithms.common import Ctx
from ..buffers import is_in_place, parse, same_count
from ..decision import op_name
from ..pipeline import Call, Pipeline

if TYPE_CHECKING:
    from ..engine import Engine
    from ..stats import Recorder

__all__ = ["call"]


def call(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, op: MPI.Op, root: int,
         settings: dict[str, Any]) -> Call:
    """``comm.Reduce``."""
    pol = pipeline.decision.policy(settings)
    is_root = pipeline.comm.Get_rank() == root
    rbuf = parse(recvbuf, "recvbuf") if is_root else None
    if is_in_place(sendbuf):
        if not is_root or rbuf is None:
            raise ValueError("Reduce: MPI.IN_PLACE is only valid as the root's sendbuf")
        sbuf = rbuf
    else:
        sbuf = parse(sendbuf, "sendbuf")
    if rbuf is not None:
        same_count(sbuf, rbuf, "Reduce")
    bufs = [sbuf] + ([rbuf] if rbuf is not None else [])

    def plan(described: Call, rec: Recorder) -> Call | str:
        if op_name(op) != "SUM":
            return f"op {op_name(op)}: Reduce compresses only SUM"
        x = sbuf.data()
        out = rbuf.data() if rbuf is not None else None

        def body(ctx: Ctx, engine: Engine) -> str:
            ring.reduce(ctx, x, out, root)
            return "ring"

        return dataclasses.replace(described, local=x, body=body, encodes=described.summands,
                                   settings=f"Reduce n={x.size} root={root}")

    return Call(
        "Reduce", "Reduce", pol, bufs, sbuf.nbytes, MPI.Intracomm.Reduce,
        (sendbuf, recvbuf, op, root), op=op, summands=pipeline.comm.Get_size(), guarded=False,
        plan=plan)
