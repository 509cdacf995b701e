"""Allgather and Iallgather: the direct (up to 8 ranks) or the ring's allgather, in pieces, of
compressed blocks, or, on a job whose nodes hold several ranks, the node-aware form (plain
inside a node)."""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import is_in_place, parse
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, settings: dict[str, Any],
             nonblocking: bool = False) -> Call:
    """``comm.Allgather`` (or, ``nonblocking``, ``comm.Iallgather``)."""
    pol = pipeline.settings.for_call(settings)
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

    return Call("Iallgather" if nonblocking else "Allgather", "Allgather", pol, [sbuf, rbuf],
                n * rbuf.itemsize, MPI.Intracomm.Allgather, (sendbuf, recvbuf), local=x,
                settings=f"Allgather n={n}",
                body=functools.partial(call_bodies.allgather, x=x, out=rbuf.array, counts=counts,
                                       displs=displs, pol=pol, on_device=sbuf.on_device),
                nonblocking=MPI.Intracomm.Iallgather if nonblocking else None)
