"""Compressed data-movement collectives (everything but the allreduce algorithms).

Each function runs one collective on compressed streams over the private
communicator of ``ctx``. Streams have a size known from (count, dtype,
codec) alone, so no sizes are exchanged. A rank that receives its own data
back through a collective (Allgather, Alltoall, Gather's root, Bcast's root)
gets the decoded stream like everyone else: all copies of a value are the
same bits on every rank.
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .algorithms.common import Ctx
from .algorithms.ring import reduce_scatter as ring_reduce_scatter

__all__ = ["allgatherv", "alltoall", "bcast", "gather", "reduce_scatter", "scatter"]


def _offsets(sizes: list[int]) -> list[int]:
    return [int(v) for v in np.cumsum([0] + list(sizes[:-1]))]


def allgatherv(ctx: Ctx, x: np.ndarray | None, out: np.ndarray,
               counts: list[int], displs: list[int]) -> None:
    """Rank r's ``counts[r]`` values (``x``, or ``out`` at ``displs[r]`` when None) to all."""
    p, r = ctx.size, ctx.rank
    dt = out.dtype
    mine = x if x is not None else out[displs[r] : displs[r] + counts[r]]
    sizes = [ctx.nbytes(c, dt) for c in counts]
    offs = _offsets(sizes)
    streams = ctx.wire("streams", sum(sizes))
    ctx.encode_into(mine, streams[offs[r] : offs[r] + sizes[r]])
    with ctx.rec.mpi():
        ctx.comm.Allgatherv(MPI.IN_PLACE, [streams, (sizes, offs), MPI.BYTE])
    ctx.rec.sent(sizes[r])
    for c in range(p):
        ctx.decode(streams[offs[c] : offs[c] + sizes[c]], out[displs[c] : displs[c] + counts[c]])


def alltoall(ctx: Ctx, x: np.ndarray, out: np.ndarray, count: int) -> None:
    """Block j of ``x`` (``count`` values) to rank j; block i of ``out`` from rank i."""
    p, dt = ctx.size, x.dtype
    nb = ctx.nbytes(count, dt)
    send = ctx.wire("send", p * nb)
    recv = ctx.wire("recv", p * nb)
    for j in range(p):
        ctx.encode_into(x[j * count : (j + 1) * count], send[j * nb : (j + 1) * nb])
    with ctx.rec.mpi():
        ctx.comm.Alltoall(send, recv)
    ctx.rec.sent((p - 1) * nb)
    for i in range(p):
        ctx.decode(recv[i * nb : (i + 1) * nb], out[i * count : (i + 1) * count])


def bcast(ctx: Ctx, buf: np.ndarray, root: int) -> None:
    """Root's ``buf`` to every rank; every rank, root included, ends with the decoded values."""
    nb = ctx.nbytes(buf.size, buf.dtype)
    if ctx.rank == root:
        stream = ctx.encode(buf, "send")
        ctx.rec.sent(nb)
    else:
        stream = ctx.wire("send", nb)
    with ctx.rec.mpi():
        ctx.comm.Bcast(stream, root=root)
    ctx.decode(stream, buf)


def gather(ctx: Ctx, x: np.ndarray, out: np.ndarray | None, root: int) -> None:
    """Every rank's ``x`` to ``root``'s ``out`` (rank i's block at i * x.size)."""
    p, n, dt = ctx.size, x.size, x.dtype
    nb = ctx.nbytes(n, dt)
    mine = ctx.encode(x, "send")
    streams = ctx.wire("streams", p * nb) if ctx.rank == root else None
    with ctx.rec.mpi():
        ctx.comm.Gather(mine, streams, root=root)
    ctx.rec.sent(nb)
    if ctx.rank == root:
        assert out is not None and streams is not None
        for i in range(p):
            ctx.decode(streams[i * nb : (i + 1) * nb], out[i * n : (i + 1) * n])


def scatter(ctx: Ctx, x: np.ndarray | None, out: np.ndarray | None, n: int, root: int) -> None:
    """Block i (``n`` values) of root's ``x`` to rank i's ``out`` (None: the root in place)."""
    p = ctx.size
    dt = x.dtype if x is not None else out.dtype
    nb = ctx.nbytes(n, dt)
    streams = None
    if ctx.rank == root:
        assert x is not None
        streams = ctx.wire("streams", p * nb)
        for i in range(p):
            ctx.encode_into(x[i * n : (i + 1) * n], streams[i * nb : (i + 1) * nb])
        ctx.rec.sent((p - 1) * nb)
    mine = ctx.wire("recv", nb)
    with ctx.rec.mpi():
        ctx.comm.Scatter(streams, mine, root=root)
    if out is not None:
        ctx.decode(mine, out)


def reduce_scatter(ctx: Ctx, x: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
    """Sum over ranks of block r (``counts[r]`` values) into rank r's ``out`` (ring)."""
    displs = _offsets(counts)
    mine = ring_reduce_scatter(ctx, x, counts, displs)
    ctx.copy(out[: counts[ctx.rank]], mine)
