"""Error feedback: what compression lost this step, added back to a later step's input.

* ``"none"``: nothing is kept.
* ``"classic"``: the residual ``e = x - C(x)`` of this step's compensated
  input ``x = g + e_prev`` is added to the next step's gradient (EF-SGD).
* ``"loco"``: a moving average ``m = beta * m + (1 - beta) * e`` of the
  residuals is added instead (``x = g + m``), and ``m`` is reset to zero
  every ``reset_every`` steps (LoCo-style), which keeps a stale residual
  from pushing the same direction for long.

``C(x)`` is the codec's round trip of this rank's own input (what its
compressed contribution carries). Residuals are kept per bucket where the
bucket lives (host or device, :mod:`mpicomp.backend`), in the gradient's dtype or,
with ``residual_dtype="float16"``/``"bfloat16"``, as 2-byte values (the
``cast`` codec's stream, the same bits on host and device), clipped to the
lower precision's largest finite value so that a residual never becomes Inf.
A step whose residual is not finite (NaN/Inf gradients) keeps nothing new:
classic feedback drops its residual, LoCo decays its average.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..backend.host import HOST

__all__ = ["MODES", "ErrorFeedback"]

MODES = ("none", "classic", "loco")

#: largest finite value of the 2-byte residual formats
_LIMIT = {"float16": 65504.0, "bfloat16": float(np.float32(3.3895313892515355e38))}


@dataclasses.dataclass
class _Kept:
    """One bucket's residual: raw values, or a cast codec's stream of them."""
    data: Any
    count: int
    dtype: np.dtype
    codec: Any = None

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


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
        self.residual_dtype = _storage(residual_dtype)
        self._state: dict[Any, _Kept] = {}
        self._loaded: dict[Any, Any] = {}  #: residual values compensate decoded, for update
        self.steps = 0

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def nbytes(self) -> int:
        """Memory the residuals hold (host and device)."""
        return sum(k.nbytes for k in self._state.values())

    def compensate(self, key: Any, g: Any, ops: Any = HOST) -> Any:
        """The input to compress for bucket ``key``: ``g`` plus the kept residual (in place)."""
        if not self.active:
            return g
        if self.mode == "loco" and self.steps % self.reset_every == 0:
            self._state.pop(key, None)
        kept = self._loaded[key] = self._load(key, ops)
        if kept is not None:
            ops.add_into(g, kept)
        return g

    def update(self, key: Any, x: Any, roundtrip: Any, ops: Any = HOST) -> None:
        """Keep what compression lost of ``x`` (``roundtrip`` = C(x))."""
        if not self.active:
            return
        a, b = (0.0, 1.0) if self.mode == "classic" else (self.beta, 1.0 - self.beta)
        if not ops.finite(x, roundtrip):
            b = 0.0  # a non-finite gradient: keep nothing of this step
        loaded = self._loaded.pop(key, None)  # what compensate added (decoded once a step)
        prev = None if a == 0 else (loaded if loaded is not None else self._load(key, ops))
        store = self.residual_dtype
        wide = np.dtype(x.dtype)
        if store is not None and store not in _LIMIT and np.dtype(store) != wide:
            raise ValueError(f"residual_dtype {store} needs float16, bfloat16 or the "
                             f"gradients' dtype {wide} here")
        lim = _LIMIT.get(store or "", float(np.finfo(wide).max))
        v = ops.residual(x, roundtrip if b != 0 else x, prev, a, b, lim)
        if store in _LIMIT:
            from ..codecs import get_codec

            codec = get_codec("cast", dtype=store)
            self._state[key] = _Kept(codec.encode(v), v.size, wide, codec)
        else:
            self._state[key] = _Kept(v, v.size, wide)

    def end_step(self) -> None:
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        """The residuals (host copies, as kept: values or a cast codec's stream) and the step
        count, for a checkpoint; :meth:`load_state_dict` restores them."""
        residuals = {}
        for key, kept in self._state.items():
            data = kept.data.copy_to_host() if hasattr(kept.data, "copy_to_host") \
                else np.array(kept.data, copy=True)
            residuals[key] = {"data": data, "count": kept.count, "dtype": kept.dtype.name}
        return {"mode": self.mode, "residual_dtype": self.residual_dtype, "steps": self.steps,
                "residuals": residuals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (host residuals, moved to the device by the first step
        that uses them on device buffers); the mode and residual dtype must be
        this feedback's."""
        if (state.get("mode"), state.get("residual_dtype")) != (self.mode, self.residual_dtype):
            raise ValueError(f"error feedback state of mode {state.get('mode')!r} (residuals "
                             f"{state.get('residual_dtype')}) loaded into mode {self.mode!r} "
                             f"(residuals {self.residual_dtype})")
        codec = None
        if self.residual_dtype in _LIMIT:
            from ..codecs import get_codec

            codec = get_codec("cast", dtype=self.residual_dtype)
        self._state = {key: _Kept(np.array(r["data"], copy=True), int(r["count"]),
                                  np.dtype(r["dtype"]), codec)
                       for key, r in state["residuals"].items()}
        self._loaded.clear()
        self.steps = int(state["steps"])

    def _load(self, key: Any, ops: Any) -> Any:
        """Bucket ``key``'s residual as values in the gradients' dtype (None if none)."""
        kept = self._state.get(key)
        if kept is None:
            return None
        if ops.on_device and isinstance(kept.data, np.ndarray):  # (loaded from a checkpoint)
            moved = ops.empty(kept.data.size, kept.data.dtype)
            ops.copy(moved, kept.data)
            kept.data = moved
        if kept.codec is None:
            return kept.data
        out = ops.empty(kept.count, kept.dtype)
        kept.codec.decode(kept.data, out=out)
        return out


def _storage(dtype: Any) -> str | None:
    """None (the gradients' dtype), 'float16', 'bfloat16', or a float dtype's name."""
    if dtype is None:
        return None
    if str(dtype) in _LIMIT:
        return str(dtype)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.kind != "f":
        raise ValueError(f"residual_dtype must be float16, bfloat16 or a float dtype, "
                         f"got {dtype!r}")
    return "float16" if dt == np.float16 else dt.name
