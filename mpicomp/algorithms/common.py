"""What the compressed algorithms share: their context, codec calls and chunking."""
from __future__ import annotations

import dataclasses

import numpy as np
from mpi4py import MPI

from ..codecs import Codec
from ..scratch import Scratch
from ..stats import Recorder

__all__ = ["ALIGN", "Ctx", "split"]

#: chunk boundaries fall on multiples of this many values (a whole number of
#: blocks for every codec: zfp 3D blocks are 64 values, bitplane blocks 32)
ALIGN = 64


@dataclasses.dataclass
class Ctx:
    """One compressed call: the private communicator, the codec, the recorder, scratch."""

    comm: MPI.Intracomm
    codec: Codec
    rec: Recorder
    scratch: Scratch

    @property
    def rank(self) -> int:
        return self.comm.Get_rank()

    @property
    def size(self) -> int:
        return self.comm.Get_size()

    def nbytes(self, count: int, dtype: np.dtype) -> int:
        return self.codec.encoded_nbytes(count, dtype)

    def encode(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x`` encoded into the scratch buffer ``name``."""
        out = self.scratch.get(name, self.nbytes(x.size, x.dtype), np.uint8)
        with self.rec.codec():
            return self.codec.encode(x, out=out)

    def encode_into(self, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        with self.rec.codec():
            return self.codec.encode(x, out=out)

    def decode(self, buf: np.ndarray, out: np.ndarray) -> np.ndarray:
        with self.rec.codec():
            return self.codec.decode(buf, out=out)

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
