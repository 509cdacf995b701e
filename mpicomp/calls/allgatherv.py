"""Allgatherv: the direct (up to 8 ranks) or the ring's allgather, in pieces, of compressed
blocks of any counts."""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import is_in_place, parse, parse_v
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, settings: dict[str, Any]) -> Call:
    """``comm.Allgatherv``; its size is the largest count (the same on every rank)."""
    pol = pipeline.settings.for_call(settings)
    p, r = pipeline.comm.Get_size(), pipeline.comm.Get_rank()
    rbuf = parse_v(recvbuf, p, "recvbuf")
    counts, displs = list(rbuf.counts or ()), list(rbuf.displs or ())
    if is_in_place(sendbuf):
        sbuf = rbuf
        x = None
    else:
        sbuf = parse(sendbuf, "sendbuf")
        x = sbuf.data() if sbuf.compressible else None
        if x is not None and rbuf.compressible and x.size != counts[r]:
            raise ValueError(
                f"Allgatherv: sendbuf has {x.size} values, counts[{r}] is {counts[r]}"
            )
    local = x if x is not None or not rbuf.compressible else (
        rbuf.array[displs[r] : displs[r] + counts[r]])

    return Call(
        "Allgatherv", "Allgatherv", pol, [sbuf, rbuf], max(counts, default=0) * rbuf.itemsize,
        MPI.Intracomm.Allgatherv, (sendbuf, recvbuf), local=local,
        settings=f"Allgatherv counts={counts}",
        body=functools.partial(call_bodies.allgatherv, x=local, out=rbuf.array, counts=counts,
                               displs=displs, pol=pol))
