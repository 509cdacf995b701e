"""Probe, Iprobe, Mprobe and Improbe: statuses that describe the message, not its frame.

MPI's probes see a compressed message as its frame: ``Get_count(MPI.FLOAT)``
would be ``MPI_UNDEFINED`` and a matched message's ``Recv`` would write the
frame's bytes into the buffer. A message of even length is never a frame,
so its probe is MPI's own and its status already true. A message of odd
length (long enough to be a frame) is taken out of MPI's queue and held (:mod:`mpicomp.mailbox`), so
that the status can say what the frame holds (its count, in its own
datatype) and a later receive of the same source and tag decodes it; a
matched probe of one returns a :class:`HeldMessage`, whose ``Recv`` and
``Irecv`` decode it into the buffer.

mpi4py's lowercase methods (``recv``, ``irecv``, ``probe``, ``iprobe``,
``mprobe``, ``improbe``, ``sendrecv``: pickled objects) call MPI themselves
and would not see a held message (a pickle of odd length, taken by an
uppercase probe). While messages are held, the communicator carries
:func:`lowercase` versions of them as instance attributes, which take a
matching held message first and otherwise call mpi4py's own; with nothing
held they are removed, and mpi4py's methods run at their own cost.
"""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from .. import frame_format
from ..mailbox import Held, take_message
from ..pipeline import Pipeline
from ..requests import Request
from . import point_to_point

__all__ = ["LOWERCASE", "HeldMessage", "improbe", "iprobe", "lowercase", "mprobe", "probe",
           "probed"]

#: mpi4py's lowercase methods that must see held messages
LOWERCASE = ("recv", "irecv", "probe", "iprobe", "mprobe", "improbe", "sendrecv")


def probe(pipeline: Pipeline, source: int, tag: int, status: MPI.Status | None) -> bool:
    """``comm.Probe``: wait for a matching message and describe it in ``status``."""
    held = pipeline.mailbox.match(source, tag)
    if held is None:
        st = status if status is not None else MPI.Status()
        MPI.Intracomm.Probe(pipeline.comm, source, tag, st)
        return probed(pipeline, st, status)
    held.fill(status)
    return True


def iprobe(pipeline: Pipeline, source: int, tag: int, status: MPI.Status | None) -> bool:
    """``comm.Iprobe``: whether a matching message is there (described in ``status``)."""
    held = pipeline.mailbox.match(source, tag)
    if held is None:
        st = status if status is not None else MPI.Status()
        if not MPI.Intracomm.Iprobe(pipeline.comm, source, tag, st):
            return False
        return probed(pipeline, st, status)
    held.fill(status)
    return True


def probed(pipeline: Pipeline, st: MPI.Status, status: MPI.Status | None) -> bool:
    """After MPI's probe found a message (``st``): one that may be a frame is taken out of
    MPI's queue and held, and ``status`` describes what it holds (else ``st``, MPI's own
    description, stands). True, the probe's answer."""
    held = _held_if_odd(pipeline, st)
    if held is not None:
        held.fill(status)
    return True


def mprobe(pipeline: Pipeline, source: int, tag: int, status: MPI.Status | None) -> MPI.Message:
    """``comm.Mprobe``: the next matching message, which no other receive can take."""
    held = pipeline.mailbox.take(source, tag)
    if held is None:
        st = status if status is not None else MPI.Status()
        message = MPI.Intracomm.Mprobe(pipeline.comm, source, tag, st)
        if not _odd(st):
            return message
        held = take_message(message, st)
    held.fill(status)
    return HeldMessage(pipeline, held)


def improbe(pipeline: Pipeline, source: int, tag: int,
            status: MPI.Status | None) -> MPI.Message | None:
    """``comm.Improbe``: :func:`mprobe` if a matching message is there, else None."""
    held = pipeline.mailbox.take(source, tag)
    if held is None:
        st = status if status is not None else MPI.Status()
        message = MPI.Intracomm.Improbe(pipeline.comm, source, tag, st)
        if message is None:
            return None
        if not _odd(st):
            return message
        held = take_message(message, st)
    held.fill(status)
    return HeldMessage(pipeline, held)


class HeldMessage(MPI.Message):
    """A matched message that its probe received already (to read a frame's count):
    ``Recv`` and ``Irecv`` deliver it into a buffer, decoding a frame, once."""

    _pipeline: Pipeline
    _held: Held | None

    def __new__(cls, pipeline: Pipeline, held: Held) -> HeldMessage:
        self = super().__new__(cls)
        self._pipeline = pipeline
        self._held = held
        return self

    def __bool__(self) -> bool:
        return self._held is not None

    def _take(self) -> Held:
        held, self._held = self._held, None
        if held is None:
            raise ValueError("this message was received already (a matched message is "
                             "received once)")
        return held

    def Recv(self, buf: Any, status: MPI.Status | None = None) -> None:  # noqa: N802
        point_to_point.deliver(self._pipeline, "Recv", self._take(), buf, status)

    def Irecv(self, buf: Any) -> MPI.Request:  # noqa: N802
        return point_to_point.deliver_request(self._pipeline, self._take(), buf)

    def recv(self, status: MPI.Status | None = None) -> Any:
        held = self._take()
        held.fill(status)
        return _unpickled(held)

    def irecv(self) -> MPI.Request:
        return _ObjectRequest.of(_unpickled(self._take()))


def _odd(st: MPI.Status) -> bool:
    """Whether the probed message may be a frame (an odd length, long enough)."""
    return frame_format.is_frame_length(st.Get_count(MPI.BYTE))


def _held_if_odd(pipeline: Pipeline, st: MPI.Status) -> Held | None:
    """After a probe found a message (``st``): None for an even one (``st`` describes it
    already); an odd one is taken out of MPI's queue by a matched probe of its source and
    tag (the same message: MPI keeps one sender's order) and held."""
    if not _odd(st):
        return None
    message = MPI.Intracomm.Mprobe(pipeline.comm, st.source, st.tag, st)
    return pipeline.mailbox.hold(take_message(message, st))


def lowercase(pipeline: Pipeline) -> dict[str, Any]:
    """mpi4py's lowercase receives and probes of ``pipeline.comm``, taking held messages
    first (the instance attributes the communicator carries while it holds messages)."""
    comm, mailbox = pipeline.comm, pipeline.mailbox
    base = MPI.Intracomm

    def recv(buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
             status: MPI.Status | None = None) -> Any:
        held = mailbox.take(source, tag)
        if held is None:
            return base.recv(comm, buf, source, tag, status)
        held.fill(status)
        return _unpickled(held)

    def irecv(buf: Any = None, source: int = MPI.ANY_SOURCE,
              tag: int = MPI.ANY_TAG) -> MPI.Request:
        held = mailbox.take(source, tag)
        if held is None:
            return base.irecv(comm, buf, source, tag)
        return _ObjectRequest.of(_unpickled(held))

    def probe_(source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
               status: MPI.Status | None = None) -> bool:
        held = mailbox.match(source, tag)
        if held is None:
            return base.probe(comm, source, tag, status)
        held.fill(status)
        return True

    def iprobe_(source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
                status: MPI.Status | None = None) -> bool:
        held = mailbox.match(source, tag)
        if held is None:
            return base.iprobe(comm, source, tag, status)
        held.fill(status)
        return True

    def mprobe_(source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
                status: MPI.Status | None = None) -> MPI.Message:
        held = mailbox.take(source, tag)
        if held is None:
            return base.mprobe(comm, source, tag, status)
        held.fill(status)
        return HeldMessage(pipeline, held)

    def improbe_(source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,
                 status: MPI.Status | None = None) -> MPI.Message | None:
        held = mailbox.take(source, tag)
        if held is None:
            return base.improbe(comm, source, tag, status)
        held.fill(status)
        return HeldMessage(pipeline, held)

    def sendrecv(sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG,
                 status: MPI.Status | None = None) -> Any:
        if mailbox.match(source, recvtag) is None:
            return base.sendrecv(comm, sendobj, dest, sendtag, recvbuf, source, recvtag, status)
        req = base.isend(comm, sendobj, dest, sendtag)
        obj = recv(recvbuf, source, recvtag, status)
        req.wait()
        return obj

    return {"recv": recv, "irecv": irecv, "probe": probe_, "iprobe": iprobe_,
            "mprobe": mprobe_, "improbe": improbe_, "sendrecv": sendrecv}


def _unpickled(held: Held) -> Any:
    """The object a held plain message pickles (a compressed frame holds a buffer's values,
    which only the uppercase receives take)."""
    if held.codec is not None:
        raise TypeError(
            f"the message from rank {held.source} (tag {held.tag}) is {held.count} compressed "
            f"{held.dtype} values: receive it with Recv(buf), not recv()")
    return MPI.pickle.loads(held.data.tobytes())


class _ObjectRequest(Request):
    """A complete request of a lowercase ``irecv`` that a held message served."""

    _obj: Any = None

    @classmethod
    def of(cls, obj: Any) -> _ObjectRequest:
        req = cls.start(lambda: None)
        req._obj = obj
        return req

    def wait(self, status: MPI.Status | None = None) -> Any:  # type: ignore[override]
        self.Wait(status)
        return self._obj

    def test(self, status: MPI.Status | None = None) -> tuple[bool, Any]:  # type: ignore[override]
        done = self.Test(status)
        return done, (self._obj if done else None)
