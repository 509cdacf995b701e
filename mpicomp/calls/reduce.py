"""Reduce: the ring reduce-scatter with recompression, then the pieces gathered at the root
(:func:`mpicomp.algorithms.ring.reduce`); SUM only."""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import is_in_place, parse, same_count
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, op: MPI.Op, root: int,
             settings: dict[str, Any]) -> Call:
    """``comm.Reduce``."""
    pol = pipeline.settings.for_call(settings)
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

    return Call(
        "Reduce", "Reduce", pol, bufs, sbuf.nbytes, MPI.Intracomm.Reduce,
        (sendbuf, recvbuf, op, root), op=op, summands=pipeline.comm.Get_size(), guarded=False,
        plan=functools.partial(call_bodies.plan_reduce, sbuf=sbuf, rbuf=rbuf, root=root))
