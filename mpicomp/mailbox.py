"""Messages a probe took out of MPI's queue to read them, held until a receive takes them.

A compressed message is a frame (:mod:`mpicomp.frame_format`) whose element count and
dtype sit in its header, at its end: a probe cannot report them without
receiving the message. So the communicator's ``Probe``, ``Iprobe``,
``Mprobe`` and ``Improbe`` receive a message of odd length (every frame,
and the rare plain message of an odd number of bytes) into host memory and
hold it here, described (:class:`Held`); the communicator's receives
(``Recv``, ``Irecv``, ``Sendrecv``, the messages of ``Mprobe``) take a held
message that matches their source and tag before asking MPI. MPI does not let
the messages from one sender overtake each other, and a held message was
taken before any that is still queued from its sender, so matching held
messages first keeps MPI's order. While a communicator holds messages, its
compiled receive shortcut is off (every receive runs the Python method, which
looks here first).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from . import frame_format
from .codecs import Codec

__all__ = ["Held", "Mailbox", "copy_into_spec", "take_message"]


@dataclasses.dataclass
class Held:
    """One message received early: its envelope, its bytes and, for a frame, what it holds."""

    source: int
    tag: int
    data: np.ndarray  #: the whole message, as bytes
    codec: Codec | None = None  #: None: not a frame (plain bytes)
    count: int = 0
    dtype: np.dtype | None = None

    def fill(self, status: MPI.Status | None) -> None:
        """Describe the message in ``status`` as MPI describes a plain message: its source,
        tag and count (a frame's: its values in their own datatype)."""
        if status is None:
            return
        status.source = self.source
        status.tag = self.tag
        status.error = MPI.SUCCESS
        status.Set_cancelled(False)
        if self.codec is None:
            status.Set_elements(MPI.BYTE, self.data.size)
        else:
            status.Set_elements(MPI._typedict[self.dtype.char], self.count)


class Mailbox:
    """The held messages of one communicator, in the order they were taken from MPI.

    ``on_change(holding)`` is told when the mailbox becomes non-empty or empty
    (the communicator turns its compiled receive shortcut off and on).
    """

    def __init__(self, on_change: Callable[[bool], None]) -> None:
        self._held: list[Held] = []
        self._on_change = on_change

    def __bool__(self) -> bool:
        return bool(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def match(self, source: int, tag: int) -> Held | None:
        """The first held message a receive from ``source`` with ``tag`` would match."""
        for held in self._held:
            if (source in (MPI.ANY_SOURCE, held.source)
                    and tag in (MPI.ANY_TAG, held.tag)):
                return held
        return None

    def take(self, source: int, tag: int) -> Held | None:
        """:meth:`match`, removed from the mailbox."""
        held = self.match(source, tag)
        if held is not None:
            self._held.remove(held)
            if not self._held:
                self._on_change(False)
        return held

    def hold(self, held: Held) -> Held:
        """Keep ``held`` (after every message held before it)."""
        self._held.append(held)
        if len(self._held) == 1:
            self._on_change(True)
        return held


def take_message(message: MPI.Message, status: MPI.Status) -> Held:
    """Receive a matched message (``status``: its probe's) into host bytes and read it: a
    frame (odd length, valid header) is described by its header, anything else is held
    as plain bytes."""
    data = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
    source, tag = status.source, status.tag
    message.Recv([data, MPI.BYTE], status)
    held = Held(source, tag, data)
    if frame_format.is_frame_length(data.size):
        try:
            held.codec, held.count, held.dtype, _ = frame_format.parse(data)
        except frame_format.FrameError:
            pass  # plain bytes of an odd length
    return held


_SELF: list[MPI.Intracomm] = []


def copy_into_spec(data: np.ndarray, spec: Any) -> None:
    """Copy the bytes ``data`` into the memory a buffer spec addresses, through its datatype
    (a derived one with gaps too), as a receive would: MPI raises ``MPI.Exception``
    (``ERR_TRUNCATE``) when they do not fit. Goes through a private duplicate of
    ``MPI.COMM_SELF``."""
    if not _SELF:
        _SELF.append(MPI.COMM_SELF.Dup())
    me = _SELF[0]
    req = me.Irecv(spec, 0, 0)
    me.Send([data, MPI.BYTE], 0, 0)
    req.Wait()
