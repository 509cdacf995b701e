"""What the compressed algorithms share: their context, codec calls and chunking."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from mpi4py import MPI

from ..codecs import Codec
from ..memory import DeviceMemory, HostMemory
from ..stats import Recorder

__all__ = ["ALIGN", "Ctx", "split"]

#: chunk boundaries fall on multiples of this many values (a whole number of
#: blocks for every codec: zfp 3D blocks are 64 values, bitplane blocks 32)
ALIGN = 64


@dataclasses.dataclass
class Ctx:
    """One compressed call: the private communicator, the codec, the recorder, the memory.

    ``memory`` (:mod:`mpicomp.memory`) says where values and streams live
    (host, or device with direct or staged streams); the algorithms take
    scratch arrays, encode, decode, add and copy only through this object,
    so each runs unchanged on host and device buffers. ``comm`` waits for
    the device stream before each MPI call when the data is on the device.
    """

    comm: MPI.Intracomm
    codec: Codec
    rec: Recorder
    memory: HostMemory | DeviceMemory

    def __post_init__(self) -> None:
        self.comm = self.memory.mpi_comm(self.comm)

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def nbytes(self, count: int, dtype: np.dtype) -> int:
        return self.codec.encoded_nbytes(count, dtype)

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
            return self.memory.encode(self.codec, x, out)

    def decode(self, buf: Any, out: Any) -> Any:
        with self.rec.codec():
            return self.memory.decode(self.codec, buf, out)

    def add_into(self, acc: Any, x: Any) -> None:
        """``acc += x`` (values)."""
        self.memory.add_into(acc, x)

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[:] = src`` (values)."""
        self.memory.copy(dst, src)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int) -> None:
        with self.rec.mpi():
            self.comm.Sendrecv(sendbuf, dest, 0, recvbuf, source, 0)
        self.rec.sent(sendbuf.nbytes)


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
