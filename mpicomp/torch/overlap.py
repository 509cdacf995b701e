"""Gradient buckets allreduced while backward runs (``DistributedOptimizer(overlap=True)``).

DDP's way: the reducer's buckets are packed in backward's order (the
parameters reversed), a hook on every parameter
(``register_post_accumulate_grad_hook``) marks its gradient ready, and
each bucket whose gradients are all ready starts its nonblocking
compressed ``Iallreduce`` (:meth:`mpicomp.training.GradientReducer.start`),
in the plan's order on every rank, while backward goes on to the layers
before. At the end of backward a parameter that got no gradient gets zeros
(as DDP fills an unused parameter's slot) and the remaining buckets start;
``synchronize()`` (``step()``) waits for them, averages and writes the
results back into ``.grad`` (:meth:`~mpicomp.training.GradientReducer.finish`).
A helper thread drives the started plain requests meanwhile and waits for
mpicomp's own (:mod:`.progress`), so plain buckets travel during backward
too.

The first step has no plan yet: it reduces at ``synchronize()``, which
makes the plan every rank agrees on. One backward per step: a second one
before the step raises (accumulate micro-batches with ``overlap=False``).
"""
from __future__ import annotations

from typing import Any

import torch

from .progress import Progress
from .tensors import reducible as _reducible
from .tensors import write_back as _write_back

__all__ = ["BackwardAllreduce"]


class BackwardAllreduce:
    """Drives ``reducer`` from the hooks of ``named`` (see the module)."""

    def __init__(self, reducer: Any, named: list[tuple[str, Any]]) -> None:
        self.reducer = reducer
        self.params = {n: q for n, q in named if q.requires_grad}
        #: backward's order: the parameters reversed
        self.order = list(reversed(self.params))
        self._arrays: dict[str, Any] = {}
        self._back: list[tuple[Any, Any]] = []  # (a .grad, its float32 copy)
        self._pending: list[tuple[Any, ...]] = []
        self._tested: list[Any] = []  # the helper thread's futures, one per started bucket
        self._next = 0
        self._callback_queued = False
        self.staged = 0  #: gradients that went through a float32 copy (all steps)
        self._progress = Progress()
        self._handles = [q.register_post_accumulate_grad_hook(self._hook(n))
                         for n, q in self.params.items()]

    def _hook(self, name: str) -> Any:
        return lambda q: self._on_gradient(name, q)

    def _on_gradient(self, name: str, q: Any) -> None:
        if not self.reducer.plan:
            return  # (the first step: reduced at synchronize)
        if name in self._arrays:
            raise RuntimeError("DistributedOptimizer(overlap=True) reduces gradients during "
                               "backward: one backward per step (to accumulate micro-batches "
                               "pass overlap=False)")
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        self._arrays[name] = self._view(name, q.grad)
        plan = self.reducer.plan
        while self._next < len(plan) and all(n in self._arrays for n in plan[self._next].names):
            self._start(plan[self._next])
            self._next += 1

    def _start(self, b: Any) -> None:
        started = self.reducer.start(b, self._arrays)
        self._pending.append(started)
        self._tested.append(self._progress.watch(started[3]))  # (its request)

    def _end_backward(self) -> None:
        self._callback_queued = False
        for name, q in self.params.items():
            if name not in self._arrays:  # no gradient reached it: zeros, as DDP
                q.grad = torch.zeros_like(q)
                self._arrays[name] = self._view(name, q.grad)
        plan = self.reducer.plan
        for b in plan[self._next:]:
            self._start(b)
        self._next = len(plan)

    def synchronize(self) -> None:
        """Finish this step's buckets (or, with none started, reduce every gradient now)."""
        if not self._pending:
            for q in self.params.values():
                if q.grad is None:
                    q.grad = torch.zeros_like(q)
            grads = {n: _reducible(q.grad, self._back) for n, q in self.params.items()}
            arrays = self.reducer.prepare(grads, order=self.order)
            self._pending = [self.reducer.start(b, arrays) for b in self.reducer.plan]
            self._arrays = arrays
        try:
            for tested in self._tested:
                tested.result()  # (the helper completed the request: Wait may follow)
            self.reducer.finish(self._pending, self._arrays)
            _write_back(self._back)
            self.staged += len(self._back)
        finally:
            self._arrays, self._back, self._pending, self._next = {}, [], [], 0
            self._tested = []

    def _view(self, name: str, g: Any) -> Any:
        """The reducer's array of gradient ``g`` (as :meth:`GradientReducer.prepare` makes)."""
        from .. import backend

        raw = _reducible(g, self._back)
        return backend.arrays_for(name, raw).view(name, raw)

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
