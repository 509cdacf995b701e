"""Where a sharded optimizer's parameters lie: one flat vector, cut into buckets, each
bucket cut into one part per rank.

Each param group's parameters, in reverse of the order given (the order
backward produces their gradients, as DDP buckets them), lie one after
another; every group is cut into buckets of at most ``per_bucket`` values
(a multiple of the ranks ``p``); a bucket's values are padded with zeros to
``p * part`` values and rank ``r`` owns its ``r``-th part. Buckets lie one
after another, group after group, so the whole vector is ``sum(p * part)``
values and this rank's parts, one after another, are its *shard*
(``master_at`` is a bucket's part's place there).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Bucket", "FlatLayout", "param_groups"]


class Bucket(NamedTuple):
    #: the bucket's first value in the flat vector
    start: int
    #: its values (without the padding)
    values: int
    #: its rank part's first value in this rank's shard
    master_at: int
    #: values of each rank's part (the bucket is ``p * part`` values, padding included)
    part: int
    #: the param group its values belong to
    group: int


class Piece(NamedTuple):
    """A run of one parameter's values inside one bucket."""
    bucket: int
    #: first value in the parameter (flattened)
    offset: int
    #: first value in the flat vector
    at: int
    count: int


class FlatLayout:
    """The flat vector's layout for ``groups`` (lists of ``(name, parameter)``) on ``size``
    ranks, this rank ``rank`` (see the module)."""

    def __init__(self, groups: list[list[tuple[str, Any]]], size: int, rank: int,
                 per_bucket: int) -> None:
        if per_bucket < size or per_bucket % size:
            raise ValueError(f"per_bucket must be a multiple of {size}, got {per_bucket}")
        self.size, self.rank = size, rank
        self.buckets: list[Bucket] = []
        #: each parameter's place: (group, name, parameter, first value in the flat vector)
        #: (only a group's last bucket is padded, so a parameter's values lie together)
        self.placed: list[tuple[int, str, Any, int]] = []
        at = master_at = 0
        for g, group in enumerate(groups):
            first = at
            for name, q in reversed(group):
                self.placed.append((g, name, q, at))
                at += q.numel()
            total, at, done = at - first, first, 0
            while done < total:
                n = min(per_bucket, total - done)
                part = -(-n // size)
                self.buckets.append(Bucket(at, n, master_at, part, g))
                at, master_at, done = at + size * part, master_at + part, done + n
        self.numel = at  # the flat vector, padding included
        self.shard_numel = master_at
        #: each parameter's pieces, by bucket (keyed by ``id(parameter)``)
        self.pieces: dict[int, list[Piece]] = {id(q): self._pieces(a, q.numel())
                                               for _, _, q, a in self.placed}

    def _pieces(self, at: int, n: int) -> list[Piece]:
        out = []
        for k, b in enumerate(self.buckets):
            lo, hi = max(at, b.start), min(at + n, b.start + b.values)
            if hi > lo:
                out.append(Piece(k, lo - at, lo, hi - lo))
        return out

    def owned(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions in the flat vector, positions in the shard) of the values this rank
        owns (padding left out)."""
        flat, shard = [], []
        for b in self.buckets:
            first, last = self.rank * b.part, min((self.rank + 1) * b.part, b.values)
            if last > first:
                flat.append(np.arange(b.start + first, b.start + last))
                shard.append(np.arange(b.master_at, b.master_at + last - first))
        return (np.concatenate(flat) if flat else np.zeros(0, np.int64),
                np.concatenate(shard) if shard else np.zeros(0, np.int64))

    def shard_spans(self, q: Any) -> list[tuple[int, int]]:
        """Where the values of parameter ``q`` this rank owns lie in its shard:
        ``(start, end)`` ranges."""
        out = []
        for piece in self.pieces[id(q)]:
            b = self.buckets[piece.bucket]
            first = b.start + self.rank * b.part
            lo, hi = max(piece.at, first), min(piece.at + piece.count, first + b.part)
            if hi > lo:
                out.append((b.master_at + lo - first, b.master_at + hi - first))
        return out

    def mine(self, b: Bucket) -> slice:
        """This rank's part of bucket ``b`` in the flat vector."""
        return slice(b.start + self.rank * b.part, b.start + (self.rank + 1) * b.part)

    def whole(self, b: Bucket) -> slice:
        """Bucket ``b`` in the flat vector, padding included."""
        return slice(b.start, b.start + self.size * b.part)

    def describe(self) -> dict[str, Any]:
        """What a checkpoint must match to be loaded here."""
        return {"rank": self.rank, "size": self.size, "numel": self.numel,
                "buckets": [list(b) for b in self.buckets]}


def param_groups(params: Iterable[Any]) -> tuple[list[list[tuple[str, Any]]],
                                                  list[dict[str, Any]]]:
    """``(groups of (name, parameter), each group's options)`` from ``parameters()``,
    ``named_parameters()`` or param-group dicts (``{"params": ..., "lr": ...}``, whose
    ``params`` are parameters or (name, parameter) pairs), as ``torch.optim`` takes them.
    Unnamed parameters are named by their place: ``"0"``, ``"1"``, ... (in a group
    ``k`` of several, ``"k.0"``, ...)."""
    items = list(params)
    if not items:
        raise ValueError("ShardedOptimizer got an empty parameter list")
    dicts = [isinstance(item, Mapping) for item in items]
    if any(dicts) and not all(dicts):
        raise TypeError("ShardedOptimizer: param groups (dicts) mixed with parameters")
    if not all(dicts):
        return [_named(items, "")], [{}]
    groups, options = [], []
    for k, group in enumerate(items):
        if "params" not in group:
            raise TypeError(f"ShardedOptimizer: param group {k} has no 'params' (keys "
                            f"{sorted(group)})")
        given = group["params"]
        members = [given] if _is_tensor(given) else list(given)
        groups.append(_named(members, f"{k}." if len(items) > 1 else ""))
        options.append({key: v for key, v in group.items() if key != "params"})
    return groups, options


def _named(items: list[Any], prefix: str) -> list[tuple[str, Any]]:
    if all(isinstance(item, tuple) and len(item) == 2 for item in items):
        return [(str(n), q) for n, q in items]
    if any(isinstance(item, tuple) for item in items):
        raise TypeError("ShardedOptimizer: mixed (name, parameter) pairs and parameters")
    return [(f"{prefix}{i}", q) for i, q in enumerate(items)]


def _is_tensor(x: Any) -> bool:
    import torch

    return torch.is_tensor(x)
