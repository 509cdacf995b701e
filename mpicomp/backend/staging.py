"""The staged path's copies: streams between device and pinned host memory, overlapped.

An MPI that is not CUDA-aware reads and writes host memory, so a staged
call (:class:`~mpicomp.backend.device.DeviceMemory` without ``direct``)
moves every piece's stream from the device stage its kernel wrote to a
pinned wire buffer for MPI, and every received piece back. :class:`Staging`
runs those copies on two streams of its own (:func:`mpicomp.cuda_runtime.copy_stream`:
one for the copies to the host, one for those to the device, which a GPU's
copy engines run at once), and the host waits only for the copies of the
bytes MPI is about to touch, not for the whole stream (a send of bytes whose
copy still runs waits for it without the host: ``backend.device.DeferredSend``):
a piece's copy and transfer go on while the next piece's kernels run, and a
received piece's copy and decode while the next receive completes.

Each pinned wire buffer of a thread's pool has a device *mirror* of its
size, and each piece's stage is the mirror's bytes at the piece's own
offset (:meth:`Staging.mirror`): pieces never share a stage, so one
piece's kernel cannot overwrite the stage another piece's copy still
reads. For every host range a copy touched, Staging keeps two fences
(:class:`mpicomp.cuda_runtime.Fence`): the copy's (MPI waits for it before
it reads or writes the range, a kernel before it writes the mirror) and
that of the last kernel that read the mirror (a copy waits for it before
it overwrites the mirror). The waits between the two streams are made on
the device (events), the host's only where MPI needs the bytes.

Wire buffers (pool names ``wire:*``) are the only host memory the staged
path's copies touch, and only through this class; any other host buffer
handed to MPI makes the call wait for both streams, as every MPI call did
before (:class:`~mpicomp.backend.device.MPIOnDevice`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .. import cuda_runtime as cuda
from .host import Scratch

__all__ = ["Staging", "WIRE"]

#: the name prefix of a pool's wire buffers (the only host memory the staging copies touch)
WIRE = "wire:"


@dataclasses.dataclass
class _Range:
    """A host range a staging copy touched, and the fences its two sides wait for."""

    start: int
    end: int
    #: the host memory and its stage (both kept alive until the fences are done: a pool
    #: that grows drops its old buffers, which a pending copy may still read)
    host: Any
    stage: Any
    #: the copy between the range and its mirror
    copy: cuda.Fence
    #: whether the copy writes the host range (to the host) or only reads it (to the device)
    writes_host: bool
    #: the last kernel that read the mirror (None: none since the copy)
    kernel: cuda.Fence | None = None

    def overlaps(self, start: int, end: int) -> bool:
        return self.start < end and start < self.end


def _span(host: np.ndarray) -> tuple[int, int]:
    start = int(host.__array_interface__["data"][0])
    return start, start + host.nbytes


class Staging:
    """One thread's staging copies (see the module docs), over its pools' wire buffers."""

    def __init__(self, device: Scratch, pinned: Scratch) -> None:
        self._device = device
        self._pinned = pinned
        self._streams: dict[str, Any] = {}
        self._ranges: list[_Range] = []
        self._sizes: dict[str, int] = {}  # each wire buffer's size when its mirror was made
        #: a mirror was just made: its memory may come from a pool that hands out blocks in
        #: the caller's stream's order, so the next copy waits for that stream's work first
        self._fresh = False

    def _stream(self, way: str) -> Any:
        """The stream of the copies ``way`` (``"host"``, ``"device"``), made at first use."""
        if way not in self._streams:
            self._streams[way] = cuda.copy_stream()
        return self._streams[way]

    def mirror(self, host: Any) -> Any | None:
        """The device stage of the wire bytes ``host`` (a slice of a pool's wire buffer): its
        mirror's bytes at the same offset; None for any other memory."""
        found = self._wire(host)
        if found is None:
            return None
        name, offset, size = found
        if self._sizes.get(name) != size:  # a wire buffer that grew: a new mirror; every
            self.synchronize()  # copy of the old ones done (the fences are by host address)
            self._sizes[name] = size
            self._fresh = True
        return self._device.get("mirror:" + name, size, np.uint8)[offset : offset + host.nbytes]

    def tracked(self, host: Any) -> bool:
        """Whether ``host`` is wire memory, whose copies this object fences."""
        return self._wire(host) is not None

    def _wire(self, host: Any) -> tuple[str, int, int] | None:
        """``(name, offset, size)`` of the pool's wire buffer ``host`` lies in, else None."""
        found = self._pinned.locate(host) if isinstance(host, np.ndarray) else None
        return found if found is not None and found[0].startswith(WIRE) else None

    # -- the copies ----------------------------------------------------------------
    def before_write(self, host: np.ndarray, stream: Any) -> None:
        """Make ``stream``'s next kernel, which writes ``host``'s mirror, wait for the copies
        that still read (or write) it."""
        start, end = _span(host)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.copy.wait_on(stream)

    def to_host(self, host: np.ndarray, stage: Any, stream: Any) -> None:
        """Enqueue ``host[:] = stage`` (its mirror) on the copies to the host, after the
        work ``stream`` holds now (the kernel that wrote the stage) and the copies that
        still touch ``host``."""
        copies = self._stream("host")
        cuda.Fence(stream).wait_on(copies)  # (a fresh mirror's pool order too)
        self._fresh = False
        start, end = _span(host)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.copy.wait_on(copies)
        cuda.copy_to_host(host, stage, copies)
        self._note(host, stage, cuda.Fence(copies), True)

    def to_device(self, stage: Any, host: np.ndarray, stream: Any) -> None:
        """Enqueue ``stage[:] = host`` on the copies to the device, after the kernels and
        copies that still read the stage, and make ``stream``'s later work wait for it."""
        copies = self._stream("device")
        if self._fresh:
            cuda.Fence(stream).wait_on(copies)
            self._fresh = False
        start, end = _span(host)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.copy.wait_on(copies)
                if r.kernel is not None:
                    r.kernel.wait_on(copies)
        cuda.copy_to_device(stage, host, copies)
        done = cuda.Fence(copies)
        done.wait_on(stream)
        self._note(host, stage, done, False)

    def read_by(self, host: np.ndarray, stream: Any) -> None:
        """Record that ``stream``'s work up to now reads ``host``'s mirror (a decode): a
        later copy into the mirror waits for it."""
        start, end = _span(host)
        fence = cuda.Fence(stream)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.kernel = fence

    # -- the host's waits ----------------------------------------------------------
    def wait_host(self, host: np.ndarray, reading: bool = False) -> None:
        """Block until the copies into or out of ``host`` are done, before MPI touches it;
        ``reading``: MPI only reads it (a send), so only the copies that write it."""
        start, end = _span(host)
        for r in self._ranges:
            if r.overlaps(start, end) and (r.writes_host or not reading):
                r.copy.wait()
        self._purge()

    def readable(self, host: np.ndarray) -> bool:
        """Whether the copies that write ``host`` are done (never blocks: a send of it may
        start)."""
        start, end = _span(host)
        return all(r.copy.poll() for r in self._ranges
                   if r.writes_host and r.overlaps(start, end))

    def synchronize(self) -> None:
        """Block until every staging copy is done."""
        for copies in self._streams.values():
            copies.synchronize()
        self._purge()

    def _note(self, host: np.ndarray, stage: Any, copy: cuda.Fence, writes_host: bool) -> None:
        start, end = _span(host)
        # a range this copy covers whole needs no fence of its own any more: the new copy
        # waited for its copy and its kernels, so the new fence implies both (and a send
        # must wait for it where the covered copy wrote the host)
        covered = [r for r in self._ranges if start <= r.start and r.end <= end]
        writes_host = writes_host or any(r.writes_host and not r.copy.done() for r in covered)
        self._ranges = [r for r in self._ranges if not (start <= r.start and r.end <= end)]
        self._ranges.append(_Range(start, end, host, stage, copy, writes_host))

    def _purge(self) -> None:
        self._ranges = [r for r in self._ranges
                        if not (r.copy.done() and (r.kernel is None or r.kernel.done()))]
