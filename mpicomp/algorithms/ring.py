"""Ring reduce-scatter and ring allreduce on compressed chunks, in pieces.

The buffer is cut into ``p`` chunks (boundaries on whole codec blocks).
Reduce-scatter: in each of ``p - 1`` steps a rank receives a compressed
partial sum of one chunk from its left neighbour, decodes it, adds its own
values of that chunk and recompresses the result for its right neighbour;
after the last step rank ``r`` holds the complete sum of chunk ``r`` (the
last addition is exact, not recompressed). Allreduce then compresses each
complete chunk once and passes the compressed chunks around the ring
untouched (a ring allgather); every rank decodes the same bytes, so all
ranks end with the same bits (the owner makes the values it sent from its
own input where the codec can: ``Ctx.reconstruct``, the decode's values
without reading the bits).

A chunk's value has been quantized once per hop: ``p - 1`` times in the
reduce-scatter, and once more for the allgather.

Variable-size streams (an error-bounded codec's): every receive is posted
for a piece's upper bound, every send carries the bytes its encode used,
and a forwarded piece the bytes that arrived (the decoder reads a stream's
length from the stream); no sizes are exchanged but the root's in
:func:`reduce`.

Pipelining: each chunk is further cut into pieces of about
:data:`~.common.PIECE_BYTES` wire bytes (:func:`~.common.pieces`; a variable codec's
counted as :data:`~.common.VARIABLE_RATIO` times fewer than its upper bound), each
sent as its own nonblocking message. A piece travels on as soon as it is
ready, so the codec work on one piece overlaps the transfer of the pieces
before and after it, and the allgather forwards each piece as soon as it
arrives, between this rank's codec calls (:class:`_Relay`), not when its
decode comes. All receives of a step are posted before its pieces are
needed, and messages between two neighbours with one tag keep their order
(MPI's non-overtaking rule; the allgather has a tag per step), so piece
``j`` of a step always meets the receive meant for it.
The codecs code every block on its own, so the result does not depend on
the cut: the bits are the same as with whole chunks.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from .common import Ctx, PieceLayout, offsets, split

__all__ = ["allgather", "allreduce", "reduce", "reduce_scatter"]

#: message tags on the private communicator: reduce-scatter pieces; allgather pieces of
#: step ``s``: ``TAG_AG + s % AG_STEP_TAGS`` (a tag per step, so that a rank may forward a
#: piece of one step before it has sent all of another: messages of one tag keep their
#: order, those of different tags need not)
TAG_RS, TAG_AG = 11, 1000
AG_STEP_TAGS = 16384  # (tags up to 17383: MPI guarantees 32767)


def _ag_tag(step: int) -> int:
    return TAG_AG + step % AG_STEP_TAGS


class _Relay:
    """The allgather's arriving pieces, each forwarded to the right as soon as it has
    arrived, between this rank's codec calls.

    A rank that forwarded a piece only when its decode came would hold every
    piece behind it on the wire for as long as its codec work before that
    takes (its own encodes, the decodes before it), and every rank after it
    would wait too. All receives are posted at once; :meth:`pump` forwards,
    in order, every piece that has arrived, without waiting; :meth:`take`
    waits for one piece, forwarding it and those before it.
    """

    def __init__(self, ctx: Ctx, pieces: list[Any], steps: list[int], left: int,
                 right: int, last: int) -> None:
        self.ctx, self.pieces, self.steps, self.right, self.last = ctx, pieces, steps, right, last
        self.requests = [ctx.irecv(buf, left, _ag_tag(s))
                         for buf, s in zip(pieces, steps, strict=True)]
        self.nbytes: list[int] = []  # of the pieces arrived so far, in order
        self.sends: list[MPI.Request] = []  # the forwards started (the caller completes them)

    def pump(self) -> None:
        """Forward every piece that has arrived since the last call, in order (and hand MPI
        this rank's sends whose staging copies are done: ``Ctx.progress``)."""
        self.ctx.progress()
        status = MPI.Status()
        while len(self.nbytes) < len(self.requests):
            with self.ctx.rec.mpi():
                done = self.requests[len(self.nbytes)].Test(status)
            if not done:
                return
            self._arrived(status.Get_count(MPI.BYTE))

    def take(self, i: int) -> int:
        """Wait for piece ``i`` (forwarding it and every piece before it); its bytes (a
        variable codec's stream may be shorter than its buffer)."""
        while len(self.nbytes) <= i:
            self._arrived(self.ctx.received(self.requests[len(self.nbytes)]))
        return self.nbytes[i]

    def _arrived(self, nbytes: int) -> None:
        i = len(self.nbytes)
        self.nbytes.append(nbytes)
        step = self.steps[i]
        if step < self.last:  # the piece of step s is step s + 1 on the right
            self.sends.append(self.ctx.isend(self.pieces[i][:nbytes], self.right,
                                             _ag_tag(step + 1)))


def reduce_scatter(
    ctx: Ctx, x: np.ndarray, counts: list[int], displs: list[int]
) -> np.ndarray:
    """The complete sum of chunk ``rank`` (a scratch array of ``counts[rank]`` values)."""
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    dt = x.dtype
    partial = ctx.values("partial", max(counts), dt)
    if p == 1:
        ctx.copy(partial[: counts[0]], x[: counts[0]])
        return partial[: counts[0]]
    lay = PieceLayout(ctx, counts, [0] * p, dt)  # piece starts relative to the chunk
    span = max(lay.span)
    # two receive and two send regions, used by alternate steps
    recv = ctx.wire("rs_recv", 2 * span)
    send = ctx.wire("rs_send", 2 * span)
    pending: list[list[Any]] = [[], []]  # sends still reading each send region

    def post(step: int) -> list[Any]:
        c = (r - 2 - step) % p
        base = (step % 2) * span
        return [ctx.irecv(lay.piece(recv, base, c, j), left, TAG_RS)
                for j in range(len(lay.wire[c]))]

    def send_piece(values: Any, region: int, c: int, j: int) -> None:
        stream = ctx.encode_into(values, lay.piece(send, region * span, c, j))
        pending[region].append(ctx.isend(stream, right, TAG_RS))

    recvs = post(0)
    first = (r - 1) % p
    for j, (start, n) in enumerate(lay.values[first]):
        send_piece(x[displs[first] + start : displs[first] + start + n], 0, first, j)
    for step in range(p - 1):
        c = (r - 2 - step) % p
        last = step == p - 2
        following = [] if last else post(step + 1)
        region = (step + 1) % 2
        if not last:  # the sends of two steps ago must be done with this region
            ctx.waitall(pending[region])
            pending[region] = []
        for j, (start, n) in enumerate(lay.values[c]):
            ctx.wait(recvs[j])
            acc = partial[start : start + n]
            ctx.decode(lay.piece(recv, (step % 2) * span, c, j), acc)
            ctx.add_into(acc, x[displs[c] + start : displs[c] + start + n])
            if not last:
                send_piece(acc, region, c, j)
        recvs = following
    ctx.waitall(pending[0] + pending[1])
    return partial[: counts[r]]


def allgather(ctx: Ctx, mine: Any, out: Any, counts: list[int], displs: list[int]) -> None:
    """Ring allgather of compressed blocks, in pieces: rank ``r``'s ``mine`` (``counts[r]``
    values) decoded into ``out[displs[c]:...]`` for every rank ``c`` on every rank.

    Each rank encodes its block piece by piece and sends each piece to the
    right as soon as it is encoded; a received piece is forwarded as soon as
    it arrives, between this rank's codec calls (:class:`_Relay`),
    before it is decoded. Every rank decodes the same bytes; the owner makes
    its own block's values from ``mine`` where the codec can (the same values
    as a decode), last.

    A guarded ``ctx`` (speculative screening) posts its verdict after the
    last encode; decodes into the protected input (in place) wait for it,
    and an unsafe verdict skips them (the transfers still complete).
    """
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    lay = PieceLayout(ctx, counts, displs, out.dtype)
    bases = offsets(lay.span)
    streams = ctx.wire("streams", sum(lay.span))

    def piece(c: int, j: int) -> Any:
        return lay.piece(streams, bases[c], c, j)

    order = [(step, c, j) for step in range(p - 1) for c in [(r - step - 1) % p]
             for j in range(len(lay.wire[c]))]  # the pieces in the order they arrive
    relay = _Relay(ctx, [piece(c, j) for _, c, j in order], [step for step, _, _ in order],
                   left, right, p - 2)
    sends = []
    for j, (start, n) in enumerate(lay.values[r]):
        stream = ctx.encode_into(mine[start - displs[r] : start - displs[r] + n], piece(r, j))
        if p > 1:
            sends.append(ctx.isend(stream, right, _ag_tag(0)))
        relay.pump()
    ctx.post_verdict()
    for i, (_, c, j) in enumerate(order):
        relay.take(i)
        relay.pump()
        start, n = lay.values[c][j]
        ctx.decode(piece(c, j), out[start : start + n])
    for j, (start, n) in enumerate(lay.values[r]):  # own block
        at = start - displs[r]
        ctx.reconstruct(mine[at : at + n], piece(r, j), out[start : start + n])
    ctx.waitall(sends + relay.sends)


def allreduce(ctx: Ctx, x: np.ndarray, out: np.ndarray) -> None:
    """Ring reduce-scatter, then a ring allgather of the compressed complete chunks.

    Every value of every rank's input reaches an encode on that rank (alone
    or in a partial sum), so a guarded ``ctx`` sees any unsafe input; ``x``
    is only read, and ``out`` is written only after the verdict when it is
    ``x`` itself (``ctx.protect``).
    """
    counts, displs = split(x.size, ctx.size)
    allgather(ctx, reduce_scatter(ctx, x, counts, displs), out, counts, displs)


def _final_streams(
    ctx: Ctx, x: np.ndarray
) -> tuple[np.ndarray, list[int], list[int], list[int], list[int]]:
    """Reduce-scatter, then compress the complete chunk once.

    Returns (stream buffer with this rank's compressed chunk in place, value
    counts, value displacements, byte sizes and byte offsets of the
    compressed chunks).
    """
    p, r = ctx.size, ctx.rank
    counts, displs = split(x.size, p)
    mine = reduce_scatter(ctx, x, counts, displs)
    sizes = [ctx.nbytes(c, x.dtype) for c in counts]
    starts = offsets(sizes)
    streams = ctx.wire("streams", sum(sizes))
    used = ctx.encode_into(mine, streams[starts[r] : starts[r] + sizes[r]]).size
    if ctx.codec.variable:  # the root receives each stream's own length
        sizes = ctx.sizes(used)
    return streams, counts, displs, sizes, starts


def _decode_all(ctx: Ctx, streams: np.ndarray, sizes: list[int], starts: list[int],
                counts: list[int], displs: list[int], out: np.ndarray) -> None:
    for c in range(ctx.size):
        ctx.decode(streams[starts[c] : starts[c] + sizes[c]],
                   out[displs[c] : displs[c] + counts[c]])


def reduce(ctx: Ctx, x: np.ndarray, out: np.ndarray | None, root: int) -> None:
    """Ring reduce-scatter, then the compressed complete chunks gathered on ``root``.

    ``root`` ends with the same bits as the ring allreduce would give it.
    """
    r = ctx.rank
    streams, counts, displs, sizes, starts = _final_streams(ctx, x)
    mine = ctx.wire("mine", sizes[r])
    ctx.copy(mine, streams[starts[r] : starts[r] + sizes[r]])
    with ctx.rec.mpi():
        if r == root:
            ctx.comm.Gatherv(mine, [streams, (sizes, starts)], root=root)
        else:
            ctx.comm.Gatherv(mine, None, root=root)
    ctx.rec.sent(sizes[r])
    if r == root:
        assert out is not None
        _decode_all(ctx, streams, sizes, starts, counts, displs, out)
