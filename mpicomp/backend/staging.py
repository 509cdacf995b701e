"""The staged path's copies: streams between device and pinned host memory, overlapped.

An MPI that is not CUDA-aware reads and writes host memory, so a staged
call (:class:`~mpicomp.backend.device.DeviceMemory` without ``direct``)
moves every piece's stream from the device stage its kernel wrote to a
pinned wire buffer for MPI, and every received piece back. :class:`Staging`
runs those copies on a stream of its own (:func:`mpicomp.cuda_runtime.copy_stream`),
so that a piece's copy overlaps the kernels of the next one on the call's
stream, and the host waits only for the copies of the bytes MPI is about
to touch, not for the whole stream.

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
        self._copies: Any = None
        self._ranges: list[_Range] = []

    @property
    def copies(self) -> Any:
        """The stream the staging copies run on (made at first use)."""
        if self._copies is None:
            self._copies = cuda.copy_stream()
        return self._copies

    def mirror(self, host: Any) -> Any | None:
        """The device stage of the wire bytes ``host`` (a slice of a pool's wire buffer): its
        mirror's bytes at the same offset; None for any other memory."""
        if not isinstance(host, np.ndarray):
            return None
        found = self._pinned.locate(host)
        if found is None or not found[0].startswith(WIRE):
            return None
        name, offset, size = found
        return self._device.get("mirror:" + name, size, np.uint8)[offset : offset + host.nbytes]

    def tracked(self, host: Any) -> bool:
        """Whether ``host`` is wire memory, whose copies this object fences."""
        if not isinstance(host, np.ndarray):
            return False
        found = self._pinned.locate(host)
        return found is not None and found[0].startswith(WIRE)

    # -- the copies ----------------------------------------------------------------
    def before_write(self, host: np.ndarray, stream: Any) -> None:
        """Make ``stream``'s next kernel, which writes ``host``'s mirror, wait for the copies
        that still read (or write) it."""
        start, end = _span(host)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.copy.wait_on(stream)

    def to_host(self, host: np.ndarray, stage: Any, stream: Any) -> None:
        """Enqueue ``host[:] = stage`` (its mirror) on the copy stream, after the work
        ``stream`` holds now (the kernel that wrote the stage)."""
        cuda.Fence(stream).wait_on(self.copies)
        cuda.copy_to_host(host, stage, self.copies)
        self._note(host, stage, cuda.Fence(self.copies))

    def to_device(self, stage: Any, host: np.ndarray, stream: Any) -> None:
        """Enqueue ``stage[:] = host`` on the copy stream, after the kernels that still read
        the stage, and make ``stream``'s later work wait for it."""
        start, end = _span(host)
        for r in self._ranges:
            if r.kernel is not None and r.overlaps(start, end):
                r.kernel.wait_on(self.copies)
        cuda.copy_to_device(stage, host, self.copies)
        done = cuda.Fence(self.copies)
        done.wait_on(stream)
        self._note(host, stage, done)

    def read_by(self, host: np.ndarray, stream: Any) -> None:
        """Record that ``stream``'s work up to now reads ``host``'s mirror (a decode): a
        later copy into the mirror waits for it."""
        start, end = _span(host)
        fence = cuda.Fence(stream)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.kernel = fence

    # -- the host's waits ----------------------------------------------------------
    def wait_host(self, host: np.ndarray) -> None:
        """Block until the copies into or out of ``host`` are done (before MPI touches it)."""
        start, end = _span(host)
        for r in self._ranges:
            if r.overlaps(start, end):
                r.copy.wait()
        self._purge()

    def synchronize(self) -> None:
        """Block until every staging copy is done."""
        if self._copies is not None:
            self._copies.synchronize()
        self._purge()

    def _note(self, host: np.ndarray, stage: Any, copy: cuda.Fence) -> None:
        start, end = _span(host)
        # a range this copy covers whole needs no fence of its own any more: the copy
        # stream runs in order, and the new copy waited for its kernels
        self._ranges = [r for r in self._ranges if not (start <= r.start and r.end <= end)]
        self._ranges.append(_Range(start, end, host, stage, copy))

    def _purge(self) -> None:
        self._ranges = [r for r in self._ranges
                        if not (r.copy.done() and (r.kernel is None or r.kernel.done()))]
