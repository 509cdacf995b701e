"""Pipeline parallelism: one stage of a model per rank of a communicator, micro-batches
through it (GPipe's and the 1F1B schedule).

Rank ``s`` of the pipeline communicator holds stage ``s`` (a ``torch.nn.Module``;
the first stage takes the batch, the last computes the loss)::

    stage = mt.PipelineStage(my_layers, g.pp)
    loss = stage.step(inputs, targets, loss_fn, micro_batches=4)   # on every stage
    optimizer.step()

``step`` cuts the batch into ``micro_batches`` equal parts along dimension 0.
Each stage receives a micro-batch's activations from the stage before,
sends its outputs to the stage after, and on the way back sends the gradient
of its inputs to the stage before. ``schedule="gpipe"`` runs every forward
pass, then every backward pass in reverse order; ``"1f1b"`` (the default,
PipeDream-Flush as Megatron-LM runs it) runs ``stages - stage - 1``
forward passes, then one forward and one backward in turn, then the
remaining backward passes, so a stage holds the activations of at most
that many micro-batches (GPipe: all of them). Sends never wait (``Isend``,
completed at the end of the step), receives do, in the schedule's order, so
no two stages wait on each other. The gradients of the stage's parameters
accumulate over the micro-batches, each micro-batch's loss weighted
``1 / micro_batches``, so they are the whole batch's (the loss's reduction
being a mean). The messages are the communicator's own ``Isend`` and
``Recv`` without settings: its policy decides how activations and gradients
travel (``parallel_groups`` gives the pipeline group a mild one, bitplane at
about 16 bits per value). A small pickled header ahead of each
micro-batch's activations tells the next stage their shape and dtype.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .tensors import buffer as _buffer

__all__ = ["PipelineStage"]

#: message tags: a micro-batch's header, activations and gradient (TAGS per micro-batch)
HEADER, ACTIVATION, GRADIENT, TAGS = 0, 1, 2, 3
#: the schedules of PipelineStage.step
SCHEDULES = ("1f1b", "gpipe")


class PipelineStage:
    """This rank's stage of a pipeline over ``comm`` (stage index: the rank)."""

    def __init__(self, module: torch.nn.Module, comm: Any, device: Any = None) -> None:
        self.module = module
        self.comm = comm
        self.stage, self.stages = comm.Get_rank(), comm.Get_size()
        if device is None:  # where the received activations go: the module's device
            first = next(module.parameters(), None)
            device = first.device if first is not None else "cpu"
        self.device = torch.device(device)
        #: the most micro-batches whose activations the last step held at once
        self.peak_in_flight = 0

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.stages - 1

    def _micro(self, batch: Any, micro_batches: int, what: str, call: str) -> list[Any]:
        if batch is None:
            raise ValueError(f"PipelineStage.{call}: stage {self.stage} needs {what}")
        if batch.shape[0] % micro_batches:
            raise ValueError(f"PipelineStage.{call}: the batch of {batch.shape[0]} ({what}) "
                             f"must be divisible by micro_batches={micro_batches}")
        return list(batch.chunk(micro_batches, dim=0))

    def _receive_activation(self, m: int) -> Any:
        shape, dtype = self.comm.recv(source=self.stage - 1, tag=TAGS * m + HEADER)
        x = torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
        self.comm.Recv(_buffer(x), self.stage - 1, TAGS * m + ACTIVATION)
        return x.requires_grad_(True)

    def _send(self, t: Any, dest: int, tag: int, pending: list[Any]) -> None:
        """``t`` to ``dest`` without waiting (the request and the buffer kept in
        ``pending`` until the step's end): a stage never blocks in a send."""
        data = t.detach().contiguous()
        pending.append((self.comm.Isend(_buffer(data), dest, tag), data))

    def _forward(self, m: int, xs: Any, ts: Any, micro_batches: int, loss_fn: Any,
                 kept: dict[int, tuple[Any, Any]] | None, pending: list[Any]) -> float:
        """Micro-batch ``m`` forward; returns its share of the loss (0 off the last stage)."""
        x = xs[m] if self.first else self._receive_activation(m)
        y = self.module(x)
        share = 0.0
        if self.last:
            y = loss_fn(y, ts[m]) / micro_batches
            share = float(y.detach())
        else:
            dtype = str(y.dtype).removeprefix("torch.")
            pending.append((self.comm.isend((tuple(y.shape), dtype), dest=self.stage + 1,
                                            tag=TAGS * m + HEADER), None))
            self._send(y, self.stage + 1, TAGS * m + ACTIVATION, pending)
        if kept is not None:  # (None: evaluate keeps nothing for a backward pass)
            kept[m] = (x, y)
            self.peak_in_flight = max(self.peak_in_flight, len(kept))
        return share

    def _backward(self, m: int, kept: dict[int, tuple[Any, Any]], pending: list[Any]) -> None:
        """Micro-batch ``m`` backward (its activations let go)."""
        x, y = kept.pop(m)
        if self.last:
            y.backward()
        else:
            grad = torch.empty_like(y)
            self.comm.Recv(_buffer(grad), self.stage + 1, TAGS * m + GRADIENT)
            y.backward(grad)
        if not self.first:
            if x.grad is None:  # the stage does not depend on its input
                x.grad = torch.zeros_like(x)
            self._send(x.grad, self.stage - 1, TAGS * m + GRADIENT, pending)

    def step(self, inputs: Any = None, targets: Any = None,
             loss_fn: Callable[[Any, Any], Any] | None = None,
             micro_batches: int = 1, schedule: str = "1f1b") -> float:
        """Forward and backward of one batch through the whole pipeline (collective over
        the pipeline communicator). ``inputs``: the batch, on the first stage; ``targets``
        and ``loss_fn(outputs, targets)`` (a mean over the micro-batch), on the last.
        ``schedule``: ``"gpipe"`` (every forward, then every backward) or ``"1f1b"``
        (after ``stages - stage - 1`` forwards, one forward and one backward in turn: at
        most that many micro-batches' activations held at once). Returns the batch's loss
        (the mean of the micro-batches' losses) on every stage; the parameters' gradients
        are accumulated into ``.grad`` as ``backward()`` does."""
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got {schedule!r}")
        xs, ts = self._batches("step", inputs, targets, loss_fn, micro_batches)
        kept: dict[int, tuple[Any, Any]] = {}  # (input, output) of each micro-batch in flight
        pending: list[Any] = []  # (request, buffer) of the sends
        total = 0.0
        self.peak_in_flight = 0
        ahead = (micro_batches if schedule == "gpipe"
                 else min(self.stages - self.stage - 1, micro_batches))
        for m in range(ahead):
            total += self._forward(m, xs, ts, micro_batches, loss_fn, kept, pending)
        for m in range(micro_batches - ahead):  # 1F1B's steady state
            total += self._forward(ahead + m, xs, ts, micro_batches, loss_fn, kept, pending)
            self._backward(m, kept, pending)
        for m in sorted(kept, reverse=schedule == "gpipe"):
            self._backward(m, kept, pending)
        return self._finish(total, pending)

    def evaluate(self, inputs: Any = None, targets: Any = None,
                 loss_fn: Callable[[Any, Any], Any] | None = None,
                 micro_batches: int = 1) -> float:
        """The batch's loss without a backward pass (Megatron-LM's ``forward_only``): the
        forward passes of every micro-batch under ``torch.no_grad()``, nothing kept, no
        gradient touched (collective over the pipeline communicator). Arguments as
        :meth:`step`; returns the mean of the micro-batches' losses on every stage."""
        xs, ts = self._batches("evaluate", inputs, targets, loss_fn, micro_batches)
        pending: list[Any] = []
        total = 0.0
        with torch.no_grad():
            for m in range(micro_batches):
                total += self._forward(m, xs, ts, micro_batches, loss_fn, None, pending)
            return self._finish(total, pending)

    def _batches(self, call: str, inputs: Any, targets: Any, loss_fn: Any,
                 micro_batches: Any) -> tuple[Any, Any]:
        """The checked arguments of :meth:`step` and :meth:`evaluate`: this stage's
        micro-batches of the inputs (first stage) and of the targets (last stage)."""
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) \
                or micro_batches < 1:
            raise ValueError(f"micro_batches must be a positive integer, got {micro_batches!r}")
        if self.last and loss_fn is None:
            raise ValueError(f"PipelineStage.{call}: the last stage ({self.stage}) needs "
                             "loss_fn")
        xs = self._micro(inputs, micro_batches, "inputs", call) if self.first else None
        ts = self._micro(targets, micro_batches, "targets", call) if self.last else None
        return xs, ts

    def _finish(self, total: float, pending: list[Any]) -> float:
        """The sends completed; the batch's loss, from the last stage, on every stage."""
        for req, _ in pending:
            req.Wait()
        return float(self.comm.bcast(total, root=self.stages - 1))
