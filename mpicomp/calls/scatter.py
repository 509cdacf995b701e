"""Scatter: the root's compressed blocks, one to each rank."""
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
    """``comm.Scatter``; its size is one rank's block."""
    pol = pipeline.settings.for_call(settings)
    p, r = pipeline.comm.Get_size(), pipeline.comm.Get_rank()
    in_place = is_in_place(recvbuf)
    if in_place and r != root:
        raise ValueError("Scatter: MPI.IN_PLACE is only valid as the root's recvbuf")
    sbuf = parse(sendbuf, "sendbuf", blocks=p) if r == root else None
    # the root in place keeps its own block untouched; it still takes part compressed
    rbuf = sbuf if in_place else parse(recvbuf, "recvbuf")
    assert rbuf is not None
    both = sbuf is not None and sbuf.compressible and rbuf.compressible
    if both and not in_place and sbuf.count != rbuf.count:
        raise ValueError(
            f"Scatter: sendbuf has {sbuf.count} values per rank, recvbuf {rbuf.count}"
        )
    x = sbuf.data(0, rbuf.count * p) if (sbuf is not None and sbuf.compressible) else None
    out = None if in_place else rbuf.data() if rbuf.compressible else None

    return Call(
        "Scatter", "Scatter", pol, [rbuf] + ([sbuf] if sbuf is not None else []), rbuf.nbytes,
        MPI.Intracomm.Scatter, (sendbuf, recvbuf, root), local=x,
        settings=f"Scatter n={rbuf.count} root={root}",
        body=functools.partial(call_bodies.scatter, x=x, out=out, n=rbuf.count, root=root))
