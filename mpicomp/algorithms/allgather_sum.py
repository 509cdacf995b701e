"""Allgather allreduce: every rank's compressed buffer to everyone, then a local sum.

One encode and ``p`` decodes per rank, one MPI_Allgather of the compressed
streams (variable-size streams: an MPI_Allgather of their sizes, then an
MPI_Allgatherv). Each input is quantized once and the sum is taken in rank order
from the decoded values, so every rank computes the same bits. Best for few
ranks and small messages (one round of latency).
"""
from __future__ import annotations

import numpy as np

from .common import Ctx

__all__ = ["allreduce"]


def allreduce(ctx: Ctx, x: np.ndarray, out: np.ndarray) -> None:
    """``out = sum over ranks of decode(encode(x_r))``, summed in rank order."""
    p, n = ctx.size, x.size
    nb = ctx.nbytes(n, x.dtype)
    mine = ctx.encode(x, "send")
    streams = ctx.wire("streams", p * nb)
    if ctx.codec.variable:
        sizes = ctx.sizes(mine.size)
        with ctx.rec.mpi():
            ctx.comm.Allgatherv(mine, [streams, (sizes, [r * nb for r in range(p)])])
    else:
        with ctx.rec.mpi():
            ctx.comm.Allgather(mine, streams)
    ctx.rec.sent(mine.size)
    ctx.decode(streams[:nb], out)
    tmp = ctx.values("term", n, x.dtype)
    for r in range(1, p):
        ctx.decode(streams[r * nb : (r + 1) * nb], tmp)
        ctx.add_into(out, tmp)
