"""The stream ratio of a variable-size codec, learned from the calls themselves.

A variable codec's stream (``errbound``) is as long as its data need, so the
model cannot price it from count and dtype alone (its upper bound, the raw
size, predicts no gain). Each compressed blocking call measures this rank's
ratio (the bytes its encodes wrote over the bytes they read); the next
blocking call of the same kind (method, bytes, dtype, device, settings)
carries it into its agreement step (one more float64 in the MAX allreduce),
and every rank keeps the largest: the ratio the model prices that kind of
call at from then on, the same number on every rank. A kind not seen yet
is priced at the upper bound.

Only blocking calls learn and use it: they screen and agree on the caller's
thread in program order, the same on every rank, while a nonblocking call
agrees on the worker thread at a moment that differs between ranks (a ratio
it learned could reach one rank's next decision and not another's).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["LearnedRatios", "NONE"]

#: what a rank that measured nothing for a kind of call contributes to the agreement
NONE = -1.0


class LearnedRatios:
    """Measured (this rank) and agreed (every rank) stream ratios by kind of call."""

    #: kinds kept of each (the oldest dropped beyond it)
    KEPT = 256

    def __init__(self) -> None:
        self._measured: dict[tuple[Any, ...], float] = {}
        self._agreed: dict[tuple[Any, ...], float] = {}

    @staticmethod
    def key(method: str, nbytes: int, dtype: Any, on_device: bool,
            description: str) -> tuple[Any, ...]:
        """The kind of a call: ``method`` (the blocking collective), its raw bytes, dtype,
        placement and settings (``Resolved.description``)."""
        return (method, int(nbytes), np.dtype(dtype).name, bool(on_device), description)

    def measured(self, key: tuple[Any, ...], raw: int, used: int) -> None:
        """This rank's call of kind ``key`` encoded ``raw`` bytes into ``used``."""
        if raw > 0:
            _put(self._measured, key, used / raw)

    def pending(self, key: tuple[Any, ...]) -> float:
        """What this rank brings to the agreement of a call of kind ``key``."""
        return self._measured.get(key, NONE)

    def agreed(self, key: tuple[Any, ...], ratio: float) -> None:
        """The agreement's largest ratio (NONE: no rank measured one)."""
        if ratio > 0:
            _put(self._agreed, key, ratio)

    def ratio(self, key: tuple[Any, ...]) -> float | None:
        """The agreed ratio of kind ``key``, or None."""
        return self._agreed.get(key)


def _put(table: dict[tuple[Any, ...], float], key: tuple[Any, ...], value: float) -> None:
    table.pop(key, None)
    if len(table) >= LearnedRatios.KEPT:
        del table[next(iter(table))]
    table[key] = value
