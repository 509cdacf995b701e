"""Sharded data parallelism (ZeRO stages 1 and 2): each rank keeps the optimizer state of
``1/p`` of the parameters.

::

    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=g.dp,
                              lr=1e-3, codec="bitplane", rate=4.25, error_feedback="loco")
    loss.backward(); opt.step()

(the shape of PyTorch's ``ZeroRedundancyOptimizer``). The parameters, in the
order given, are one flat float32 vector padded with zeros to a multiple of
the communicator's size ``p`` (so any tensor sizes shard evenly); rank ``r``
owns its ``r``-th part. ``step()`` after ``backward()``:

1. reduce-scatters the flat gradient (``Reduce_scatter_block`` with the
   gradient settings: ``codec``, ``rate``, ``threshold``, ``algorithm``),
   this rank receiving the sum of its part, averaged over the ranks; with
   ``error_feedback`` (``"classic"`` or ``"loco"``, :mod:`mpicomp.training.feedback`)
   what compression lost of what this rank sent is added to its next step's
   gradient;
2. steps ``optimizer_class`` on this rank's part alone (float32 master
   values: its state is ``1/p`` of the unsharded optimizer's);
3. allgathers the updated parts into every rank's parameters: plain by
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

from ..training import arrays
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
                 param_settings: Mapping[str, Any] | None = None,
                 **optimizer_defaults_and_settings: Any) -> None:
        self.comm = _world(comm)
        self.named = list(named_parameters)
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
        size, rank = self.comm.Get_size(), self.comm.Get_rank()
        self.numel = sum(p.numel() for _, p in self.named)
        self.part = -(-self.numel // size)  # values each rank owns (the last padded)
        self.mine = slice(rank * self.part, (rank + 1) * self.part)
        flat = np.zeros(self.part * size, np.float32)
        self._fill(flat, [p for _, p in self.named])
        self.comm.Bcast(flat, root=0, codec="none")  # every replica starts alike
        self._params = flat  # the parameters as every rank holds them
        self._write_params()
        self._grad = np.zeros_like(flat)  # the flat gradient this rank sends
        self.master = torch.nn.Parameter(torch.from_numpy(flat[self.mine].copy()))
        self.optimizer = optimizer_class([self.master], **given)
        self.steps = 0

    # -- one step ------------------------------------------------------------------------
    def step(self, closure: Any = None) -> Any:
        """Reduce-scatter the gradients, step this rank's shard, allgather the parameters
        (collective: every rank of the communicator)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        p = self.comm.Get_size()
        self._fill(self._grad, [q.grad for _, q in self.named])
        sent = self.feedback.compensate("flat", self._grad, arrays.HOST)
        shard = np.empty(self.part, np.float32)
        before = self._compressed()
        self.comm.Reduce_scatter_block(sent, shard, **self.gradient_settings)
        if self.feedback.active:
            pol = self.comm.resolved_policy(**self.gradient_settings)
            carried = (arrays.HOST.roundtrip(pol.codec, sent)
                       if self._compressed() > before else sent)
            self.feedback.update("flat", sent, carried, arrays.HOST)
            self.feedback.end_step()
        shard /= p
        self.master.grad = torch.from_numpy(shard)
        self.optimizer.step()
        self.comm.Allgather(self.master.detach().numpy(), self._params, **self.param_settings)
        self._write_params()
        self.steps += 1
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, q in self.named:
            if q.grad is not None:
                if set_to_none:
                    q.grad = None
                else:
                    q.grad.zero_()

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

    # -- helpers -------------------------------------------------------------------------
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
