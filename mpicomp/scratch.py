"""Grow-only scratch buffers reused across calls (one pool per communicator and thread)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Scratch"]


class Scratch:
    """Named scratch arrays: ``get(name, n, dtype)`` returns ``n`` elements, reusing memory.

    A name's memory grows to the largest request and is kept; two names
    never share memory. ``alloc(nbytes)`` makes a flat uint8 buffer (host
    memory by default; :mod:`mpicomp.memory` passes device and pinned-host
    allocators). Not thread-safe: give each thread its own pool.
    """

    def __init__(self, alloc: Callable[[int], Any] | None = None) -> None:
        self._alloc = alloc or (lambda nbytes: np.empty(nbytes, dtype=np.uint8))
        self._buffers: dict[str, Any] = {}

    def get(self, name: str, n: int, dtype: np.dtype | type) -> Any:
        dt = np.dtype(dtype)
        nbytes = n * dt.itemsize
        buf = self._buffers.get(name)
        if buf is None or buf.size < nbytes:
            # round up so that slowly growing requests do not reallocate each time
            buf = self._alloc(max(nbytes, 64) + (nbytes >> 3))
            self._buffers[name] = buf
        return buf[:nbytes].view(dt)
