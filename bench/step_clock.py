"""Where a training step's time goes: computation, communication, codecs.

A :class:`StepClock` keeps exclusive seconds per category. Regions nest: time
spent in an inner region (a codec round trip inside a gradient exchange)
counts for the inner category only. :meth:`StepClock.wrap` times a method of
one object (a communicator's ``Allreduce``, an optimizer's ``synchronize``)
as a region, by setting an attribute of that instance: the class and every
other instance stay as they were. Everything outside any region is the
caller's computation (``step wall - regions``).
"""
from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["StepClock"]


class StepClock:
    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self._stack: list[str] = []
        self._since = 0.0

    @contextlib.contextmanager
    def region(self, category: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._stack:  # the enclosing region stops counting
            self.seconds[self._stack[-1]] += now - self._since
        self._stack.append(category)
        self._since = now
        try:
            yield
        finally:
            now = time.perf_counter()
            self.seconds[self._stack.pop()] += now - self._since
            self._since = now

    def wrap(self, obj: Any, method: str, category: str) -> None:
        """Time every call of ``obj.method`` as a region of ``category``."""
        inner = getattr(obj, method)

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.region(category):
                return inner(*args, **kwargs)

        setattr(obj, method, timed)

    def take(self) -> dict[str, float]:
        """The seconds per category since the last take (and start again)."""
        out = dict(self.seconds)
        self.seconds.clear()
        return out
