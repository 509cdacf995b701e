"""Send, Isend, Recv, Irecv and Sendrecv: one self-describing compressed frame per message.

A sender screens its message as a collective would (:mod:`mpicomp.decision`,
without the model: under the codec ``auto`` messages stay plain) and checks
its own values (there is no one to agree with); a message that passes goes
as a frame (:mod:`mpicomp.p2p`), never longer than the plain message. A
receiver cannot know what its sender did: a float buffer may receive a
frame, whatever this side's policy, and the message's length says whether
it is one.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from .. import p2p, shortcut, tolerance
from ..backend import plain as plain_mpi
from ..backend.device import DeviceMemory, DevicePools
from ..backend.host import HostMemory, Scratch
from ..buffers import Buf, parse
from ..decision import P2P_AUTO, local_agreement
from ..kernels import cuda_runtime as cuda
from ..pipeline import Pipeline
from ..requests import Request
from ..stats import Recorder, below_threshold

__all__ = ["irecv", "received_frame", "recv", "send", "sendrecv", "sendrecv_received"]


def send(pipeline: Pipeline, name: str, fn: Callable[..., Any], buf: Any, dest: int, tag: int,
         settings: dict[str, Any]) -> Any:
    """``comm.Send`` or ``comm.Isend`` (``fn``: mpi4py's method); returns what ``fn`` does."""
    msg, rec = _frame_for(pipeline, name, buf, settings)
    result = _send_on(pipeline, fn, rec, (msg, dest, tag))
    rec.commit()
    return result


def recv(pipeline: Pipeline, buf: Any, source: int, tag: int, status: MPI.Status | None,
         settings: dict[str, Any]) -> None:
    """``comm.Recv``."""
    pipeline.decision.policy(settings)  # validates the settings; the sender's codec decides
    b = parse(buf, "buf")
    rec = pipeline.recorder("Recv", b.nbytes)
    if not b.compressible:
        return pipeline.plain(rec, b.reason, MPI.Intracomm.Recv, (buf, source, tag, status),
                                    bufs=(b,), sent=0)
    st = status if status is not None else MPI.Status()
    memory = _memory(pipeline, b.on_device)
    if not b.on_device:
        # host memory: received as bytes straight into the buffer (a frame is never
        # longer than the plain message), a frame then decoded from a copy
        with rec.mpi():
            MPI.Intracomm.Recv(pipeline.comm, [b.data().view(np.uint8), MPI.BYTE], source, tag, st)
        return _take_received(b, rec, st, memory)
    with rec.mpi():
        msg = MPI.Intracomm.Mprobe(pipeline.comm, source, tag, st)
    nbytes = st.Get_count(MPI.BYTE)

    def receive(_comm: Any, into: Any, st_: MPI.Status) -> None:
        msg.Recv(into, st_)

    if not p2p.is_frame_length(nbytes):
        rec.plain("sender sent plain data")
        with rec.mpi():
            _, where = plain_mpi.call(receive, None, (buf, st), written=lambda i: i == 0)
        rec.where(where)
    else:
        frame = memory.fresh_wire(nbytes)
        with rec.mpi():
            plain_mpi.call(receive, None, ([frame, MPI.BYTE], st))
        _unframe(frame, b, rec, st, memory)
    rec.commit()


def received_frame(pipeline: Pipeline, buf: Any, status: MPI.Status) -> None:
    """Decode the frame that the compiled ``Recv`` shortcut received as bytes into
    ``buf`` (a NumPy array; a message of odd length)."""
    b = parse(buf, "buf")
    rec = pipeline.recorder("Recv", b.nbytes)
    _take_received(b, rec, status, _memory(pipeline, False))


def irecv(pipeline: Pipeline, buf: Any, source: int, tag: int,
          settings: dict[str, Any]) -> MPI.Request:
    """``comm.Irecv``: posted now (MPI keeps its matching order), decoded when it completes."""
    pol = pipeline.decision.policy(settings)
    b = parse(buf, "buf")
    rec = pipeline.recorder("Irecv", b.nbytes)
    if not (pol.enabled and b.compressible) or b.nbytes < pol.threshold or pol.auto:
        why = "codec none" if not pol.enabled else (
            b.reason or (below_threshold(b.nbytes, pol.threshold)
                         if b.nbytes < pol.threshold else
                         P2P_AUTO))
        return pipeline.plain(rec, why, MPI.Intracomm.Irecv, (buf, source, tag),
                                    bufs=(b,), sent=0)
    # a frame is never longer than the plain message, so the plain size is enough
    memory = _memory(pipeline, b.on_device, own_pools=True)
    landing = memory.fresh_wire(b.nbytes)
    status = MPI.Status()
    with rec.mpi():
        inner, _ = plain_mpi.call(MPI.Intracomm.Irecv, pipeline.comm,
                                  ([landing, MPI.BYTE], source, tag))
    where = cuda.capture() if b.on_device else (None, None)

    def work() -> None:
        inner.Wait(status)
        nbytes = status.Get_count(MPI.BYTE)
        with cuda.using_stream(*where):
            if p2p.is_frame_length(nbytes):
                _unframe(landing[:nbytes], b, rec, status, memory)
            else:
                rec.plain("sender sent plain data")
                rec.where(memory.label)
                target = b.array.view(np.uint8)[:nbytes]
                memory.copy(target, landing[:nbytes])
            # complete only when the data is in place (and before this request's
            # landing and stage buffers go back to the pool)
            memory.synchronize()
        rec.commit()

    return Request.start(work)


def sendrecv(pipeline: Pipeline, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int,
             recvtag: int, status: MPI.Status | None, settings: dict[str, Any]) -> None:
    """``comm.Sendrecv``: the send posted first, then the receive."""
    # a receive buffer that Recv refuses is refused before anything is sent, as
    # mpi4py's Sendrecv refuses it (a send posted first would never be matched)
    parse(recvbuf, "recvbuf")
    req = send(pipeline, "Sendrecv", MPI.Intracomm.Isend, sendbuf, dest, sendtag, settings)
    pipeline.comm.Recv(recvbuf, source, recvtag, status, **settings)  # (the compiled shortcut's)
    req.Wait()


def sendrecv_received(pipeline: Pipeline, sendbuf: Any, dest: int, sendtag: int,
                      recvbuf: np.ndarray, source: int, recvtag: int,
                      status: MPI.Status | None) -> None:
    """Sendrecv's fast path (its send plain by size): received as bytes, as the compiled
    ``Recv`` does, a frame (odd length) decoded in place."""
    st = status if status is not None else MPI.Status()
    MPI.Intracomm.Sendrecv(pipeline.comm, sendbuf, dest, sendtag, (recvbuf, MPI.BYTE), source,
                           recvtag, st)
    if p2p.is_frame_length(st.Get_count(MPI.BYTE)):
        return received_frame(pipeline, recvbuf, st)
    return pipeline.stats.fast_plain("Recv", recvbuf.nbytes, shortcut.RECEIVED_PLAIN)


def _memory(pipeline: Pipeline, on_device: bool,
            own_pools: bool = False) -> HostMemory | DeviceMemory:
    """Memory for a point-to-point call (device: the current stream; ``own_pools`` for
    work finished on another thread)."""
    if not on_device:
        return HostMemory(Scratch())
    if own_pools:
        pools = DevicePools()
    else:
        if pipeline.p2p_pools is None:
            pipeline.p2p_pools = DevicePools()
        pools = pipeline.p2p_pools
    return DeviceMemory(pools)


#: why a message goes plain when its frame would not be shorter
NO_GAIN = "no gain (compressed frame not smaller than the data)"


def _frame_for(pipeline: Pipeline, name: str, buf: Any,
               settings: dict[str, Any]) -> tuple[Any, Recorder]:
    """The message to send: a compressed frame, or ``buf`` itself (plain)."""
    pol = pipeline.decision.policy(settings)
    b = parse(buf, "buf")
    rec = pipeline.recorder(name, b.nbytes)
    reason = pipeline.decision.screen(pol, [b], b.nbytes, collective=False)
    memory = _memory(pipeline, b.on_device)
    max_abs = 0.0
    if reason is None:
        reason, max_abs = local_agreement(pol, b.data(), memory)
    codec = pol.codec
    if reason is None and pol.tolerance is not None:  # one encode: the bound is the tolerance
        codec, rec.error_bound, bound = tolerance.codec_for(pol, max_abs, 1)
    if (reason is None and not codec.variable
            and p2p.frame_nbytes(codec, b.data()) >= b.nbytes):
        # never longer than the plain message: receivers size their landing buffers by it
        reason = NO_GAIN
    frame = None
    if reason is None:
        with rec.codec():
            frame = p2p.build(codec, b.data(), memory)
        if frame.nbytes >= b.nbytes:  # a variable codec's stream, known once encoded
            reason = NO_GAIN
    if reason is not None:
        rec.plain(reason)
        rec.sent(b.nbytes)
        return buf, rec
    memory.synchronize()  # MPI reads the frame next
    rec.where(memory.label)
    rec.compressed("frame", bound if pol.tolerance is not None else codec.codec_id)
    rec.sent(frame.nbytes)
    return frame, rec


def _send_on(pipeline: Pipeline, fn: Callable[..., Any], rec: Recorder,
             args: tuple[Any, ...]) -> Any:
    with rec.mpi():
        result, where = plain_mpi.call(fn, pipeline.comm, args)
    if rec.path == "plain":
        rec.where(where)
    return result


def _take_received(b: Buf, rec: Recorder, status: MPI.Status,
                   memory: HostMemory | DeviceMemory) -> None:
    """A message received as bytes into host buffer ``b``: decode it there if it is a
    frame (odd length), else count it as plain data."""
    nbytes = status.Get_count(MPI.BYTE)
    if b.compressible and p2p.is_frame_length(nbytes):
        _unframe(b.data().view(np.uint8)[:nbytes].copy(), b, rec, status, memory)
    else:
        rec.plain(shortcut.RECEIVED_PLAIN)
        rec.where("host")
    rec.commit()


def _unframe(frame: Any, b: Buf, rec: Recorder, status: MPI.Status,
             memory: HostMemory | DeviceMemory) -> None:
    """Decode a received frame into ``b``; the status then counts values, not frame bytes."""
    codec, count, dtype, stream = p2p.parse(frame)
    if dtype != b.dtype:
        raise TypeError(f"received {dtype} values into a {b.dtype} buffer")
    if count > b.count:
        raise ValueError(f"message of {count} values does not fit the receive buffer of {b.count}")
    with rec.codec():
        memory.decode(codec, stream, b.array[:count])
    status.Set_elements(dtlib.from_numpy_dtype(dtype), count)
    rec.where(memory.label)
    rec.compressed("frame", codec.codec_id)
