"""Ring reduce-scatter and ring allreduce on compressed chunks.

The buffer is cut into ``p`` chunks (boundaries on whole codec blocks).
Reduce-scatter: in each of ``p - 1`` steps a rank receives a compressed
partial sum of one chunk from its left neighbour, decodes it, adds its own
values of that chunk and recompresses the result for its right neighbour;
after the last step rank ``r`` holds the complete sum of chunk ``r`` (the
last addition is exact, not recompressed). Allreduce then compresses each
complete chunk once and passes the compressed chunks around the ring
untouched (a ring allgather); every rank, the owner included, decodes the
same bytes, so all ranks end with the same bits.

A chunk's value has been quantized once per hop: ``p - 1`` times in the
reduce-scatter, and once more for the allgather.
"""
from __future__ import annotations

import numpy as np

from .common import Ctx, split

__all__ = ["allreduce", "reduce", "reduce_scatter"]


def reduce_scatter(
    ctx: Ctx, x: np.ndarray, counts: list[int], displs: list[int]
) -> np.ndarray:
    """The complete sum of chunk ``rank`` (a scratch array of ``counts[rank]`` values)."""
    p, r = ctx.size, ctx.rank
    right, left = (r + 1) % p, (r - 1) % p
    dt = x.dtype

    def chunk(c: int) -> np.ndarray:
        return x[displs[c] : displs[c] + counts[c]]

    partial = ctx.values("partial", max(counts), dt)
    send = ctx.encode(chunk((r - 1) % p), "send")
    for step in range(p - 1):
        c = (r - 2 - step) % p
        recv = ctx.wire("recv", ctx.nbytes(counts[c], dt))
        ctx.sendrecv(send, right, recv, left)
        acc = partial[: counts[c]]
        ctx.decode(recv, acc)
        ctx.add_into(acc, chunk(c))
        if step < p - 2:
            send = ctx.encode(acc, "send")
    return partial[: counts[r]]


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
    offsets = [int(v) for v in np.cumsum([0] + sizes[:-1])]
    streams = ctx.wire("streams", sum(sizes))
    ctx.encode_into(mine, streams[offsets[r] : offsets[r] + sizes[r]])
    return streams, counts, displs, sizes, offsets


def _decode_all(ctx: Ctx, streams: np.ndarray, sizes: list[int], counts: list[int],
                displs: list[int], out: np.ndarray) -> None:
    off = 0
    for c in range(ctx.size):
        ctx.decode(streams[off : off + sizes[c]], out[displs[c] : displs[c] + counts[c]])
        off += sizes[c]


def allreduce(ctx: Ctx, x: np.ndarray, out: np.ndarray) -> None:
    """Ring reduce-scatter, then a ring allgather of the compressed complete chunks."""
    p, r = ctx.size, ctx.rank
    streams, counts, displs, sizes, offsets = _final_streams(ctx, x)
    right, left = (r + 1) % p, (r - 1) % p
    for step in range(p - 1):
        s, c = (r - step) % p, (r - step - 1) % p
        ctx.sendrecv(
            streams[offsets[s] : offsets[s] + sizes[s]], right,
            streams[offsets[c] : offsets[c] + sizes[c]], left,
        )
    _decode_all(ctx, streams, sizes, counts, displs, out)


def reduce(ctx: Ctx, x: np.ndarray, out: np.ndarray | None, root: int) -> None:
    """Ring reduce-scatter, then the compressed complete chunks gathered on ``root``.

    ``root`` ends with the same bits as the ring allreduce would give it.
    """
    r = ctx.rank
    streams, counts, displs, sizes, offsets = _final_streams(ctx, x)
    mine = ctx.wire("mine", sizes[r])
    ctx.copy(mine, streams[offsets[r] : offsets[r] + sizes[r]])
    with ctx.rec.mpi():
        if r == root:
            ctx.comm.Gatherv(mine, [streams, (sizes, offsets)], root=root)
        else:
            ctx.comm.Gatherv(mine, None, root=root)
    ctx.rec.sent(sizes[r])
    if r == root:
        assert out is not None
        _decode_all(ctx, streams, sizes, counts, displs, out)
