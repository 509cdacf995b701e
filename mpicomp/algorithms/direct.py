"""Direct reduce-scatter, allgather and allreduce: every rank sends to every other at once.

The ring moves each compressed piece ``p - 1`` hops, one neighbour at a
time: a piece waits at every rank on the way for that rank to forward it,
and where ranks share cores (more ranks than cores, or a training step's
compute beside them) each wait can last a scheduler's time slice. Here no
rank forwards anything:

* **reduce-scatter**: block ``j`` of every rank's input is encoded once
  and sent straight to rank ``j``, which adds the ``p - 1`` decoded blocks
  to its own block, exact, in rank order (the same bits every run);
* **allgather**: each rank encodes its block, piece by piece, and sends
  each piece to every other rank as soon as it is encoded; every rank
  decodes the same bytes (the owner makes its own block's values from its
  input where the codec can: ``Ctx.reconstruct``);
* **allreduce**: the two in turn, on the chunks of :func:`~.common.split`.

Each rank sends the same bytes as in the ring (``p - 1`` of ``p`` chunks,
twice for the allreduce), in two rounds instead of ``2 (p - 1)`` steps;
a value is quantized twice (its input, then the chunk's sum), where the
ring requantizes partial sums ``p - 1`` times. Measured on 4 simulated
hosts at 1 Gbit/s the allreduce is 6-17% slower than the ring (3.3 and
16 MiB), with 15-20% less error: ``auto`` runs it for the Allgather of
small blocks only (:data:`MAX_RANKS`, :data:`MAX_BLOCK_BYTES`), the
allreduce only when named (``algorithm="direct"``), and the
reduce-scatter under ``algorithm="allgather"`` or ``"direct"`` (the
sharded optimizer's, whose error feedback sees exactly what each rank's
input lost).

Speculative screening (``Ctx.guarded``): every value a rank sends is
encoded on that rank, alone (the other ranks' blocks) or in the chunk's sum
(its own block); a NaN, Inf or overflow anywhere reaches an encode, so the
encoders see any unsafe input. The allgather posts the verdict after its
last encode; nothing is written into the protected input before it.
"""
from __future__ import annotations

from typing import Any

from .common import Ctx, PieceLayout, offsets, split

__all__ = ["MAX_RANKS", "allgather", "allreduce", "reduce_scatter"]

#: message tags on the private communicator
TAG_RS, TAG_AG = 16, 17
#: the compressed Allgather runs the direct allgather under ``auto`` on up to this many
#: ranks (each rank has ``p - 1`` messages in flight each way) ...
MAX_RANKS = 8
#: ... and blocks of up to this many raw bytes: 256 KiB a rank took 1.3-1.4 ms on 4
#: simulated hosts at 1 Gbit/s against the ring's 1.7, 512 KiB the same, 1 MiB 2.6-3.1
#: against 2.5 (docs/algorithms.md)
MAX_BLOCK_BYTES = 256 * 1024


def reduce_scatter(ctx: Ctx, x: Any, counts: list[int], displs: list[int], own: Any,
                   acc: Any, verdict: bool) -> None:
    """``acc`` = the sum over ranks of block ``rank`` (``counts[rank]`` values at
    ``displs``): this rank's term ``own`` (its block of ``x``, or a copy of it) and the
    others' decoded pieces (decoded as they arrive, then added in rank order: the same
    bits every run). Each block is sent in the ring's pieces, each piece as soon as it is
    encoded. ``verdict``: this rank encodes nothing after this (post the verdict once the
    blocks are sent). Every block of ``x`` is encoded before ``acc`` is written, so ``acc``
    may overlap ``x`` where ``own`` is a copy (in place); ``acc`` is written without
    waiting for a verdict: scratch, or a call that is not guarded."""
    p, r, dt = ctx.size, ctx.rank, x.dtype
    lay = PieceLayout(ctx, counts, [0] * p, dt)  # piece starts relative to the block
    n, span = counts[r], lay.span[r]
    bases = offsets(lay.span)
    send = ctx.wire("send", sum(lay.span))
    recv = ctx.wire("recv", p * span)  # rank i's pieces of block r at i * span
    others = [(r - s) % p for s in range(1, p)]  # (rank r - 1 sends to r first)
    pieces = [(i, j) for i in others for j in range(len(lay.wire[r]))]
    arrivals = [ctx.irecv(lay.piece(recv, i * span, r, j), i, TAG_RS) for i, j in pieces]
    sends = []
    for s in range(1, p):  # rank r + 1's block first: it is the first to need it
        dest = (r + s) % p
        for j, (start, count) in enumerate(lay.values[dest]):
            at = displs[dest] + start
            stream = ctx.encode_into(x[at : at + count], lay.piece(send, bases[dest], dest, j))
            sends.append(ctx.isend(stream, dest, TAG_RS))
    if verdict:
        ctx.post_verdict()
    terms = ctx.values("terms", p * n, dt)
    for _ in pieces:
        i, j = pieces[ctx.wait_any(arrivals)]
        start, count = lay.values[r][j]
        ctx.decode(lay.piece(recv, i * span, r, j), terms[i * n + start : i * n + start + count])
    for i in range(p):
        value = own if i == r else terms[i * n : (i + 1) * n]
        if i == 0:
            ctx.memory.copy(acc, value)
        else:
            ctx.add_into(acc, value)
    ctx.waitall(sends)


def allgather(ctx: Ctx, mine: Any, out: Any, counts: list[int], displs: list[int]) -> None:
    """Rank ``r``'s ``mine`` (``counts[r]`` values) decoded into ``out[displs[c]:...]`` for
    every rank ``c`` on every rank, each piece sent to every rank as it is encoded.

    Posts the verdict after the last encode; decodes into the protected input (in place)
    wait for it, as in the ring's allgather."""
    p, r = ctx.size, ctx.rank
    lay = PieceLayout(ctx, counts, displs, out.dtype)
    bases = offsets(lay.span)
    streams = ctx.wire("streams", sum(lay.span))

    def piece(c: int, j: int) -> Any:
        return lay.piece(streams, bases[c], c, j)

    senders = [(r - s) % p for s in range(1, p)]  # whose pieces reach this rank first
    arrivals = {(c, j): ctx.irecv(piece(c, j), c, TAG_AG)
                for c in senders for j in range(len(lay.wire[c]))}
    sends = []
    for j, (start, n) in enumerate(lay.values[r]):
        stream = ctx.encode_into(mine[start - displs[r] : start - displs[r] + n], piece(r, j))
        sends += [ctx.isend(stream, (r + s) % p, TAG_AG) for s in range(1, p)]
    ctx.post_verdict()
    for c in senders:
        for j, (start, n) in enumerate(lay.values[c]):
            ctx.wait(arrivals[c, j])
            ctx.decode(piece(c, j), out[start : start + n])
    for j, (start, n) in enumerate(lay.values[r]):  # own block
        at = start - displs[r]
        ctx.reconstruct(mine[at : at + n], piece(r, j), out[start : start + n])
    ctx.waitall(sends)


def allreduce(ctx: Ctx, x: Any, out: Any) -> None:
    """Direct reduce-scatter into scratch, then the direct allgather of the compressed
    sums: ``x`` is only read, and ``out`` (which may be ``x``) written only after the
    verdict."""
    p, r = ctx.size, ctx.rank
    counts, displs = split(x.size, p)
    acc = ctx.values("partial", max(counts), x.dtype)[: counts[r]]
    reduce_scatter(ctx, x, counts, displs, x[displs[r] : displs[r] + counts[r]], acc,
                   verdict=False)
    allgather(ctx, acc, out, counts, displs)
