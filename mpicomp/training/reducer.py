"""GradientReducer: average (or sum) named gradients across ranks, compressed, in buckets.

::

    reducer = GradientReducer(comm, codec="bitplane", rate=4.25, error_feedback="loco",
                              rules=[("*.bias", {"codec": "none"})])
    reducer.reduce(grads)   # grads: {name: array}; reduced in place, the same bits on every rank

Each step: the gradients are packed into buckets (:mod:`.buckets`), the
kept residual of each bucket is added (:mod:`.feedback`), every bucket is
started as a nonblocking compressed ``Iallreduce`` right after it is packed
(so packing the next one overlaps the transfer of the previous), and once
all are done each result is divided by the number of ranks (``average``)
and copied back into the gradients. The reduced values are the same bits
on every rank (the collectives' results are), so replicated parameters stay
identical.

Gradients are NumPy arrays or anything NumPy views without a copy (PyTorch
CPU tensors, via ``numpy()``); every rank must pass the same names, shapes
and dtypes, in any order (checked each step, the same error on every rank).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import buckets as bucketing
from .feedback import ErrorFeedback
from .rules import Rule, check_rules, settings_for

__all__ = ["GradientReducer"]


class GradientReducer:
    """See the module docstring. ``comm`` is an ``mpicomp.Comm`` (or an MPI communicator,
    wrapped); ``codec``/``rate``/``algorithm``/``threshold`` are the per-call settings of the
    gradients no rule matches (None: the communicator's)."""

    def __init__(self, comm: Any, *, codec: Any = None, rate: float | None = None,
                 algorithm: str | None = None, threshold: int | None = None,
                 error_feedback: str = "none", beta: float = 0.8, reset_every: int = 1024,
                 residual_dtype: Any = None, bucket_mib: float = 25.0, average: bool = True,
                 rules: Sequence[Rule] = ()) -> None:
        import mpicomp

        self.comm = comm if isinstance(comm, mpicomp.Comm) else mpicomp.Comm(comm)
        if not float(bucket_mib) > 0:
            raise ValueError(f"bucket_mib must be > 0, got {bucket_mib!r}")
        self.bucket_bytes = int(float(bucket_mib) * (1 << 20))
        self.average = bool(average)
        self.rules = check_rules(rules)
        self.default = {k: v for k, v in (("codec", codec), ("rate", rate),
                                          ("algorithm", algorithm), ("threshold", threshold))
                        if v is not None}
        self.comm.resolved_policy(**self.default)  # bad settings: an error now, on every rank
        self.feedback = ErrorFeedback(error_feedback, beta, reset_every, residual_dtype)
        self._plan: list[bucketing.Bucket] | None = None
        self._plan_fp: int | None = None
        self._flat: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    # -- one step -----------------------------------------------------------------
    def reduce(self, grads: Mapping[str, Any]) -> None:
        """Reduce ``grads`` in place (collective: every rank, the same names)."""
        arrays = {name: _host_view(name, g) for name, g in grads.items()}
        settings = {name: settings_for(name, a, self.rules, self.default)
                    for name, a in arrays.items()}
        self._agree_on_layout(arrays, settings)
        assert self._plan is not None
        pending = []
        for b in self._plan:
            x, y = self._buffers(b)
            for name, off, size in zip(b.names, b.offsets, b.sizes):
                x[off: off + size] = arrays[name].reshape(-1)
            x = self.feedback.compensate(b.key, x)
            req = self.comm.Iallreduce(x, y, **b.settings)
            pending.append((b, req, x, y))  # x: the bucket's own buffer, untouched until next step
        p = self.comm.Get_size()
        for b, req, sent, y in pending:
            req.Wait()
            if self.feedback.active:
                self.feedback.update(b.key, sent, self._roundtrip(b, sent))
            if self.average:
                np.divide(y, y.dtype.type(p), out=y)
            for name, off, size in zip(b.names, b.offsets, b.sizes):
                arrays[name].reshape(-1)[...] = y[off: off + size]
        self.feedback.end_step()

    # -- helpers ------------------------------------------------------------------
    def _agree_on_layout(self, arrays: dict[str, np.ndarray],
                         settings: dict[str, dict[str, Any]]) -> None:
        fp = bucketing.fingerprint(arrays, settings)
        every = self.comm.allgather(fp)  # pickled, plain MPI: tiny
        if len(set(every)) != 1:
            raise ValueError(
                "GradientReducer.reduce: the ranks passed different gradient names, shapes, "
                f"dtypes or rule settings (fingerprints {sorted(set(every))}); this rank "
                f"(rank {self.comm.Get_rank()}) has {len(arrays)} gradients")
        if fp != self._plan_fp:
            self._plan = bucketing.plan(arrays, settings, self.bucket_bytes)
            self._plan_fp = fp
            self._flat.clear()

    def _buffers(self, b: bucketing.Bucket) -> tuple[np.ndarray, np.ndarray]:
        bufs = self._flat.get(b.key)
        if bufs is None:
            bufs = self._flat[b.key] = (np.empty(b.size, b.dtype), np.empty(b.size, b.dtype))
        return bufs

    def _roundtrip(self, b: bucketing.Bucket, x: np.ndarray) -> np.ndarray:
        """C(x): what this rank's compressed contribution carries (x itself if sent plain)."""
        pol = self.comm.resolved_policy(**b.settings)
        if pol.auto:
            raise ValueError("error feedback needs a named codec (the codec is 'auto'); pass "
                             "codec= to the reducer or its rules")
        if (not pol.enabled or self.comm.Get_size() == 1 or x.nbytes < pol.threshold
                or x.dtype not in pol.codec.dtypes or not np.all(np.isfinite(x))):
            return x
        return pol.codec.decode(pol.codec.encode(x), out=np.empty_like(x))

    def describe(self) -> list[dict[str, Any]]:
        """The current buckets: names, values, settings (after a first :meth:`reduce`)."""
        return [{"names": b.names, "values": b.size, "dtype": b.dtype.name,
                 "settings": json.loads(b.key[0])} for b in (self._plan or [])]


def _host_view(name: str, g: Any) -> np.ndarray:
    """A NumPy view of a gradient's memory (no copy), or TypeError."""
    if isinstance(g, np.ndarray):
        arr = g
    elif hasattr(g, "numpy") and hasattr(g, "device") and str(getattr(g, "device", "")) == "cpu":
        arr = g.detach().numpy() if hasattr(g, "detach") else g.numpy()
    else:
        raise TypeError(f"gradient {name!r}: GradientReducer takes NumPy arrays and CPU "
                        f"tensors NumPy can view, got {type(g).__name__}")
    if not arr.flags.c_contiguous:
        raise ValueError(f"gradient {name!r} must be C-contiguous (strides {arr.strides})")
    if arr.dtype.kind != "f":
        raise TypeError(f"gradient {name!r} must be a float array, got dtype {arr.dtype}")
    return arr
