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
class _Ahead:
    """A bucket's update made while its call was in flight (:meth:`ErrorFeedback.ahead`)."""
    x: Any  #: the compensated input the call sends
    v: Any  #: the residual if the codec carried ``x`` as assumed
    prev: Any  #: the residual the step's input was compensated with (None: none)
    plain: bool = False  #: whether ``v`` is that of ``x`` carried exact (codec none)


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
        self._ahead: dict[Any, _Ahead] = {}  #: updates made while their calls are in flight
        self._codecs: dict[Any, Any] = {}  #: this feedback's own instance of each codec
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

    def ahead(self, key: Any, x: Any, codec: Any, ops: Any = HOST,
              pieces: Any = None) -> None:
        """Bucket ``key``'s update made while its call is in flight: the residual of the
        compensated input ``x`` as if ``codec`` carried it (``pieces``: the slices of ``x``
        the call codes as streams of their own, the rest exact; None: all of ``x`` as one
        stream), which :meth:`settle` keeps once the call is done. Nothing the call reads
        or the kept residual is written: C(x) goes to a buffer of its own, which then holds
        the residual (so the work overlaps the call instead of following it), and the codec
        is an instance of this feedback's own (a call's thread may be coding with the
        call's: zfp's scratch is per thread of a Numba team, not per caller)."""
        if not self.active:
            return
        own = self._codecs.get(codec)
        if own is None:
            own = self._codecs[codec] = type(codec).from_config(codec.get_config())
        buf = ops.empty(x.size, np.dtype(x.dtype))
        prev = self._previous(key, ops)
        if not ops.on_device and own.codec_id != "none" and _alike(x, prev):
            v = self._fused(own, x, prev, pieces, buf, ops)
            if v is not None:
                self._ahead[key] = _Ahead(x, v, prev)
                return
        if own.codec_id == "none":  # (sent plain: C(x) is x)
            carried = x
        elif pieces is None:
            carried = ops.roundtrip(own, x, out=buf)
        else:
            ops.copy(buf, x)
            for piece in pieces:  # (a piece the codec refuses stays exact, as sent)
                ops.roundtrip(own, x[piece], out=buf[piece])
            carried = buf
        self._ahead[key] = _Ahead(x, self._residual(x, carried, prev, ops, buf), prev,
                                  carried is x)

    def _fused(self, codec: Any, x: np.ndarray, prev: np.ndarray | None, pieces: Any,
               out: np.ndarray, ops: Any) -> np.ndarray | None:
        """:meth:`ahead`'s residual into ``out`` by ``codec``'s one-pass kernel
        (``Codec.residual_into``: C(x) and the residual, no stream) over each piece, the
        residual of ``x`` carried exact elsewhere; None where the codec has no such
        kernel."""
        a, b, lim = self._coefficients(x.dtype)
        coded = [slice(0, x.size)] if pieces is None else list(pieces)
        bad = 0
        for piece in coded:
            got = codec.residual_into(x[piece], None if prev is None else prev[piece], a, b,
                                      lim, out[piece])
            if got is None:
                return None
            bad += got
        for piece in _between(coded, x.size):  # (sent exact: C(x) is x there)
            bad += not ops.finite(x[piece])
            ops.residual(x[piece], x[piece], None if prev is None else prev[piece], a, b, lim,
                         out=out[piece])
        if bad:  # NaN or Inf: the codec refuses x, and the step keeps nothing new
            return ops.residual(x, x, prev, a, 0.0, lim, out=out)
        return out

    def settle(self, key: Any, ops: Any = HOST, carried: Any = None) -> None:
        """Keep bucket ``key``'s residual made by :meth:`ahead`, its call done. ``carried``:
        C(x) as the call did carry ``x`` where that is not what :meth:`ahead` assumed (``x``
        itself for a call that went plain); the residual is then made again from it."""
        if not self.active:
            return
        ahead = self._ahead.pop(key)
        v = ahead.v
        if carried is not None and not (ahead.plain and carried is ahead.x):
            v = self._residual(ahead.x, carried, ahead.prev, ops, v)
        self._keep(key, v)

    def update(self, key: Any, x: Any, roundtrip: Any, ops: Any = HOST) -> None:
        """Keep what compression lost of ``x`` (``roundtrip`` = C(x)), after the call (the
        kept residual's values are overwritten: :meth:`ahead` and :meth:`settle` overlap
        this with the call)."""
        if not self.active:
            return
        self._keep(key, self._residual(x, roundtrip, self._previous(key, ops), ops))

    def _previous(self, key: Any, ops: Any) -> Any:
        """The residual bucket ``key``'s input was compensated with, as values (None: none,
        or classic feedback, which does not read it)."""
        loaded = self._loaded.pop(key, None)  # what compensate added (decoded once a step)
        if self.mode == "classic":
            return None
        return loaded if loaded is not None else self._load(key, ops)

    def _residual(self, x: Any, roundtrip: Any, prev: Any, ops: Any, out: Any = None) -> Any:
        """The new residual of ``x`` carried as ``roundtrip`` after ``prev``, into ``out``
        (None: into ``prev``, or a new array)."""
        a, b, lim = self._coefficients(np.dtype(x.dtype))
        if not ops.finite(x, roundtrip):
            b = 0.0  # a non-finite gradient: keep nothing of this step
        return ops.residual(x, roundtrip if b != 0 else x, prev, a, b, lim, out=out)

    def _coefficients(self, wide: np.dtype) -> tuple[float, float, float]:
        """``(a, b, lim)`` of the residual ``clip(a * prev + b * (x - C(x)), -lim, lim)``
        of gradients of dtype ``wide``."""
        a, b = (0.0, 1.0) if self.mode == "classic" else (self.beta, 1.0 - self.beta)
        store = self.residual_dtype
        if store is not None and store not in _LIMIT and np.dtype(store) != wide:
            raise ValueError(f"residual_dtype {store} needs float16, bfloat16 or the "
                             f"gradients' dtype {wide} here")
        return a, b, _LIMIT.get(store or "", float(np.finfo(wide).max))

    def _keep(self, key: Any, v: Any) -> None:
        store = self.residual_dtype
        if store in _LIMIT:
            from ..codecs import get_codec

            codec = get_codec("cast", dtype=store)
            self._state[key] = _Kept(codec.encode(v), v.size, np.dtype(v.dtype), codec)
        else:
            self._state[key] = _Kept(v, v.size, np.dtype(v.dtype))

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
        self._ahead.clear()
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


def _between(pieces: list[slice], n: int) -> list[slice]:
    """The slices of ``range(n)`` outside the ascending, disjoint ``pieces``."""
    out, at = [], 0
    for piece in pieces:
        start, stop, _ = piece.indices(n)
        if start > at:
            out.append(slice(at, start))
        at = max(at, stop)
    if at < n:
        out.append(slice(at, n))
    return out


def _alike(x: Any, prev: Any) -> bool:
    """Whether the host arrays ``x`` and ``prev`` (None: none) take a codec's fused residual
    kernel: float32 or float64, 1-D contiguous, ``prev`` of ``x``'s size and dtype."""
    return (isinstance(x, np.ndarray) and x.dtype in (np.float32, np.float64)
            and x.ndim == 1 and x.flags.c_contiguous
            and (prev is None or (isinstance(prev, np.ndarray) and prev.dtype == x.dtype
                                  and prev.shape == x.shape and prev.flags.c_contiguous)))


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
