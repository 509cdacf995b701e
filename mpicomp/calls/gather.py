"""Gather: every rank's compressed block to the root."""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import is_in_place, parse
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, root: int,
             settings: dict[str, Any]) -> Call:
    """``comm.Gather``."""
    pol = pipeline.settings.for_call(settings)
    p, r = pipeline.comm.Get_size(), pipeline.comm.Get_rank()
    rbuf = parse(recvbuf, "recvbuf", blocks=p) if r == root else None
    if is_in_place(sendbuf):
        if rbuf is None:
            raise ValueError("Gather: MPI.IN_PLACE is only valid as the root's sendbuf")
        n = rbuf.count
        sbuf = rbuf
        x = rbuf.array[r * n : (r + 1) * n] if rbuf.compressible else None
    else:
        sbuf = parse(sendbuf, "sendbuf")
        x = sbuf.data() if sbuf.compressible else None
        n = sbuf.count
    if rbuf is not None and rbuf.compressible and sbuf.compressible and rbuf.count != n:
        raise ValueError(f"Gather: sendbuf has {n} values, recvbuf {rbuf.count} per rank")

    return Call(
        "Gather", "Gather", pol, [sbuf] + ([rbuf] if rbuf is not None else []), sbuf.nbytes,
        MPI.Intracomm.Gather, (sendbuf, recvbuf, root), local=x,
        settings=f"Gather n={n} root={root}",
        body=functools.partial(call_bodies.gather, x=x,
                               out=rbuf.array if rbuf is not None else None, root=root))
