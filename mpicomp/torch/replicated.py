"""Replicated data parallelism: every rank starts alike, and averages its gradients.

:func:`broadcast_parameters` copies the root's tensors to every rank;
:class:`DistributedOptimizer` averages the gradients with a
:class:`mpicomp.training.GradientReducer` before each step (or during
backward, :mod:`mpicomp.torch.overlap`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .tensors import reducible, require_torch, world, write_back

__all__ = ["DistributedOptimizer", "broadcast_parameters"]


def broadcast_parameters(state: Mapping[str, Any] | Iterable[tuple[str, Any]], root: int = 0,
                         comm: Any = None) -> None:
    """Copy ``root``'s tensors to every rank, exactly (plain MPI, name order).

    ``state``: a ``state_dict()`` or ``named_parameters()``; every rank must
    hold the same names, shapes and dtypes.
    """
    torch = require_torch()
    comm = world(comm)
    items = sorted(dict(state).items())
    desc = [(n, tuple(t.shape), str(t.dtype)) for n, t in items]
    if len(set(map(repr, comm.allgather(desc)))) != 1:
        raise ValueError("broadcast_parameters: the ranks hold different names, shapes or "
                         "dtypes")
    with torch.no_grad():
        for _, t in items:
            if not torch.is_tensor(t) or t.numel() == 0:
                continue
            host = t.detach().to("cpu").contiguous()
            raw = host.view(torch.uint8) if host.element_size() == 1 else host.view(
                {2: torch.int16, 4: torch.int32, 8: torch.int64}[host.element_size()])
            buf = raw.numpy()
            comm.Bcast(buf, root=root, codec="none")
            if host.data_ptr() != t.data_ptr():
                t.copy_(host)


class DistributedOptimizer:
    """An optimizer whose ``step()`` first averages the gradients across the ranks."""

    def __init__(self, optimizer: Any, named_parameters: Iterable[tuple[str, Any]],
                 comm: Any = None, overlap: bool = False, **reducer_settings: Any) -> None:
        from ..training import GradientReducer

        require_torch()
        self.optimizer = optimizer
        self.named = list(named_parameters)
        names = [n for n, _ in self.named]
        if len(set(names)) != len(names):
            raise ValueError("named_parameters has duplicate names")
        self.reducer = GradientReducer(world(comm), **reducer_settings)
        self._staged = 0
        #: with ``overlap``: the buckets reduced during backward (:mod:`.overlap`)
        self.backward = None
        if overlap:
            from .overlap import BackwardAllreduce

            self.backward = BackwardAllreduce(self.reducer, self.named)

    @property
    def staged(self) -> int:
        """Gradients that went through a float32 copy (all steps)."""
        return self._staged + (self.backward.staged if self.backward is not None else 0)

    def step(self, closure: Any = None) -> Any:
        self.synchronize()
        return self.optimizer.step(closure) if closure is not None else self.optimizer.step()

    def synchronize(self) -> None:
        """Average the gradients now (``step()`` does it first; with ``overlap``, finish
        the reductions backward started)."""
        if self.backward is not None:
            self.backward.synchronize()
            return
        back: list[tuple[Any, Any]] = []
        grads = {name: reducible(p.grad, back) for name, p in self.named
                 if p.grad is not None}
        self.reducer.reduce(grads)
        write_back(back)
        self._staged += len(back)

    def zero_grad(self, *args: Any, **kwargs: Any) -> Any:
        return self.optimizer.zero_grad(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # param_groups, state, state_dict, ...
        return getattr(self.optimizer, name)
