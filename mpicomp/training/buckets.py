"""Buckets: named gradients laid out in flat buffers, in an order every rank agrees on.

Gradients are taken in name order (or in an order given: backward's, so that
buckets fill one after another as backward runs), grouped by their
compression settings and dtype (groups in the order their first gradient
comes), and packed into buckets of about ``bucket_bytes`` each (a gradient
larger than that is a bucket of its own). The plan depends only on
names, shapes, dtypes and settings, so ranks with the same model make the
same plan; :func:`fingerprint` lets them check that they did.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Bucket", "fingerprint", "plan"]


@dataclasses.dataclass
class Bucket:
    key: tuple[Any, ...]             #: (settings json, dtype, index): stable across steps
    settings: dict[str, Any]
    dtype: np.dtype
    names: list[str]
    offsets: list[int]               #: where each gradient starts in the flat buffer
    sizes: list[int]

    @property
    def size(self) -> int:
        return self.offsets[-1] + self.sizes[-1] if self.names else 0


def plan(arrays: Mapping[str, np.ndarray], settings: Mapping[str, dict[str, Any]],
         bucket_bytes: int, order: Sequence[str] | None = None) -> list[Bucket]:
    """The buckets for these gradients (``settings``: each name's per-call settings;
    ``order``: the names' order, name order by default)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name in _ordered(arrays, order):
        key = (json.dumps(settings[name], sort_keys=True, default=str), arrays[name].dtype.str)
        groups.setdefault(key, []).append(name)
    out: list[Bucket] = []
    for (sjson, dstr), names in (groups.items() if order is not None
                                 else sorted(groups.items())):
        dtype = np.dtype(dstr)
        current: list[str] = []
        nbytes = 0
        for name in names + [None]:  # type: ignore[list-item]
            size = 0 if name is None else arrays[name].size
            if current and (name is None or nbytes + size * dtype.itemsize > bucket_bytes):
                offsets = list(np.cumsum([0] + [arrays[n].size for n in current[:-1]]))
                out.append(Bucket((sjson, dstr, len(out)), settings[current[0]], dtype,
                                  current, [int(o) for o in offsets],
                                  [arrays[n].size for n in current]))
                current, nbytes = [], 0
            if name is not None:
                current.append(name)
                nbytes += size * dtype.itemsize
    return out


def fingerprint(arrays: Mapping[str, np.ndarray], settings: Mapping[str, dict[str, Any]],
                order: Sequence[str] | None = None) -> int:
    """A 63-bit hash of names, shapes, dtypes, settings and order (the same on ranks that
    agree)."""
    desc = [(n, arrays[n].shape, arrays[n].dtype.str,
             json.dumps(settings[n], sort_keys=True, default=str))
            for n in _ordered(arrays, order)]
    digest = hashlib.blake2b(repr(desc).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _ordered(arrays: Mapping[str, Any], order: Sequence[str] | None) -> list[str]:
    if order is None:
        return sorted(arrays)
    names = list(order)
    if sorted(names) != sorted(arrays):
        raise ValueError(f"order names {len(names)} gradients, not the {len(arrays)} given "
                         "once each")
    return names
