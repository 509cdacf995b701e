"""Send, Isend, Recv, Irecv, Sendrecv and the rest of point to point: one self-describing
compressed frame per message.

A sender screens its message as a collective would (:mod:`mpicomp.decision.screen`,
without the model: under the codec ``auto`` messages stay plain) and checks
its own values (there is no one to agree with); a message that passes goes
as a frame (:mod:`mpicomp.frame_format`), never longer than the plain message. A
receiver cannot know what its sender did: a float buffer may receive a
frame, whatever this side's policy, and the message's length says whether
it is one. A message a probe took out of MPI's queue (:mod:`mpicomp.mailbox`)
is taken by the first receive it matches, before MPI's queue.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import cuda_runtime as cuda
from .. import frame_format, tolerance
from ..backend import placement
from ..backend import plain as plain_mpi
from ..backend.device import DeviceMemory, DevicePools
from ..backend.host import HostMemory, Scratch
from ..buffers import Buf, gather, parse
from ..decision.agreement import local_agreement
from ..fastpath.methods import RECEIVED_PLAIN
from ..mailbox import Held, copy_into_spec, take_message
from ..pipeline import Pipeline
from ..requests import Request
from ..settings import P2P_AUTO
from ..stats import Recorder, below_threshold

__all__ = ["deliver", "deliver_request", "irecv", "isendrecv", "received_frame", "recv", "send",
           "sendrecv", "sendrecv_replace"]


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
    pipeline.settings.for_call(settings)  # validates the settings; the sender's codec decides
    if pipeline.mailbox:
        held = pipeline.mailbox.take(source, tag)
        if held is not None:
            return deliver(pipeline, "Recv", held, buf, status)
    b = parse(buf, "buf")
    rec = pipeline.recorder("Recv", b.nbytes)
    if b.veto and not b.on_device:
        # a float datatype with gaps (or not the array's dtype): a frame is received as
        # bytes, decoded, then laid out through the datatype by MPI
        st = status if status is not None else MPI.Status()
        with rec.mpi():
            message = MPI.Intracomm.Mprobe(pipeline.comm, source, tag, st)
        if frame_format.is_frame_length(st.Get_count(MPI.BYTE)):
            return deliver(pipeline, "Recv", take_message(message, st), buf, status)
        return pipeline.plain(rec, b.reason, _matched_recv(message), (buf, st), bufs=(b,),
                              sent=0)
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

    if not frame_format.is_frame_length(nbytes):
        rec.plain(RECEIVED_PLAIN)
        with rec.mpi():
            _, where = plain_mpi.run(receive, None, (buf, st), written=lambda i: i == 0)
        rec.where(where)
    else:
        frame = memory.fresh_wire(nbytes)
        with rec.mpi():
            plain_mpi.run(receive, None, ([frame, MPI.BYTE], st))
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
    pol = pipeline.settings.for_call(settings)
    if pipeline.mailbox:
        held = pipeline.mailbox.take(source, tag)
        if held is not None:
            return deliver_request(pipeline, held, buf)
    b = parse(buf, "buf")
    rec = pipeline.recorder("Irecv", b.nbytes)
    if b.veto and not b.on_device:  # as Recv does it, on a thread of its own
        status = MPI.Status()

        def receive() -> None:
            pipeline.comm.Recv(buf, source, tag, status)

        return Request.start(receive, status=status)
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
        inner, _ = plain_mpi.run(MPI.Intracomm.Irecv, pipeline.comm,
                                  ([landing, MPI.BYTE], source, tag))
    where = cuda.capture() if b.on_device else (None, None)

    def work() -> None:
        inner.Wait(status)
        nbytes = status.Get_count(MPI.BYTE)
        with cuda.using_stream(*where):
            if frame_format.is_frame_length(nbytes):
                _unframe(landing[:nbytes], b, rec, status, memory)
            else:
                rec.plain(RECEIVED_PLAIN)
                rec.where(memory.label)
                target = b.array.view(np.uint8)[:nbytes]
                memory.copy(target, landing[:nbytes])
                status.Set_elements(MPI.BYTE, nbytes)
            # complete only when the data is in place (and before this request's
            # landing and stage buffers go back to the pool)
            memory.synchronize()
        rec.commit()

    return Request.start(work, status=status)


def sendrecv(pipeline: Pipeline, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int,
             recvtag: int, status: MPI.Status | None, settings: dict[str, Any]) -> None:
    """``comm.Sendrecv``: the send posted first, then the receive."""
    # a receive buffer that Recv refuses is refused before anything is sent, as
    # mpi4py's Sendrecv refuses it (a send posted first would never be matched)
    parse(recvbuf, "recvbuf")
    req = send(pipeline, "Sendrecv", MPI.Intracomm.Isend, sendbuf, dest, sendtag, settings)
    pipeline.comm.Recv(recvbuf, source, recvtag, status, **settings)  # (the compiled shortcut's)
    req.Wait()


def sendrecv_replace(pipeline: Pipeline, buf: Any, dest: int, sendtag: int, source: int,
                     recvtag: int, status: MPI.Status | None) -> None:
    """``comm.Sendrecv_replace`` off the fast path (the compiled method takes a NumPy
    array whose send goes plain by size itself): the buffer's values sent from a copy
    (compressed as a ``Send`` is) while the message received into it is decoded when it
    is a frame. A buffer no frame can arrive in (other dtypes, ``None`` for
    ``MPI.PROC_NULL``, memory mpicomp must not touch) goes to mpi4py's method as it is.
    """
    comm = pipeline.comm
    if not (pipeline.mailbox or _takes_frames(buf)):
        return MPI.Intracomm.Sendrecv_replace(comm, buf, dest, sendtag, source, recvtag, status)
    req = comm.Isend(_copy_of(buf), dest, sendtag)
    comm.Recv(buf, source, recvtag, status)
    req.Wait()
    return None


def isendrecv(pipeline: Pipeline, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any,
              source: int, recvtag: int, replace: bool = False) -> MPI.Request:
    """``comm.Isendrecv`` (``replace``: ``Isendrecv_replace`` of ``recvbuf``): a send and a
    receive as ``Isend`` and ``Irecv`` make them, one request for both; its status is the
    receive's. A receive buffer no frame can arrive in goes to mpi4py's method as it is."""
    comm = pipeline.comm
    if not (pipeline.mailbox or _takes_frames(recvbuf)):
        if replace:
            return MPI.Intracomm.Isendrecv_replace(comm, recvbuf, dest, sendtag, source,
                                                   recvtag)
        return MPI.Intracomm.Isendrecv(comm, sendbuf, dest, sendtag, recvbuf, source, recvtag)
    send = _copy_of(recvbuf) if replace else sendbuf
    send_req = (MPI.Intracomm.Isend(comm, send, dest, sendtag) if send is None
                else comm.Isend(send, dest, sendtag))
    recv_req = comm.Irecv(recvbuf, source, recvtag)
    status = MPI.Status()

    def both() -> None:
        recv_req.Wait(status)
        send_req.Wait()

    return Request.start(both, status=status)


def _takes_frames(buf: Any) -> bool:
    """Whether a compressed frame can arrive in receive buffer ``buf`` and be decoded there:
    float values mpicomp may touch (or lay out through a datatype with gaps, on the host).
    A spec mpicomp cannot read goes to mpi4py, which judges it."""
    if buf is None:
        return False
    try:
        b = parse(buf, "buf")
    except (TypeError, ValueError):
        return False
    return b.compressible or (bool(b.veto) and b.place is placement.Place.HOST)


def deliver(pipeline: Pipeline, name: str, held: Held, buf: Any,
            status: MPI.Status | None) -> None:
    """Receive ``held`` (a message a probe took out of MPI) into ``buf``: a frame decoded
    into it, plain bytes copied through its spec; ``status`` describes the message."""
    b = parse(buf, "buf")
    rec = pipeline.recorder(name, b.nbytes)
    st = status if status is not None else MPI.Status()
    held.fill(st)
    if held.codec is None:
        rec.plain(RECEIVED_PLAIN)
        with rec.mpi():
            copy_into_spec(held.data, buf)
        rec.where("host")
        rec.commit()
        return
    if b.compressible:
        memory = _memory(pipeline, b.on_device)
        frame = held.data
        if b.on_device:
            frame = memory.fresh_wire(held.data.size)
            memory.copy(frame, held.data)
        _unframe(frame, b, rec, st, memory)
        memory.synchronize()
        rec.commit()
        return
    if not b.veto or b.on_device:
        raise TypeError(
            f"{name}: the message is {held.count} compressed {held.dtype} values, which "
            f"cannot be decoded into this buffer ({b.reason})")
    # a float datatype with gaps: decoded into a dense copy, laid out through it by MPI
    if held.dtype != b.dtype:
        raise TypeError(f"{name}: received {held.dtype} values into a {b.dtype} buffer")
    values = np.empty(held.count, held.dtype)
    stream = frame_format.parse(held.data)[3]
    with rec.codec():
        _memory(pipeline, False).decode(held.codec, stream, values)
    with rec.mpi():
        copy_into_spec(values.view(np.uint8), buf)
    rec.where("host")
    rec.compressed("frame", held.codec.codec_id)
    rec.commit()


def deliver_request(pipeline: Pipeline, held: Held, buf: Any) -> Request:
    """:func:`deliver` as a nonblocking receive: done at once, its request complete."""
    status = MPI.Status()
    deliver(pipeline, "Irecv", held, buf, status)
    return Request.start(lambda: None, status=status)


def _copy_of(spec: Any) -> Any:
    """A buffer spec whose buffer is a copy of ``spec``'s (what a send in place sends)."""
    if isinstance(spec, (list, tuple)) and spec:
        return [_copy_array(spec[0]), *spec[1:]]
    return _copy_array(spec)


def _copy_array(obj: Any) -> Any:
    """A copy of a buffer: NumPy, a device buffer (a Numba device array, made on the current
    stream and waited for), or any host buffer mpi4py takes (a NumPy array of its format)."""
    if isinstance(obj, np.ndarray):
        return obj.copy(order="K")  # (memory order kept: MPI sends the memory as it lies)
    if cuda.is_device_array(obj) or cuda.cuda_interface(obj):
        src = cuda.as_device(obj, "buf")
        out = cuda.empty(src.size, src.dtype)
        stream = cuda.current_stream()
        cuda.copy_to_device(out, src, stream)
        stream.synchronize()
        return out
    try:
        return np.array(memoryview(obj))
    except TypeError:  # a host DLPack object: its bytes, the spec's datatype reads them
        return np.array(memoryview(MPI.buffer(obj)))


def _matched_recv(message: MPI.Message) -> Callable[..., Any]:
    """A plain receive of a matched ``message`` (called as ``fn(comm, buf, status)``)."""

    def receive(_comm: Any, buf: Any, status: MPI.Status) -> None:
        message.Recv(buf, status)

    return receive


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
    pol = pipeline.settings.for_call(settings)
    b = parse(buf, "buf")
    rec = pipeline.recorder(name, b.nbytes)
    reason = pipeline.screen.screen(pol, [b], b.nbytes, collective=False)
    memory = _memory(pipeline, b.on_device)
    max_abs = 0.0
    values = None
    if reason is None:
        # a datatype with gaps (or not the array's dtype): no peer has to agree, so the
        # values are gathered into a contiguous copy (host memory) or the message goes plain
        values = gather(b) if b.veto else b.data()
        reason = b.veto if values is None else None
    if reason is None:
        reason, max_abs = local_agreement(pol, values, memory)
    codec = pol.codec
    if reason is None and pol.tolerance is not None:  # one encode: the bound is the tolerance
        codec, rec.error_bound, bound = tolerance.codec_for(pol, max_abs, 1)
    if reason is None and codec.takes_field:  # (the array's own field; the frame names it)
        codec = codec.for_field(codec.field_of(b.shape, b.count))
    if (reason is None and not codec.variable
            and frame_format.frame_nbytes(codec, values) >= b.nbytes):
        # never longer than the plain message: receivers size their landing buffers by it
        reason = NO_GAIN
    frame = None
    if reason is None:
        with rec.codec():
            frame = frame_format.build(codec, values, memory)
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
        result, where = plain_mpi.run(fn, pipeline.comm, args)
    if rec.path == "plain":
        rec.where(where)
    return result


def _take_received(b: Buf, rec: Recorder, status: MPI.Status,
                   memory: HostMemory | DeviceMemory) -> None:
    """A message received as bytes into host buffer ``b``: decode it there if it is a
    frame (odd length), else count it as plain data."""
    nbytes = status.Get_count(MPI.BYTE)
    if b.compressible and frame_format.is_frame_length(nbytes):
        _unframe(b.data().view(np.uint8)[:nbytes].copy(), b, rec, status, memory)
    else:
        rec.plain(RECEIVED_PLAIN)
        rec.where("host")
    rec.commit()


def _unframe(frame: Any, b: Buf, rec: Recorder, status: MPI.Status,
             memory: HostMemory | DeviceMemory) -> None:
    """Decode a received frame into ``b``; the status then counts values, not frame bytes."""
    codec, count, dtype, stream = frame_format.parse(frame)
    if dtype != b.dtype:
        raise TypeError(f"received {dtype} values into a {b.dtype} buffer")
    if count > b.count:
        raise ValueError(f"message of {count} values does not fit the receive buffer of {b.count}")
    with rec.codec():
        memory.decode(codec, stream, b.array[:count])
    status.Set_elements(MPI._typedict[np.dtype(dtype).char], count)
    rec.where(memory.label)
    rec.compressed("frame", codec.codec_id)
