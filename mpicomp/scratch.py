"""Grow-only scratch buffers reused across calls (one pool per communicator and thread)."""
from __future__ import annotations

import numpy as np

__all__ = ["Scratch"]


class Scratch:
    """Named scratch arrays: ``get(name, n, dtype)`` returns ``n`` elements, reusing memory.

    A name's memory grows to the largest request and is kept; two names
    never share memory. Not thread-safe: give each thread its own pool.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype: np.dtype | type) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = n * dt.itemsize
        buf = self._buffers.get(name)
        if buf is None or buf.size < nbytes:
            # round up so that slowly growing requests do not reallocate each time
            buf = np.empty(max(nbytes, 64) + (nbytes >> 3), dtype=np.uint8)
            self._buffers[name] = buf
        return buf[:nbytes].view(dt)

    def clear(self) -> None:
        self._buffers.clear()
