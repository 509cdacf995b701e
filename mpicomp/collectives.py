"""Compressed data-movement collectives (everything but the allreduce algorithms).

Each function runs one collective on compressed streams over the private
communicator of ``ctx``. Streams of a fixed-size codec have a size known
from (count, dtype, codec) alone, so no sizes are exchanged. A variable
codec's streams (``codec.variable``) move only the bytes used: receives of
point-to-point messages are posted for the upper bound (the decoder reads
a stream's length from the stream); where a collective needs the counts,
the ranks exchange them first (one int64 per rank: an MPI_Allgather, or an
MPI_Bcast from the root; the Bcast's chain needs none). A rank that receives its own data
back through a collective (Allgather, Gather's root, Bcast's root, Scatter's
root) gets the decoded stream's values like everyone else: all copies of a
value are the same bits on every rank. It makes them from its own input
where the codec can (``Ctx.reconstruct``: the decode's values, no bits
read). Alltoall copies a rank's own block exactly (no other rank holds
it).
"""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .algorithms import direct
from .algorithms.chain import bcast as chain_bcast
from .algorithms.chain import chained
from .algorithms.common import Ctx, offsets, pieces_of
from .algorithms.ring import allgather as ring_allgather
from .algorithms.ring import reduce_scatter as ring_reduce_scatter

__all__ = ["allgather_nodes", "allgatherv", "alltoall", "bcast", "bcast_nodes", "gather",
           "reduce_scatter", "reduce_scatter_direct", "scatter"]


#: message tag of the alltoall in pieces on the private communicator
TAG_ALLTOALL = 13
#: message tag of the node-aware allgather on the leaders' communicator
TAG_NODE_PACK = 14


def allgatherv(ctx: Ctx, x: np.ndarray | None, out: np.ndarray,
               counts: list[int], displs: list[int], algorithm: str = "auto") -> str:
    """Rank r's ``counts[r]`` values (``x``, or ``out`` at ``displs[r]`` when None) to all, in
    pieces: the direct allgather (:func:`mpicomp.algorithms.direct.allgather`) on up to
    :data:`~mpicomp.algorithms.direct.MAX_RANKS` ranks with blocks of up to
    :data:`~mpicomp.algorithms.direct.MAX_BLOCK_BYTES`, or where ``algorithm`` is
    ``"direct"``, else the ring's (:func:`mpicomp.algorithms.ring.allgather`); returns
    which ran."""
    r = ctx.rank
    # in place too: both encode all of their own block before they decode anything
    mine = x if x is not None else out[displs[r] : displs[r] + counts[r]]
    small = max(counts) * out.dtype.itemsize <= direct.MAX_BLOCK_BYTES
    if algorithm == "direct" or (algorithm == "auto" and ctx.size <= direct.MAX_RANKS and small):
        direct.allgather(ctx, mine, out, counts, displs)
        return "direct"
    ring_allgather(ctx, mine, out, counts, displs)
    return "ring"


def alltoall(ctx: Ctx, x: np.ndarray, out: np.ndarray, count: int,
             local: frozenset[int] = frozenset()) -> None:
    """Block j of ``x`` (``count`` values) to rank j; block i of ``out`` from rank i.

    Pipelined: the block for rank ``r + s`` is encoded and sent (nonblocking)
    in step ``s``, so encoding one block overlaps the transfer of the
    others, and blocks are decoded in the order their senders encode them
    for this rank. The own block is copied, exact: each block has one
    recipient, so no two ranks hold copies of a value that could differ
    (and the codec spends nothing on a block that crosses no wire).

    Node-aware (``local``: the ranks on this rank's node; host buffers):
    blocks between ranks of one node travel plain through shared memory and
    arrive exact too, and only blocks between nodes are compressed.
    """
    p, r, dt = ctx.size, ctx.rank, x.dtype
    nb = ctx.nbytes(count, dt)
    send = ctx.wire("send", p * nb)
    recv = ctx.wire("recv", p * nb)

    def block(a: np.ndarray, i: int) -> np.ndarray:
        return a[i * count : (i + 1) * count]

    # In place, a plain block from a rank of the node would land in a block this rank may
    # still be sending (MPI forbids it; it gave wrong results), and before a guarded call's
    # verdict: send from a copy, land the plain blocks apart, copy them in after arrival.
    landing = out
    if local and np.may_share_memory(x, out):
        x = ctx.copy_of(x, "alltoall-in")
        landing = ctx.values("alltoall-landing", out.size, dt)
    order = [(r - s) % p for s in range(1, p)]  # senders, in the order they reach this rank
    arrivals = [(i, ctx.irecv(block(landing, i) if i in local else recv[i * nb : (i + 1) * nb],
                              i, TAG_ALLTOALL)) for i in order]
    sends = []
    for s in range(1, p):
        j = (r + s) % p
        if j in local:
            sends.append(ctx.isend(block(x, j), j, TAG_ALLTOALL))
            continue
        stream = ctx.encode_into(block(x, j), send[j * nb : (j + 1) * nb])
        sends.append(ctx.isend(stream, j, TAG_ALLTOALL))
    ctx.post_verdict()
    ctx.copy(block(out, r), block(x, r))  # the own block: one copy anywhere, so exact
    for i, req in arrivals:
        ctx.wait(req)
        if i not in local:
            ctx.decode(recv[i * nb : (i + 1) * nb], block(out, i))
        elif landing is not out:
            ctx.copy(block(out, i), block(landing, i))
    ctx.waitall(sends)


def allgather_nodes(ctx: Ctx, x: np.ndarray, out: np.ndarray, node_of: tuple[int, ...],
                    node: MPI.Intracomm, leaders: MPI.Intracomm) -> None:
    """Node-aware Allgather: every rank's ``x`` (``count`` values) to block r of every ``out``.

    Each rank encodes its own block (all ranks at once); the ranks of a node
    collect their node's streams through shared memory (a plain Allgather of
    compressed bytes on ``node``); each node leader sends its node's pack of
    streams once to every other leader and receives theirs (nonblocking, on
    ``leaders``), handing each pack to its node (``Ibcast``) as it arrives,
    in a fixed order, while the others are still on the wire. Every rank
    decodes every other stream and makes its own stream's values from ``x``
    (the same values), so every copy of a value is the same bits on every
    rank, as in the flat ring. What crosses the network
    is each node's streams once per other node, from its leader alone: ``p -
    ppn`` blocks out of a node against ``p - 1`` in the flat ring.
    """
    p, r, n = ctx.size, ctx.rank, x.size
    nb = ctx.nbytes(n, x.dtype)
    nodes = max(node_of) + 1
    members = [[i for i in range(p) if node_of[i] == k] for k in range(nodes)]
    mine = ctx.encode(x, "send")
    # every stream's bytes (a variable codec's exchanged first), packs laid out by them
    sizes = ctx.sizes(mine.size) if ctx.codec.variable else [nb] * p
    within = [offsets([sizes[i] for i in m]) for m in members]  # a stream's place in its pack
    first = offsets([sum(sizes[i] for i in m) for m in members])
    packs = ctx.wire("node-packs", sum(sizes))

    def pack(k: int) -> np.ndarray:
        return packs[first[k] : first[k] + sum(sizes[i] for i in members[k])]

    me = node_of[r]
    leader = node.Get_rank() == 0
    ctx.post_verdict()
    with ctx.rec.mpi():
        if ctx.codec.variable:
            node.Allgatherv(mine, [pack(me), ([sizes[i] for i in members[me]], within[me])])
        else:
            node.Allgather(mine, pack(me))
    if node.Get_size() > 1:
        ctx.rec.sent(mine.size)
    lctx = ctx.on(leaders) if leader else None
    order = [(me + s) % nodes for s in range(1, nodes)]
    arrivals, sends = {}, []
    if lctx is not None:
        arrivals = {k: lctx.irecv(pack(k), k, TAG_NODE_PACK) for k in order}
        sends = [lctx.isend(pack(me), k, TAG_NODE_PACK) for k in reversed(order)]

    def unpack(k: int) -> None:
        for j, i in enumerate(members[k]):
            at = within[k][j]
            if i == r:  # its own stream: the values from x
                ctx.reconstruct(x, mine, out[i * n : (i + 1) * n])
            else:
                ctx.decode(pack(k)[at : at + sizes[i]], out[i * n : (i + 1) * n])

    unpack(me)  # while the other nodes' packs travel
    for k in order:
        if lctx is not None:
            lctx.wait(arrivals[k])
        if node.Get_size() > 1:
            ctx.wait(node.Ibcast(pack(k), root=0), idle=not leader)
            if leader:
                ctx.rec.sent(pack(k).size)
        unpack(k)
    if lctx is not None:
        lctx.waitall(sends)


def bcast_nodes(ctx: Ctx, buf: np.ndarray, root: int, node_of: tuple[int, ...],
                node: MPI.Intracomm, leaders: MPI.Intracomm) -> None:
    """Node-aware Bcast: root's stream crosses the network once per node, to its leader.

    The root encodes; its node receives the stream through shared memory
    (a Bcast on ``node``), the leaders pass it on between nodes (a Bcast on
    ``leaders`` from the root's node), and each other leader hands it to
    its node. Every rank ends with the stream's decoded values (the root
    makes them from ``buf``).
    """
    nb = ctx.nbytes(buf.size, buf.dtype)
    home = node_of[root]
    me = node_of[ctx.rank]
    stream = ctx.encode(buf, "send") if ctx.rank == root else ctx.wire("send", nb)
    if ctx.codec.variable:
        stream = stream[: ctx.size_from(stream.size, root)]
        nb = stream.size
    ctx.post_verdict()
    several = node.Get_size() > 1
    leader = node.Get_rank() == 0
    with ctx.rec.mpi():
        if me == home and several:
            # the root's rank on its node: node ranks follow the private communicator's order
            node.Bcast(stream, root=sum(1 for i in range(root) if node_of[i] == home))
        if leader and leaders.Get_size() > 1:
            leaders.Bcast(stream, root=home)
    if me != home and several:
        ctx.wait(node.Ibcast(stream, root=0), idle=not leader)
    if ctx.rank == root or leader:
        ctx.rec.sent(nb)
    if ctx.rank == root:
        ctx.reconstruct(buf, stream, buf)
    else:
        ctx.decode(stream, buf)


def bcast(ctx: Ctx, buf: np.ndarray, root: int) -> None:
    """Root's ``buf`` to every rank; every rank, root included, ends with the decoded values.

    Down the chain of pieces of :mod:`mpicomp.algorithms.chain` where it is not the slower
    (:func:`~mpicomp.algorithms.chain.chained`: few ranks, or many pieces); else the root
    encodes the whole buffer and ``MPI_Bcast`` carries the stream (a variable codec's
    size first).
    """
    if chained(ctx.size, pieces_of(ctx.codec, buf.size, buf.dtype, bool(ctx.device_pieces))):
        chain_bcast(ctx, buf, root)
        return
    nb = ctx.nbytes(buf.size, buf.dtype)
    if ctx.rank == root:
        stream = ctx.encode(buf, "send")
        ctx.rec.sent(stream.size)
    else:
        stream = ctx.wire("send", nb)
    if ctx.codec.variable:
        stream = stream[: ctx.size_from(stream.size, root)]
    ctx.post_verdict()
    with ctx.rec.mpi():
        ctx.comm.Bcast(stream, root=root)
    if ctx.rank == root:
        ctx.reconstruct(buf, stream, buf)
    else:
        ctx.decode(stream, buf)


def gather(ctx: Ctx, x: np.ndarray, out: np.ndarray | None, root: int) -> None:
    """Every rank's ``x`` to ``root``'s ``out`` (rank i's block at i * x.size)."""
    p, n, dt = ctx.size, x.size, x.dtype
    nb = ctx.nbytes(n, dt)
    mine = ctx.encode(x, "send")
    ctx.post_verdict()
    streams = ctx.wire("streams", p * nb) if ctx.rank == root else None
    if ctx.codec.variable:
        sizes = ctx.sizes_at(mine.size, root)
        with ctx.rec.mpi():
            ctx.comm.Gatherv(mine, [streams, (sizes, [i * nb for i in range(p)])]
                             if ctx.rank == root else None, root=root)
    else:
        with ctx.rec.mpi():
            ctx.comm.Gather(mine, streams, root=root)
    ctx.rec.sent(mine.size)
    if ctx.rank == root:
        assert out is not None and streams is not None
        for i in range(p):
            if i == root:  # its own stream: the values from x
                ctx.reconstruct(x, mine, out[i * n : (i + 1) * n])
            else:
                ctx.decode(streams[i * nb : (i + 1) * nb], out[i * n : (i + 1) * n])


def scatter(ctx: Ctx, x: np.ndarray | None, out: np.ndarray | None, n: int, root: int) -> None:
    """Block i (``n`` values) of root's ``x`` to rank i's ``out`` (None: the root in place)."""
    p = ctx.size
    dt = x.dtype if x is not None else out.dtype
    nb = ctx.nbytes(n, dt)
    streams = None
    used = [nb] * p
    if ctx.rank == root:
        assert x is not None
        streams = ctx.wire("streams", p * nb)
        for i in range(p):
            used[i] = ctx.encode_into(x[i * n : (i + 1) * n],
                                      streams[i * nb : (i + 1) * nb]).size
        ctx.rec.sent(sum(used) - used[root])
    ctx.post_verdict()
    mine = ctx.wire("recv", nb)
    if ctx.codec.variable:
        size = ctx.size_of_mine(used, root)
        with ctx.rec.mpi():
            ctx.comm.Scatterv([streams, (used, [i * nb for i in range(p)])]
                              if ctx.rank == root else None, mine[:size], root=root)
    else:
        with ctx.rec.mpi():
            ctx.comm.Scatter(streams, mine, root=root)
    if out is not None and ctx.rank == root:  # its own block: the values from x
        ctx.reconstruct(x[root * n : (root + 1) * n], mine, out)
    elif out is not None:
        ctx.decode(mine, out)


def reduce_scatter(ctx: Ctx, x: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
    """Sum over ranks of block r (``counts[r]`` values) into rank r's ``out`` (ring)."""
    displs = offsets(counts)
    mine = ring_reduce_scatter(ctx, x, counts, displs)
    ctx.copy(out[: counts[ctx.rank]], mine)


def reduce_scatter_direct(ctx: Ctx, x: np.ndarray, out: np.ndarray, counts: list[int]) -> None:
    """Sum over ranks of block r (``counts[r]`` values) into rank r's ``out``, every input
    quantized once (:func:`mpicomp.algorithms.direct.reduce_scatter`: block j of ``x``
    encoded and sent straight to rank j, one block encoded while the others travel; rank r
    adds the ``p - 1`` decoded blocks to its own, exact, in rank order). What a rank's
    contribution lost is its own round trip of each block it sent, which error feedback
    can give back whole; the ring requantizes partial sums ``p - 1`` times. The same wire
    bytes per rank as the ring, in one round."""
    r, displs = ctx.rank, offsets(counts)
    # (a copy: in place, the sum is written over the input)
    own = ctx.copy_of(x[displs[r] : displs[r] + counts[r]], "reduce-scatter-own")
    direct.reduce_scatter(ctx, x, counts, displs, own, out[: counts[r]], verdict=True)
