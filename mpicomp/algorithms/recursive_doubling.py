"""Recursive-doubling allreduce on compressed buffers, for any number of ranks.

With ``q`` the largest power of two <= ``p`` and ``e = p - q``: first the
ranks ``0, 2, ..., 2e - 2`` send their compressed buffer to the next rank
and sit out. The ``q`` remaining ranks then run ``log2 q`` rounds; in each,
partners exchange their compressed partial sums and both compute
``decode(own) + decode(partner's)``: the same two terms on both sides (IEEE
addition commutes), so partners stay bitwise identical. When ``e > 0`` the
result is compressed once more and sent to the ranks that sat out; then
every rank uses the decoded value, so all ``p`` ranks end with the same
bits.

A value is quantized ``log2 q`` times (plus once before the first round on
the ranks that absorbed a neighbour, plus once at the end when ``e > 0``),
instead of ``p - 1`` times as in the ring, at the price of sending the
whole buffer in every round.
"""
from __future__ import annotations

import numpy as np

from .common import Ctx

__all__ = ["allreduce"]


def allreduce(ctx: Ctx, x: np.ndarray, out: np.ndarray) -> None:
    p, r = ctx.size, ctx.rank
    n, dt = x.size, x.dtype
    nb = ctx.nbytes(n, dt)
    q = 1 << (p.bit_length() - 1)
    extra = p - q
    recv = ctx.wire("recv", nb)
    term = ctx.values("term", n, dt)

    # fold the first 2*extra ranks pairwise: even ones hand their data to the odd ones
    if r < 2 * extra and r % 2 == 0:
        send = ctx.encode(x, "send")
        with ctx.rec.mpi():
            ctx.comm.Send(send, r + 1, 0)
            ctx.comm.Recv(recv, r + 1, 1)
        ctx.rec.sent(send.size)
        ctx.decode(recv, out)
        return
    if r < 2 * extra:
        with ctx.rec.mpi():
            ctx.comm.Recv(recv, r - 1, 0)
        ctx.decode(recv, term)
        ctx.copy(out, x)
        ctx.add_into(out, term)
        vrank = r // 2
    else:
        ctx.copy(out, x)
        vrank = r - extra

    def real(v: int) -> int:
        return 2 * v + 1 if v < extra else v + extra

    mask = 1
    while mask < q:
        partner = real(vrank ^ mask)
        send = ctx.encode(out, "send")
        ctx.sendrecv(send, partner, recv, partner)
        ctx.decode(send, out)
        ctx.decode(recv, term)
        ctx.add_into(out, term)
        mask <<= 1

    if extra:
        send = ctx.encode(out, "send")
        if r < 2 * extra:
            with ctx.rec.mpi():
                ctx.comm.Send(send, r - 1, 1)
            ctx.rec.sent(send.size)
        ctx.decode(send, out)
