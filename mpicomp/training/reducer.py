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
CPU tensors, via ``numpy()``), or CUDA device buffers (CuPy arrays, PyTorch
CUDA tensors, Numba device arrays): those are packed, compensated, reduced
and copied back on the device, on the caller's current stream
(:mod:`mpicomp.backend`). Every rank must pass the same names, shapes, dtypes and
placement (host or device), in any order (checked each step, the same error
on every rank).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .. import backend
from ..algorithms.common import split
from ..backend.device import DEVICE
from ..backend.host import HOST
from . import buckets as bucketing
from .feedback import ErrorFeedback
from .rules import Rule, check_rules, settings_for

__all__ = ["GradientReducer", "carried_otherwise", "feedback_codec"]

#: a bucket's settings that say where and with what it is packed, not how it is sent
NOT_CALL_SETTINGS = ("place", "bucket")


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
        for _, settings in self.rules:
            self.comm.resolved_policy(**{**self.default, **{
                k: v for k, v in settings.items() if k not in NOT_CALL_SETTINGS}})
        self.feedback = ErrorFeedback(error_feedback, beta, reset_every, residual_dtype)
        self._plan: list[bucketing.Bucket] | None = None
        self._plan_fp: int | None = None
        self._flat: dict[Any, tuple[Any, Any]] = {}

    # -- one step -----------------------------------------------------------------
    def reduce(self, grads: Mapping[str, Any]) -> None:
        """Reduce ``grads`` in place (collective: every rank, the same names)."""
        arrays = self.prepare(grads)
        assert self._plan is not None
        pending = [self.start(b, arrays) for b in self._plan]
        self.finish(pending, arrays)

    def prepare(self, grads: Mapping[str, Any], order: Sequence[str] | None = None
                ) -> dict[str, Any]:
        """The gradients as arrays, once every rank agrees on the buckets (collective): the
        plan (:attr:`plan`) packs them in name order, or in ``order`` (every name once, the
        same on every rank: backward's order, for buckets that fill as backward runs)."""
        ops = {name: backend.arrays_for(name, g) for name, g in grads.items()}
        arrays = {name: ops[name].view(name, g) for name, g in grads.items()}
        settings = {name: {**settings_for(name, a, self.rules, self.default),
                           **({"place": "device"} if ops[name].on_device else {})}
                    for name, a in arrays.items()}
        self._agree_on_layout(arrays, settings, order)
        return arrays

    @property
    def plan(self) -> list[bucketing.Bucket]:
        """The buckets of the last :meth:`prepare` (empty before; not to be changed)."""
        return self._plan or []

    def start(self, b: bucketing.Bucket, arrays: Mapping[str, Any]) -> tuple[Any, ...]:
        """Pack bucket ``b`` of ``arrays``, add its kept residual and start its nonblocking
        allreduce; what :meth:`finish` takes."""
        on = DEVICE if b.settings.get("place") == "device" else HOST
        call = {k: v for k, v in b.settings.items() if k not in NOT_CALL_SETTINGS}
        x, y = self._buffers(b, on)
        for name, off, size in zip(b.names, b.offsets, b.sizes, strict=True):
            on.copy(x[off: off + size], arrays[name])
        x = self.feedback.compensate(b.key, x, on)
        codec = feedback_codec(self.comm, call) if self.feedback.active else None
        req = self.comm.Iallreduce(x, y, **call)
        if codec is not None:  # (its update made while the call is in flight)
            self.feedback.ahead(b.key, x, codec, on)
        return b, on, call, req, x, y  # x: untouched until the next step

    def finish(self, pending: Sequence[tuple[Any, ...]], arrays: Mapping[str, Any]) -> None:
        """Complete the started buckets in order: keep each one's residual, average, copy
        the results back into ``arrays``; one step of error feedback."""
        p = self.comm.Get_size()
        for b, on, call, req, sent, y in pending:
            req.Wait()
            if self.feedback.active:
                self.feedback.settle(b.key, on, carried_otherwise(self.comm, call, sent, req,
                                                                  on))
            if self.average:
                on.divide(y, p)
            for name, off, size in zip(b.names, b.offsets, b.sizes, strict=True):
                on.copy(arrays[name], y[off: off + size])
        self.feedback.end_step()

    # -- helpers ------------------------------------------------------------------
    def _agree_on_layout(self, arrays: dict[str, np.ndarray],
                         settings: dict[str, dict[str, Any]],
                         order: Sequence[str] | None = None) -> None:
        fp = bucketing.fingerprint(arrays, settings, order)
        every = self.comm.allgather(fp)  # pickled, plain MPI: tiny
        if len(set(every)) != 1:
            raise ValueError(
                "GradientReducer.reduce: the ranks passed different gradient names, shapes, "
                f"dtypes or rule settings (fingerprints {sorted(set(every))}); this rank "
                f"(rank {self.comm.Get_rank()}) has {len(arrays)} gradients")
        if fp != self._plan_fp:
            self._plan = bucketing.plan(arrays, settings, self.bucket_bytes, order)
            self._plan_fp = fp
            self._flat.clear()

    def _buffers(self, b: bucketing.Bucket, on: Any) -> tuple[Any, Any]:
        """The bucket's send and receive buffers (host or device), kept across steps."""
        bufs = self._flat.get(b.key)
        if bufs is None:
            bufs = self._flat[b.key] = (on.empty(b.size, b.dtype), on.empty(b.size, b.dtype))
        return bufs

    def describe(self) -> list[dict[str, Any]]:
        """The current buckets: names, values, settings (after a first :meth:`reduce`)."""
        return [{"names": b.names, "values": b.size, "dtype": b.dtype.name,
                 "settings": json.loads(b.key[0])} for b in (self._plan or [])]


def feedback_codec(comm: Any, call: dict[str, Any]) -> Any:
    """The codec a call with settings ``call`` compresses with, which error feedback's round
    trip takes (:meth:`ErrorFeedback.ahead`); a ValueError where the codec is 'auto'."""
    pol = comm.resolved_policy(**call)
    if pol.auto:
        raise ValueError("error feedback needs a named codec (the codec is 'auto'); pass "
                         "codec= to the reducer or its rules")
    return pol.codec


def carried_otherwise(comm: Any, call: dict[str, Any], x: Any, req: Any, on: Any) -> Any:
    """None where the finished allreduce ``req`` carried this rank's ``x`` as its codec's
    round trip of the whole buffer (what :meth:`ErrorFeedback.ahead` assumed); else C(x)
    as it carried it: ``x`` itself when the call went to plain MPI (the communicator decides
    that with every rank: NaN/Inf anywhere, below the threshold, ...), and in the direct
    allreduce, which sends this rank's own chunk nowhere (it is added exact), the round
    trip with that chunk exact. (The codecs code every block on its own, and chunks start
    on whole blocks, so the round trip of the whole buffer is that of each chunk sent.)"""
    if not getattr(req, "compressed", False):
        return x
    if getattr(req.record, "reason", "") != "direct":
        return None
    carried = on.roundtrip(feedback_codec(comm, call), x)
    counts, displs = split(x.size, comm.Get_size())
    at, n = displs[comm.Get_rank()], counts[comm.Get_rank()]
    on.copy(carried[at : at + n], x[at : at + n])
    return carried
