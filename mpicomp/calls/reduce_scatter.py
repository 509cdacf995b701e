"""Reduce_scatter_block, Ireduce_scatter_block and Reduce_scatter: the ring reduce-scatter
with recompression (:func:`mpicomp.collectives.reduce_scatter`), or, with
``algorithm="allgather"`` or ``"direct"`` (every input quantized once), the
direct one (:func:`mpicomp.collectives.reduce_scatter_direct`: each block encoded once and
sent straight to its owner); SUM only."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import Buf, is_in_place, parse
from ..pipeline import Call, Pipeline

if TYPE_CHECKING:
    from ..policy import Resolved

__all__ = ["describe", "describe_block"]


def describe_block(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, op: MPI.Op,
                   settings: dict[str, Any], nonblocking: bool = False) -> Call:
    """``comm.Reduce_scatter_block`` (or, ``nonblocking``, ``comm.Ireduce_scatter_block``)."""
    pol = pipeline.settings.for_call(settings)
    p = pipeline.comm.Get_size()
    rbuf = parse(recvbuf, "recvbuf")
    if is_in_place(sendbuf):
        sbuf = parse(recvbuf, "recvbuf")
        rcount = sbuf.count // p if sbuf.compressible else 0
    else:
        # (mpi4py reads an explicit count in the send spec as one block's, as MPI's
        # recvcount: the buffer holds p of them)
        sbuf = parse(sendbuf, "sendbuf", blocks=p)
        sbuf = dataclasses.replace(sbuf, count=sbuf.count * p)
        rcount = rbuf.count
    described = _described(pipeline, "Reduce_scatter_block", [rcount] * p, op, sbuf, rbuf, pol,
                           MPI.Intracomm.Reduce_scatter_block, (sendbuf, recvbuf, op))
    if not nonblocking:
        return described
    return dataclasses.replace(described, name="Ireduce_scatter_block",
                               nonblocking=MPI.Intracomm.Ireduce_scatter_block)


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, recvcounts: Sequence[int] | None,
             op: MPI.Op, settings: dict[str, Any]) -> Call:
    """``comm.Reduce_scatter``."""
    pol = pipeline.settings.for_call(settings)
    p = pipeline.comm.Get_size()
    rbuf = parse(recvbuf, "recvbuf")
    sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")
    if recvcounts is None:
        counts = pipeline.comm.allgather(rbuf.count)  # what mpi4py does too
    else:
        counts = [int(c) for c in recvcounts]
        if len(counts) != p:
            raise ValueError(f"Reduce_scatter: recvcounts needs {p} entries, got {len(counts)}")
    return _described(pipeline, "Reduce_scatter", counts, op, sbuf, rbuf, pol,
         MPI.Intracomm.Reduce_scatter, (sendbuf, recvbuf, recvcounts, op))


def _described(pipeline: Pipeline, name: str, counts: list[int], op: MPI.Op, sbuf: Buf, rbuf: Buf,
         pol: Resolved, plain: Callable[..., Any], args: tuple[Any, ...]) -> Call:
    r = pipeline.comm.Get_rank()

    return Call(
        name, name, pol, [sbuf, rbuf], sbuf.nbytes, plain, args,
        op=op, summands=pipeline.comm.Get_size(), guarded=False,
        plan=functools.partial(call_bodies.plan_reduce_scatter, counts=counts, rank=r, sbuf=sbuf,
                               rbuf=rbuf))
