"""What the compressed algorithms share: their context, codec calls and chunking."""
from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..backend.device import DeviceMemory
from ..backend.host import HostMemory
from ..codecs import Codec
from ..stats import Recorder

__all__ = ["ALIGN", "DEVICE_MAX_PIECES", "DEVICE_PIECE_BYTES", "PIECE_BYTES", "MAX_PIECES",
           "VARIABLE_RATIO", "Ctx", "PieceLayout", "pieces",
           "pieces_of", "poll", "screens_in_encoder", "split"]

#: chunk boundaries fall on multiples of this many values (a whole number of
#: blocks for every codec: zfp 3D blocks are 64 values, bitplane blocks 32)
ALIGN = 64

#: the algorithms in pieces cut each chunk into pieces of about this many wire bytes
#: (small enough that the codec of one piece overlaps the transfer of the next,
#: large enough that a piece's message overhead stays small)
PIECE_BYTES = 128 * 1024

#: at most this many pieces per chunk
MAX_PIECES = 32

#: a chunk on a device is cut into pieces of about this many wire bytes, at most
#: :data:`DEVICE_MAX_PIECES`: few and large, since each piece costs its kernel launches, a
#: staging copy each way and an MPI message (tens of microseconds from Python) while a GPU
#: codes a megabyte in microseconds. Host-sized pieces made a 64 MiB device Allreduce
#: of 4 ranks 192 pieces, 0.45x-0.58x plain MPI (docs/performance/gpu.md); these make it
#: 24 (not yet measured on a GPU: ``allreduce-gpu --piece-kib`` sweeps the size)
DEVICE_PIECE_BYTES = 1 << 20

#: at most this many pieces per chunk on a device (enough to overlap a piece's copies and
#: message with the next one's kernels)
DEVICE_MAX_PIECES = 8

#: a variable-size codec's chunk is cut as if its stream were this many times smaller than
#: its upper bound (the raw bytes, for errbound): its size is known only after the encode,
#: and every rank must cut alike. Cut for the upper bound, an errbound chunk of 1M values
#: went in 32 pieces of 32K values, and the ring Allreduce of 16 MiB on the simulated
#: cluster took 1.6x to 2.3x as long as cut in 8; cut in 4 (this ratio; errbound's streams
#: at bitplane 8.25's accuracy are 3.6x to 7.5x smaller than raw), it takes 4% less time
#: than in 8, its Bcast 3% less (docs/decisions.md)
VARIABLE_RATIO = 8


def screens_in_encoder(codec: Any, on_device: bool) -> bool:
    """Whether a call's encoders screen its data (bitplane on host buffers), so that the
    ring allreduce and the data-movement collectives skip the scan of their input (the
    communicator's speculative screening, which the model prices)."""
    return bool(getattr(codec, "guards", False)) and not on_device


@dataclasses.dataclass
class Ctx:
    """One compressed call: the private communicator, the codec, the recorder, the memory.

    ``memory`` (:mod:`mpicomp.backend`) says where values and streams live
    (host, or device with direct or staged streams); the algorithms take
    scratch arrays, encode, decode, add and copy only through this object,
    so each runs unchanged on host and device buffers. ``comm`` waits for
    the device stream before each MPI call when the data is on the device.
    """

    comm: MPI.Intracomm
    codec: Codec
    rec: Recorder
    memory: HostMemory | DeviceMemory
    #: speculative screening: encodes count unsafe blocks (NaN/Inf, values near the
    #: dtype's range) instead of refusing them, and :meth:`unsafe` tells every rank
    #: whether any rank found one (host memory and a codec with ``guards`` only)
    guarded: bool = False
    #: guarded: the call's input, which must stay intact until the verdict (a plain
    #: retry reads it): a decode or copy into memory it shares waits for the verdict,
    #: and is skipped when the verdict is unsafe
    protect: Any = None
    #: pieces cut for the device (:func:`pieces_of`): the agreement's "some rank's buffers
    #: are on a device", so that every rank cuts alike; None: where ``memory`` lives
    device_pieces: bool | None = None

    def __post_init__(self) -> None:
        if self.device_pieces is None:
            self.device_pieces = bool(self.memory.on_device)
        self.comm = self.memory.mpi_comm(self.comm)
        # a staged device call's sends may wait for their copies: every wait hands MPI
        # those whose copies are done (backend.device.DeferredSend); nothing on the host
        self._pump: Callable[[], None] = getattr(self.comm, "pump", _nothing)
        self._started: Callable[[list[Any]], list[Any]] = getattr(self.comm, "started", _same)
        self.unsafe_blocks = 0  # this rank's, from guarded encodes
        self._verdict: Any = None  # (request, send, receive) once posted, then the bool

    def on(self, comm: MPI.Intracomm) -> Ctx:
        """This call's codec, recorder, memory and pieces on another communicator (a node's,
        the leaders')."""
        return Ctx(comm, self.codec, self.rec, self.memory, device_pieces=self.device_pieces)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def nbytes(self, count: int, dtype: np.dtype) -> int:
        return self.codec.stream_nbytes(count, np.dtype(dtype))

    @property
    def on_device(self) -> bool:
        return bool(self.memory.on_device)

    def values(self, name: str, n: int, dtype: Any) -> Any:
        """Scratch for ``n`` values, where the caller's values live."""
        return self.memory.values(name, n, dtype)

    def wire(self, name: str, nbytes: int) -> Any:
        """Scratch for ``nbytes`` of streams, where MPI reads and writes them."""
        return self.memory.wire(name, nbytes)

    def encode(self, x: Any, name: str) -> Any:
        """``x`` encoded into the stream scratch ``name``."""
        return self.encode_into(x, self.wire(name, self.nbytes(x.size, x.dtype)))

    def encode_into(self, x: Any, out: Any) -> Any:
        with self.rec.codec():
            if self.guarded:
                if self._verdict is not None:
                    raise AssertionError("an encode after this rank's verdict was posted")
                self.unsafe_blocks += self.memory.encode_guarded(self.codec, x, out)
                return out
            stream = self.memory.encode(self.codec, x, out)
            if self.codec.variable:  # (the ratio the model learns: mpicomp.ratios)
                self.rec.encoded(x.nbytes, stream.size)
            return stream

    def _held(self, out: Any) -> bool:
        """Whether a write into ``out`` must not happen (it would overwrite the protected
        input of a call whose verdict is unsafe); waits for the verdict if it must."""
        return (self.guarded and self.protect is not None
                and bool(np.may_share_memory(out, self.protect)) and self.unsafe())

    def post_verdict(self) -> None:
        """Start the MAX allreduce of "this rank encoded an unsafe block" (guarded only).

        Every rank calls it once, after its last encode of the call (an
        encode after it raises ``AssertionError``); the algorithm may go on
        sending and receiving while it completes. A rank that never calls it
        posts it at its first :meth:`unsafe`.
        """
        if not self.guarded or self._verdict is not None:
            return
        mine = np.array([1 if self.unsafe_blocks else 0], np.int32)
        anyone = np.zeros(1, np.int32)
        with self.rec.mpi():
            req = self.comm.Iallreduce(mine, anyone, op=MPI.MAX)
        self._verdict = (req, mine, anyone)

    def unsafe(self) -> bool:
        """Whether any rank's guarded encodes found an unsafe block: the same on every rank.

        Waits for the verdict (posting it if this rank had not); False when not guarded.
        """
        if not self.guarded:
            return False
        self.post_verdict()
        if isinstance(self._verdict, tuple):
            req, _, anyone = self._verdict
            self.wait(req)
            self._verdict = bool(anyone[0])
        return bool(self._verdict)

    def decode(self, buf: Any, out: Any) -> Any:
        if self._held(out):
            return out
        with self.rec.codec():
            return self.memory.decode(self.codec, buf, out)

    def reconstruct(self, x: Any, stream: Any, out: Any) -> Any:
        """:meth:`decode` of ``stream``, which this rank encoded from ``x``: the same values,
        made from ``x`` where the codec can (no bits read)."""
        if self._held(out):
            return out
        with self.rec.codec():
            return self.memory.reconstruct(self.codec, x, stream, out)

    def add_into(self, acc: Any, x: Any) -> None:
        """``acc += x`` (values)."""
        self.memory.add_into(acc, x)

    def copy_of(self, x: Any, name: str) -> Any:
        """A copy of ``x`` in the values scratch ``name``."""
        dup = self.values(name, x.size, x.dtype)
        self.memory.copy(dup, x)
        return dup

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[:] = src`` (values)."""
        if not self._held(dst):
            self.memory.copy(dst, src)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int) -> None:
        with self.rec.mpi():
            self.comm.Sendrecv(sendbuf, dest, 0, recvbuf, source, 0)
        self.rec.sent(sendbuf.nbytes)

    def isend(self, buf: Any, dest: int, tag: int) -> MPI.Request:
        """Start sending ``buf`` (streams); complete it with :meth:`wait` or :meth:`waitall`."""
        with self.rec.mpi():
            req = self.comm.Isend(buf, dest, tag)
        self.rec.sent(buf.nbytes)
        return req

    def irecv(self, buf: Any, source: int, tag: int) -> MPI.Request:
        """Start receiving into ``buf`` (streams)."""
        with self.rec.mpi():
            return self.comm.Irecv(buf, source, tag)

    def wait(self, req: MPI.Request, idle: bool = False) -> None:
        """Complete ``req``, yielding the core between polls (see :func:`poll`)."""
        test = req.Test if self._pump is _nothing else (lambda: self._pumped(req.Test()))
        with self.rec.mpi():
            poll(test, idle)

    def progress(self) -> None:
        """Hand MPI the sends that waited for their staging copies and may start now
        (never blocks; nothing on the host)."""
        self._pump()

    def _pumped(self, flag: bool) -> bool:
        self._pump()
        return bool(flag)

    def wait_any(self, reqs: list[MPI.Request]) -> int:
        """Complete one of the receives ``reqs`` (those completed before are
        ``MPI.REQUEST_NULL`` now); its index."""
        found = [MPI.UNDEFINED]

        def done() -> bool:
            found[0], flag = MPI.Request.Testany(reqs)
            return self._pumped(flag)

        with self.rec.mpi():
            poll(done)
        return found[0]

    def received(self, req: MPI.Request) -> int:
        """Complete the receive ``req``; the bytes it received (a variable codec's stream
        may be shorter than the buffer it was received into)."""
        status = MPI.Status()
        with self.rec.mpi():
            poll(lambda: self._pumped(req.Test(status)))
        return status.Get_count(MPI.BYTE)

    def sizes(self, used: int) -> list[int]:
        """Every rank's ``used`` (stream bytes), in rank order: one MPI_Allgather of an
        int64 (the size exchange of variable-size streams)."""
        mine = np.array([used], np.int64)
        every = np.empty(self.size, np.int64)
        with self.rec.mpi():
            self.comm.Allgather(mine, every)
        return [int(v) for v in every]

    def size_from(self, used: int, root: int) -> int:
        """``root``'s ``used`` on every rank: one MPI_Bcast of an int64."""
        value = np.array([used], np.int64)
        with self.rec.mpi():
            self.comm.Bcast(value, root=root)
        return int(value[0])

    def sizes_at(self, used: int, root: int) -> list[int]:
        """Every rank's ``used`` on ``root`` (an MPI_Gather of one int64; [] elsewhere)."""
        every = np.empty(self.size, np.int64) if self.rank == root else None
        with self.rec.mpi():
            self.comm.Gather(np.array([used], np.int64), every, root=root)
        return [int(v) for v in every] if every is not None else []

    def size_of_mine(self, used: list[int], root: int) -> int:
        """Rank r's ``used[r]`` from ``root`` (an MPI_Scatter of one int64 each; ``used``
        is read on ``root`` only)."""
        mine = np.empty(1, np.int64)
        with self.rec.mpi():
            self.comm.Scatter(np.array(used, np.int64) if self.rank == root else None, mine,
                              root=root)
        return int(mine[0])

    def waitall(self, reqs: list[MPI.Request]) -> None:
        if reqs:
            started = self._started(reqs)
            with self.rec.mpi():
                poll(lambda: MPI.Request.Testall(started))


def _nothing() -> None:
    pass


def _same(reqs: list[Any]) -> list[Any]:
    return reqs


def poll(done: Callable[[], bool], idle: bool = False) -> None:
    """Call ``done`` (an MPI test, which also drives MPI's progress) until it is true,
    offering the core to other processes between calls.

    MPI's own waits spin. Where a core is free the yield returns at once and
    this is the same busy poll; where ranks share cores (more ranks than
    cores, or simulated hosts on one machine) a waiting rank lets the codec
    of another one run instead of burning the core it needs. ``idle``: the
    wait is known to be long (a rank that waits for others' whole codec and
    network work): sleep between tests, 20 us at first, up to 200 us.
    """
    nap = 20e-6
    while not done():
        if idle:
            time.sleep(nap)
            nap = min(2 * nap, 200e-6)
        else:
            os.sched_yield()


def pieces_of(codec: Codec, count: int, dtype: Any, device: bool = False) -> int:
    """Into how many pieces of about :data:`PIECE_BYTES` wire bytes (``device``:
    :data:`DEVICE_PIECE_BYTES`) ``count`` values are cut (a variable codec's wire bytes:
    its upper bound over :data:`VARIABLE_RATIO`)."""
    wire = codec.stream_nbytes(count, np.dtype(dtype)) if count else 0
    if codec.variable:
        wire //= VARIABLE_RATIO
    blocks = -(-count // ALIGN)
    size, most = (DEVICE_PIECE_BYTES, DEVICE_MAX_PIECES) if device else (PIECE_BYTES, MAX_PIECES)
    return max(1, min(most, blocks, round(wire / size)))


def pieces(ctx: Ctx, count: int, dtype: Any) -> tuple[list[int], list[int]]:
    """``count`` values cut into :func:`pieces_of` pieces.

    Returns (counts, displacements) as :func:`split` does. Depends only on
    the count, the dtype and the codec, so every rank cuts a chunk the same
    way; the codecs code each block on its own, so the decoded values do
    not depend on the cut.
    """
    k = pieces_of(ctx.codec, count, dtype, bool(ctx.device_pieces))
    return split(count, k, _align(ctx.codec, count // k))


def _align(codec: Codec, per_piece: int) -> int:
    """Where pieces may start: every :data:`ALIGN` values, and for a codec that predicts
    across a field's dimensions (errbound's ``shape``) at whole rows, or planes where a
    piece holds two or more, so that each piece is a slab of the field."""
    shape = getattr(codec, "shape", None)
    if not isinstance(shape, tuple) or len(shape) < 2:
        return ALIGN
    unit = shape[-1]
    if len(shape) >= 3 and per_piece >= 2 * shape[-1] * shape[-2]:
        unit = shape[-1] * shape[-2]
    return math.lcm(ALIGN, unit)


def offsets(sizes: list[int]) -> list[int]:
    """Where each of ``sizes`` starts when they lie one after the other (from 0)."""
    out, at = [], 0
    for s in sizes:
        out.append(int(at))
        at += s
    return out


def split(n: int, parts: int, align: int = ALIGN) -> tuple[list[int], list[int]]:
    """``n`` values in ``parts`` contiguous chunks whose starts are multiples of ``align``.

    Returns (counts, displacements); chunks differ by at most ``align``
    values and trailing chunks may be empty when ``n`` is small.
    """
    blocks = -(-n // align)
    base, extra = divmod(blocks, parts)
    counts, displs, start = [], [], 0
    for i in range(parts):
        c = min((base + (i < extra)) * align, n - start)
        counts.append(max(c, 0))
        displs.append(start)
        start += max(c, 0)
    return counts, displs


class PieceLayout:
    """Where each piece of each chunk lies, in values and in wire bytes: chunk ``i`` of
    ``counts[i]`` values from ``displs[i]`` cut by :func:`pieces`, its pieces' streams one
    after the other at their upper bounds (the ring's chunks; the chain's one buffer)."""

    def __init__(self, ctx: Ctx, counts: list[int], displs: list[int], dtype: Any) -> None:
        self.values: list[list[tuple[int, int]]] = []  # chunk -> [(start, count)] in the buffer
        # chunk -> [(offset, nbytes)] in the chunk's stream
        self.wire: list[list[tuple[int, int]]] = []
        self.span: list[int] = []  # chunk -> wire bytes of all its pieces
        for count, displ in zip(counts, displs, strict=True):
            pc, pd = pieces(ctx, count, dtype)
            self.values.append([(displ + d, c) for c, d in zip(pc, pd, strict=True)])
            sizes = [ctx.nbytes(c, dtype) for c in pc]
            offs = offsets(sizes)
            self.wire.append(list(zip(offs, sizes, strict=True)))
            self.span.append(sum(sizes))

    def piece(self, streams: Any, base: int, chunk: int, j: int) -> Any:
        off, nb = self.wire[chunk][j]
        return streams[base + off : base + off + nb]
