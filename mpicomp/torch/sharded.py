"""Sharded data parallelism (ZeRO stages 1 and 2): each rank keeps the optimizer state of
``1/p`` of the parameters.

::

    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=g.dp,
                              lr=1e-3, codec="bitplane", rate=4.25, error_feedback="loco")
    loss.backward(); opt.step()

(the shape of PyTorch's ``ZeroRedundancyOptimizer``). The parameters, in the
order given, are one flat float32 vector cut into buckets of at most
``bucket_mib`` MiB, a multiple of the communicator's size ``p`` values each
but the last, which is padded with zeros to one (so any tensor sizes shard
evenly); rank ``r`` owns the ``r``-th part of every bucket. ``step()`` after ``backward()``:

1. reduce-scatters each bucket of the flat gradient (``Reduce_scatter_block``
   with the gradient settings: ``codec``, ``rate``, ``threshold``,
   ``algorithm``), this rank receiving the sum of its part, averaged over
   the ranks; with
   ``error_feedback`` (``"classic"`` or ``"loco"``, :mod:`mpicomp.training.feedback`)
   what compression lost of what this rank sent is added to its next step's
   gradient;
2. steps ``optimizer_class`` on this rank's part alone (float32 master
   values: its state is ``1/p`` of the unsharded optimizer's);
3. allgathers each bucket's updated parts into every rank's parameters: plain by
   default, or compressed with ``param_settings`` (e.g. ``{"codec":
   "bitplane", "rate": 8.25}``, ZeRO++'s quantized weights), the owner
   keeping its exact master values. Every rank decodes every part, its own
   included, so the parameters are the same bits on every replica.

At construction rank 0's parameters are copied to every rank (exactly), so
every replica starts alike.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from ..backend.host import HOST
from ..training.feedback import ErrorFeedback
from . import _world

__all__ = ["GRADIENT_SETTINGS", "ShardedOptimizer"]

#: the keyword arguments that are the gradient reduce-scatter's mpicomp settings; any
#: other keyword is the optimizer's
GRADIENT_SETTINGS = ("codec", "rate", "threshold", "algorithm")


class ShardedOptimizer:
    """``optimizer_class`` on this rank's shard of ``named_parameters`` (see the module)."""

    def __init__(self, named_parameters: Iterable[tuple[str, Any]],
                 optimizer_class: Any = torch.optim.Adam, comm: Any = None,
                 error_feedback: str = "none", beta: float = 0.8, reset_every: int = 1024,
                 param_settings: Mapping[str, Any] | None = None, bucket_mib: float = 25.0,
                 **optimizer_defaults_and_settings: Any) -> None:
        self.comm = _world(comm)
        self.named = _named(named_parameters)
        names = [n for n, _ in self.named]
        if len(set(names)) != len(names):
            raise ValueError("named_parameters has duplicate names")
        for name, p in self.named:
            if not p.is_floating_point():
                raise TypeError(f"parameter {name!r} is {p.dtype}: a sharded optimizer takes "
                                "floating-point parameters")
        given = dict(optimizer_defaults_and_settings)
        self.gradient_settings = {k: given.pop(k) for k in GRADIENT_SETTINGS if k in given}
        self.param_settings = dict(param_settings or {"codec": "none"})
        # bad settings: an error now, on every rank (no rank waits in a collective)
        self.comm.resolved_policy(**self.gradient_settings)
        self.comm.resolved_policy(**self.param_settings)
        self.feedback = ErrorFeedback(error_feedback, beta, reset_every)
        if self.feedback.active and self.comm.resolved_policy(**self.gradient_settings).auto:
            raise ValueError("error feedback needs a named codec (the codec is 'auto'); "
                             "pass codec= with error_feedback=")
        layout = [(n, tuple(p.shape), str(p.dtype)) for n, p in self.named]
        if len(set(map(repr, self.comm.allgather(layout)))) != 1:
            raise ValueError("ShardedOptimizer: the ranks hold different parameter names, "
                             "shapes or dtypes")
        if not float(bucket_mib) > 0:
            raise ValueError(f"bucket_mib must be > 0, got {bucket_mib!r}")
        size = self.comm.Get_size()
        self.numel = sum(p.numel() for _, p in self.named)
        # a bucket's values: a multiple of p, so that only the last bucket is padded and the
        # buckets lie one after another in one padded flat vector
        per_bucket = max(size, int(float(bucket_mib) * (1 << 20)) // 4 // size * size)
        #: the buckets: (start, values) in the flat vector, (start, values) of this rank's
        #: part in the master vector
        self.buckets: list[tuple[int, int, int, int]] = []
        at = master_at = 0
        while at < self.numel or not self.buckets:
            n = min(per_bucket, self.numel - at)
            part = -(-n // size)
            self.buckets.append((at, n, master_at, part))
            at, master_at = at + n, master_at + part
        start, _, _, part = self.buckets[-1]
        flat = np.zeros(start + size * part, np.float32)  # (zeros after the last value)
        self._fill(flat, [p for _, p in self.named])
        self.comm.Bcast(flat, root=0, codec="none")  # every replica starts alike
        self._params = flat  # the parameters as every rank holds them
        self._write_params()
        self._grad = np.zeros_like(flat)  # the flat gradient this rank sends
        self.master = torch.nn.Parameter(torch.from_numpy(self._gather_mine(flat)))
        self._shard_grad = np.empty(self.master.numel(), np.float32)
        self.optimizer = optimizer_class([self.master], **given)
        self.steps = 0
        self._reduced = False  # this step's gradient already reduce-scattered (clipping)

    # -- one step ------------------------------------------------------------------------
    def step(self, closure: Any = None) -> Any:
        """Reduce-scatter the gradients, step this rank's shard, allgather the parameters
        (collective: every rank of the communicator)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._reduced:
            self._reduce_gradients()
        self._reduced = False
        self.optimizer.step()
        p = self.comm.Get_size()
        mine = self.master.detach().numpy()
        for start, _, at, part in self.buckets:  # straight into every rank's parameters
            self.comm.Allgather(mine[at:at + part], self._params[start:start + p * part],
                                **self.param_settings)
        self._write_params()
        self.steps += 1
        return loss

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Scale this step's gradient so that its norm over every rank's shard (the whole
        model's averaged gradient) is at most ``max_norm``, as ``torch.nn.utils.
        clip_grad_norm_`` does on an unsharded model; returns that norm (collective: every
        rank, after ``backward()`` and before ``step()``, which then uses the clipped
        gradient). The gradients are reduce-scattered here instead of in ``step()``."""
        if not float(max_norm) > 0 or not float(norm_type) > 0:
            raise ValueError(f"clip_grad_norm_: max_norm and norm_type must be > 0, got "
                             f"{max_norm!r} and {norm_type!r}")
        if not self._reduced:
            self._reduce_gradients()
            self._reduced = True
        shard = self.master.grad
        kind = float(norm_type)
        if kind == float("inf"):
            local = float(shard.abs().max()) if shard.numel() else 0.0
            total = self.comm.allreduce(local, op=MPI.MAX)
        else:
            local = float(shard.double().abs().pow(kind).sum())
            total = self.comm.allreduce(local) ** (1.0 / kind)
        scale = float(max_norm) / (total + 1e-6)
        if scale < 1.0:
            shard.mul_(scale)
        return torch.tensor(total)

    def _reduce_gradients(self) -> None:
        """Reduce-scatter the flat gradient into this rank's averaged shard (``master.grad``),
        with error feedback."""
        p = self.comm.Get_size()
        self._fill(self._grad, [q.grad for _, q in self.named])
        grad = self._shard_grad
        for k, (start, _, at, part) in enumerate(self.buckets):
            send = self.feedback.compensate(k, self._grad[start:start + p * part], HOST)
            before = self._compressed() if self.feedback.active else 0
            self.comm.Reduce_scatter_block(send, grad[at:at + part], **self.gradient_settings)
            if self.feedback.active:
                pol = self.comm.resolved_policy(**self.gradient_settings)
                carried = (HOST.roundtrip(pol.codec, send)
                           if self._compressed() > before else send)
                self.feedback.update(k, send, carried, HOST)
        self.feedback.end_step()
        grad /= p
        self.master.grad = torch.from_numpy(grad)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, q in self.named:
            if q.grad is not None:
                if set_to_none:
                    q.grad = None
                else:
                    q.grad.zero_()

    # -- checkpoints ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's state (each rank saves its own, as ``ZeroRedundancyOptimizer``'s
        shards): its shard's optimizer state and master values, the parameters as every rank
        holds them, the error feedback's residuals and the step count, and the layout
        (ranks, buckets) a resume must match. Loaded by :meth:`load_state_dict`, a resumed
        run continues with the same bits as an uninterrupted one."""
        return {"optimizer": self.optimizer.state_dict(),
                "master": self.master.detach().clone(),
                "params": torch.from_numpy(self._params.copy()),
                "feedback": self.feedback.state_dict(),
                "steps": self.steps,
                "layout": {"rank": self.comm.Get_rank(), "size": self.comm.Get_size(),
                           "buckets": list(self.buckets), "numel": self.numel}}

    def consolidate_state_dict(self, to: int = 0) -> dict[str, Any] | None:
        """Every rank's :meth:`state_dict`, gathered on rank ``to`` (collective; as
        ``ZeroRedundancyOptimizer.consolidate_state_dict``): ``{"shards": [rank 0's, ...]}``
        there, one file for the whole optimizer; None on the other ranks. Every rank may
        load it back with :meth:`load_state_dict` (each takes its own shard)."""
        shards = self.comm.gather(self.state_dict(), root=to)
        return {"shards": shards} if self.comm.Get_rank() == to else None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore this rank's :meth:`state_dict`, or its shard of a
        :meth:`consolidate_state_dict` (collective: every rank loads its own; a state of
        another layout is refused on every rank)."""
        if isinstance(state, Mapping) and "shards" in state:
            shards = state["shards"]
            state = shards[self.comm.Get_rank()] if len(shards) > self.comm.Get_rank() else {}
        layout = {"rank": self.comm.Get_rank(), "size": self.comm.Get_size(),
                  "buckets": list(self.buckets), "numel": self.numel}
        given = state.get("layout") if isinstance(state, Mapping) else None
        mismatch = None if given == layout else (
            f"rank {layout['rank']} of {layout['size']}: a state of layout {given!r}, this "
            f"optimizer's is rank {layout['rank']} of {layout['size']}, {self.numel} values "
            f"in {len(self.buckets)} buckets")
        every = self.comm.allgather(mismatch)
        if any(every):
            raise ValueError("ShardedOptimizer.load_state_dict: the state does not match the "
                             f"optimizer ({next(m for m in every if m)})")
        with torch.no_grad():
            self.master.copy_(state["master"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._params[:] = np.asarray(state["params"], dtype=np.float32)
        self._write_params()
        self.feedback.load_state_dict(state["feedback"])
        self.steps = int(state["steps"])

    # -- what it holds -------------------------------------------------------------------
    def state_bytes(self) -> int:
        """Bytes of this rank's optimizer state (its shard's), master values included."""
        total = self.master.numel() * self.master.element_size()
        for state in self.optimizer.state.values():
            total += sum(v.numel() * v.element_size() for v in state.values()
                         if torch.is_tensor(v))
        return total

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def owned(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions in the flat parameter vector, positions in :attr:`master`) of the
        values this rank owns (padding left out)."""
        rank = self.comm.Get_rank()
        flat, master = [], []
        for start, n, at, part in self.buckets:
            first, last = rank * part, min((rank + 1) * part, n)
            if last > first:
                flat.append(np.arange(start + first, start + last))
                master.append(np.arange(at, at + last - first))
        return (np.concatenate(flat) if flat else np.zeros(0, np.int64),
                np.concatenate(master) if master else np.zeros(0, np.int64))

    # -- helpers -------------------------------------------------------------------------
    def _gather_mine(self, flat: np.ndarray) -> np.ndarray:
        """This rank's part of every bucket of ``flat``, one after another (padded)."""
        mine = np.zeros(sum(part for *_, part in self.buckets), np.float32)
        where_flat, where_master = self.owned()
        mine[where_master] = flat[where_flat]
        return mine

    def _compressed(self) -> int:
        return self.comm.stats().get("Reduce_scatter_block", {}).get("compressed", 0)

    def _fill(self, flat: np.ndarray, tensors: list[Any]) -> None:
        """``flat`` := the tensors one after another as float32 (None: zeros), then zeros."""
        at = 0
        for (_, q), t in zip(self.named, tensors, strict=True):
            n = q.numel()
            if t is None:
                flat[at:at + n] = 0
            else:
                flat[at:at + n] = t.detach().reshape(-1).to(device="cpu",
                                                            dtype=torch.float32).numpy()
            at += n
        flat[at:] = 0

    def _write_params(self) -> None:
        """Every parameter := its values in the flat vector every rank holds."""
        at = 0
        with torch.no_grad():
            for _, q in self.named:
                n = q.numel()
                q.copy_(torch.from_numpy(self._params[at:at + n]).view_as(q))
                at += n


def _named(params: Iterable[Any]) -> list[tuple[str, Any]]:
    """``(name, parameter)`` pairs of ``named_parameters()`` as given, or of
    ``parameters()`` named by their place (``"0"``, ``"1"``, ...)."""
    items = list(params)
    if any(isinstance(item, Mapping) for item in items):
        raise TypeError("ShardedOptimizer takes named_parameters() or parameters(); param "
                        "groups (dicts) are not supported yet: one set of optimizer settings "
                        "applies to every parameter")
    if all(isinstance(item, tuple) and len(item) == 2 for item in items):
        return [(str(n), q) for n, q in items]
    if any(isinstance(item, tuple) for item in items):
        raise TypeError("ShardedOptimizer: mixed (name, parameter) pairs and parameters")
    return [(str(i), q) for i, q in enumerate(items)]
