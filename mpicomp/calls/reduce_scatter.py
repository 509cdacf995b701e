"""Reduce_scatter_block and Reduce_scatter: the ring reduce-scatter with recompression
(:func:`mpicomp.collectives.reduce_scatter`); SUM only."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import collectives
from ..algorithms.common import Ctx
from ..buffers import Buf, is_in_place, parse
from ..decision import op_name
from ..pipeline import Call

if TYPE_CHECKING:
    from ..comm import Comm
    from ..engine import Engine
    from ..policy import Resolved
    from ..stats import Recorder

__all__ = ["reduce_scatter", "reduce_scatter_block"]


def reduce_scatter_block(comm: Comm, sendbuf: Any, recvbuf: Any, op: MPI.Op,
                         settings: dict[str, Any]) -> None:
    """``comm.Reduce_scatter_block``."""
    pol = comm.resolved_policy(**settings)
    p = comm.Get_size()
    rbuf = parse(recvbuf, "recvbuf")
    if is_in_place(sendbuf):
        sbuf = parse(recvbuf, "recvbuf")
        rcount = sbuf.count // p if sbuf.compressible else 0
    else:
        sbuf = parse(sendbuf, "sendbuf")
        rcount = rbuf.count
    _run(comm, "Reduce_scatter_block", [rcount] * p, op, sbuf, rbuf, pol,
         MPI.Intracomm.Reduce_scatter_block, (sendbuf, recvbuf, op))


def reduce_scatter(comm: Comm, sendbuf: Any, recvbuf: Any, recvcounts: Sequence[int] | None,
                   op: MPI.Op, settings: dict[str, Any]) -> None:
    """``comm.Reduce_scatter``."""
    pol = comm.resolved_policy(**settings)
    p = comm.Get_size()
    rbuf = parse(recvbuf, "recvbuf")
    sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")
    if recvcounts is None:
        counts = comm.allgather(rbuf.count)  # what mpi4py does too
    else:
        counts = [int(c) for c in recvcounts]
        if len(counts) != p:
            raise ValueError(f"Reduce_scatter: recvcounts needs {p} entries, got {len(counts)}")
    _run(comm, "Reduce_scatter", counts, op, sbuf, rbuf, pol,
         MPI.Intracomm.Reduce_scatter, (sendbuf, recvbuf, recvcounts, op))


def _run(comm: Comm, name: str, counts: list[int], op: MPI.Op, sbuf: Buf, rbuf: Buf,
         pol: Resolved, plain: Callable[..., Any], args: tuple[Any, ...]) -> None:
    r = comm.Get_rank()

    def plan(call: Call, rec: Recorder) -> Call | str:
        if op_name(op) != "SUM":
            return f"op {op_name(op)}: {name} compresses only SUM"
        total = sum(counts)
        if sbuf.count < total:
            raise ValueError(f"{name}: sendbuf holds {sbuf.count} values, counts need {total}")
        if rbuf.count < counts[r]:
            raise ValueError(f"{name}: recvbuf holds {rbuf.count} values, needs {counts[r]}")
        x = sbuf.data(0, total)

        def body(ctx: Ctx, engine: Engine) -> str:
            collectives.reduce_scatter(ctx, x, rbuf.data(), counts)
            return "ring"

        return dataclasses.replace(call, local=x, body=body, settings=f"{name} counts={counts}")

    comm._pipeline.collective(Call(
        name, name, pol, [sbuf, rbuf], sbuf.nbytes, plain, args,
        op=op, summands=comm.Get_size(), guarded=False, plan=plan))
