"""Bcast down a chain of compressed pieces.

The ranks form a chain from the root: ``root``, ``root + 1``, ...,
``root + p - 1`` (mod ``p``). The root cuts its buffer into pieces of about
:data:`~.common.PIECE_BYTES` wire bytes (:func:`~.common.pieces`), encodes
them one after the other and sends each to the next rank as soon as it is
encoded; every other rank forwards each piece to the next one as it arrives,
then decodes it. So the root's encode of one piece overlaps the transfer of
the pieces before it, a rank's decode the transfer of the pieces after it,
and each link carries the stream once: the last rank has the last of ``k``
pieces of ``t`` wire seconds each after about ``(k + p - 2) t``, where a
Bcast of the whole stream waits for the root's whole encode first and then
takes about ``2 k t`` for a long message (MPICH: a scatter, then an
allgather) or ``log2(p) k t`` for a short one (a binomial tree).
:func:`chained` says where the chain is not the slower of the two; elsewhere
(many ranks, few pieces) :func:`mpicomp.collectives.bcast` sends the stream
with ``MPI_Bcast``.

Variable-size streams: every receive is posted for its piece's upper bound
and every piece travels with the bytes its encode used (the decoder reads a
stream's length from the stream), so no size is exchanged. Every rank
decodes the same bytes; the root makes its values from its input where the
codec can (``Ctx.reconstruct``), so every rank ends with the same bits.
"""
from __future__ import annotations

import math
from typing import Any

from .common import Ctx, PieceLayout

__all__ = ["TAG_CHAIN", "bcast", "chained"]

#: message tag of the chain's pieces on the private communicator
TAG_CHAIN = 15


def chained(p: int, k: int) -> bool:
    """Whether a Bcast to ``p`` ranks in ``k`` pieces goes down the chain: its ``k + p - 2``
    piece times are at most a plain Bcast's ``min(ceil(log2 p), 2) k`` (a binomial tree,
    or a scatter and an allgather). Every rank decides alike (``k`` depends only on the
    count, the dtype and the codec)."""
    if p <= 2:
        return True
    return k + p - 2 <= min(math.ceil(math.log2(p)), 2) * k


def bcast(ctx: Ctx, buf: Any, root: int) -> None:
    """Root's ``buf`` to every rank down the chain; every rank, root included, ends with the
    decoded values."""
    p, r = ctx.size, ctx.rank
    position = (r - root) % p
    before, after = (r - 1) % p, (r + 1) % p
    forwards = position < p - 1
    lay = PieceLayout(ctx, [buf.size], [0], buf.dtype)  # one chunk: the whole buffer
    streams = ctx.wire("chain", lay.span[0])
    k = len(lay.wire[0])

    def piece(j: int) -> Any:
        return lay.piece(streams, 0, 0, j)

    def values(j: int) -> Any:
        start, n = lay.values[0][j]
        return buf[start : start + n]

    sends = []
    if position == 0:
        used = []
        for j in range(k):
            stream = ctx.encode_into(values(j), piece(j))
            used.append(stream)
            if forwards:
                sends.append(ctx.isend(stream, after, TAG_CHAIN))
        ctx.post_verdict()
        for j, stream in enumerate(used):  # while the pieces travel
            ctx.reconstruct(values(j), stream, values(j))
    else:
        ctx.post_verdict()  # (no encode here)
        arrivals = [ctx.irecv(piece(j), before, TAG_CHAIN) for j in range(k)]
        for j, req in enumerate(arrivals):
            nbytes = ctx.received(req)  # (a variable codec's piece: its stream's bytes)
            if forwards:
                sends.append(ctx.isend(piece(j)[:nbytes], after, TAG_CHAIN))
            ctx.decode(piece(j)[:nbytes], values(j))
    ctx.waitall(sends)
