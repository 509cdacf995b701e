"""Error feedback: what compression lost this step, added back to a later step's input.

* ``"none"``: nothing is kept.
* ``"classic"``: the residual ``e = x - C(x)`` of this step's compensated
  input ``x = g + e_prev`` is added to the next step's gradient (EF-SGD).
* ``"loco"``: a moving average ``m = beta * m + (1 - beta) * e`` of the
  residuals is added instead (``x = g + m``), and ``m`` is reset to zero
  every ``reset_every`` steps (LoCo-style), which keeps a stale residual
  from pushing the same direction for long.

``C(x)`` is the codec's round trip of this rank's own input (what its
compressed contribution carries); residuals are kept per bucket, in the
gradient's dtype or, with ``residual_dtype``, in a lower precision
(``float16``/``bfloat16`` halve the memory, see docs/training.md).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MODES", "ErrorFeedback"]

MODES = ("none", "classic", "loco")


class ErrorFeedback:
    """Residuals of one reducer, by bucket key."""

    def __init__(self, mode: str = "none", beta: float = 0.8, reset_every: int = 1024,
                 residual_dtype: Any = None) -> None:
        if mode not in MODES:
            raise ValueError(f"error_feedback must be one of {list(MODES)}, got {mode!r}")
        if not 0.0 <= float(beta) < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {beta!r}")
        if int(reset_every) < 1:
            raise ValueError(f"reset_every must be >= 1, got {reset_every!r}")
        self.mode, self.beta, self.reset_every = mode, float(beta), int(reset_every)
        self.residual_dtype = None if residual_dtype is None else _storage(residual_dtype)
        self._state: dict[Any, np.ndarray] = {}
        self.steps = 0

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def nbytes(self) -> int:
        """Memory the residuals hold."""
        return sum(a.nbytes for a in self._state.values())

    def compensate(self, key: Any, g: np.ndarray) -> np.ndarray:
        """The input to compress for bucket ``key``: ``g`` plus the kept residual (in place)."""
        if not self.active:
            return g
        if self.mode == "loco" and self.steps % self.reset_every == 0:
            self._state.pop(key, None)
        kept = self._state.get(key)
        if kept is not None:
            g += kept.astype(g.dtype, copy=False)
        return g

    def update(self, key: Any, x: np.ndarray, roundtrip: np.ndarray) -> None:
        """Keep what compression lost of ``x`` (``roundtrip`` = C(x))."""
        if not self.active:
            return
        e = x - roundtrip
        if not np.all(np.isfinite(e)):
            e = np.zeros_like(x)  # a non-finite gradient: keep nothing of this step
        if self.mode == "loco":
            prev = self._state.get(key)
            m = (1.0 - self.beta) * e if prev is None else (
                self.beta * prev.astype(e.dtype) + (1.0 - self.beta) * e)
            e = m
        dt = self.residual_dtype or e.dtype
        self._state[key] = e.astype(dt)

    def end_step(self) -> None:
        self.steps += 1


def _storage(dtype: Any) -> np.dtype:
    if str(dtype) == "bfloat16":
        raise ValueError("residual_dtype bfloat16 needs ml_dtypes; use float16 or float32")
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"residual_dtype must be a float dtype, got {dt}")
    return dt
