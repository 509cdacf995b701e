"""Scratch arrays kept per thread between codec calls.

A codec call that needs working memory of about its buffer's size (the
shaped errbound's code planes, its pyramid and its level grids) would
otherwise take fresh memory from the allocator on every call, and writing
fresh memory costs more than its page faults show: a 512 x 512 field's
shaped encode took up to 1.8x longer with its pyramid, grids and planes
allocated per call (docs/decisions.md, *errbound on fields: scratch per
call*). :func:`kept` hands each thread its own
arrays, one per name, grown as needed and kept while they are at most
:data:`KEEP_BYTES`; larger requests get a new array each call (their work
outweighs the allocation), which is not kept.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["KEEP_BYTES", "kept"]

#: the largest array a thread keeps per name (bytes)
KEEP_BYTES = 16 << 20

_local = threading.local()


def kept(name: str, size: int, dtype: Any) -> np.ndarray:
    """``size`` elements of ``dtype`` (contents undefined): this thread's kept array for
    ``name`` when it fits :data:`KEEP_BYTES`, else a new one. The array is the caller's
    until its next call with the same name on this thread."""
    dtype = np.dtype(dtype)
    if size * dtype.itemsize > KEEP_BYTES:
        return np.empty(size, dtype)
    arrays = getattr(_local, "arrays", None)
    if arrays is None:
        arrays = _local.arrays = {}
    have = arrays.get(name)
    if have is None or have.dtype != dtype or have.size < size:
        have = arrays[name] = np.empty(max(size, 1 << 12), dtype)
    return have[:size]
