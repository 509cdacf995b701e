"""Alltoall and Ialltoall: pairwise exchanges, in pieces, of compressed blocks (blocks of the
ranks on this rank's node plain, on a job whose nodes hold several ranks)."""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import is_in_place, parse, same_count
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, settings: dict[str, Any],
             nonblocking: bool = False) -> Call:
    """``comm.Alltoall`` (or, ``nonblocking``, ``comm.Ialltoall``)."""
    pol = pipeline.settings.for_call(settings)
    p = pipeline.comm.Get_size()
    rbuf = parse(recvbuf, "recvbuf", blocks=p)
    sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf", blocks=p)
    same_count(sbuf, rbuf, "Alltoall")
    n = rbuf.count
    x = sbuf.data(0, n * p) if sbuf.compressible else None

    return Call("Ialltoall" if nonblocking else "Alltoall", "Alltoall", pol, [sbuf, rbuf],
                n * p * sbuf.itemsize, MPI.Intracomm.Alltoall, (sendbuf, recvbuf), local=x,
                settings=f"Alltoall n={n}",
                body=functools.partial(call_bodies.alltoall, x=x, out=rbuf.array, n=n, pol=pol,
                                       on_device=sbuf.on_device),
                nonblocking=MPI.Intracomm.Ialltoall if nonblocking else None)
