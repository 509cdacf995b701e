"""A sharded optimizer's gradients: reduce-scattered bucket by bucket as backward produces
them, each rank keeping only its shard (ZeRO stage 2).

A hook on every parameter (``register_post_accumulate_grad_hook``) copies
the parameter's new gradient into its buckets' send buffers and frees it
(``param.grad = None``). A bucket whose values have all arrived is started
as a nonblocking ``Ireduce_scatter_block`` of the gradient settings, after
the kept residual of error feedback is added; buckets start in their
layout's order on every rank (a bucket ready early waits for the ones
before it), at most :data:`IN_FLIGHT` at a time (the oldest is completed
first), so that the rank's gradient memory is its shard plus a few
buckets (on the host a completed bucket's send buffer is kept for the next
bucket of its size, at most :data:`IN_FLIGHT` of them: a new one cost its
page faults every step). At the end of backward (an autograd callback) the buckets no
gradient reached start with zeros, every one is completed and its part,
divided by the ranks, is added to the shard: several backward passes
before a step accumulate, as ``.grad`` does. A step with no backward
since the last one (gradients set by hand) reduces the ``.grad`` tensors
as they are.

Error feedback (:mod:`mpicomp.training.feedback`) keeps, per bucket, what
compression lost of what this rank sent. Under the direct reduce-scatter
(``algorithm="allgather"``, the sharded optimizer's default) that is
exactly the round trip of each part sent to another rank (this rank's own
part arrives exact), so the residual carries all this rank's contribution
lost; under the ring (which also requantizes partial sums) it is the round
trip of the whole bucket.

The buckets, the shard and the residuals live where the parameters do
(:class:`.tensors.TensorMemory`): on a CUDA device the copies, the
feedback's arithmetic and the codecs run there, on PyTorch's current stream.
"""
from __future__ import annotations

import collections
from typing import Any, NamedTuple

import torch

from ..training.feedback import ErrorFeedback
from .flat_layout import FlatLayout
from .progress import Progress
from .tensors import TensorMemory

__all__ = ["IN_FLIGHT", "GradientShards"]

#: buckets reduce-scattering at once
IN_FLIGHT = 2


class _Started(NamedTuple):
    """A bucket's reduce-scatter in flight."""
    bucket: int
    req: Any
    tested: Any  #: the helper thread's future of ``req``
    x: Any  #: the send values as the communicator took them
    part: torch.Tensor  #: this rank's received part
    y: Any  #: ``part`` as the communicator took it
    send: torch.Tensor  #: the send tensor, alive until completed
    stream: Any  #: the stream it started on (:meth:`.tensors.TensorMemory.stream`)


class GradientShards:
    """This rank's averaged gradient shard (:attr:`shard`), reduced as backward runs (see
    the module). ``settings``: the reduce-scatter's mpicomp settings; ``memory``: where
    the parameters live (the CPU by default)."""

    def __init__(self, layout: FlatLayout, comm: Any, settings: dict[str, Any],
                 feedback: ErrorFeedback, memory: TensorMemory | None = None) -> None:
        self.layout, self.comm, self.settings, self.feedback = layout, comm, settings, feedback
        self.memory = TensorMemory(torch.device("cpu")) if memory is None else memory
        #: the averaged gradient of this rank's shard, accumulated until :meth:`zero`
        self.shard = self._zeros(layout.shard_numel)
        self._expected = [0] * len(layout.buckets)
        for _, _, q, _ in layout.placed:
            if q.requires_grad:
                for piece in layout.pieces[id(q)]:
                    self._expected[piece.bucket] += piece.count
        self._missing = list(self._expected)
        self._filling: dict[int, torch.Tensor] = {}
        #: send buffers of completed buckets, for the next ones of their size (host memory:
        #: a fresh one costs its page faults every step, several times its copy)
        self._spares: list[torch.Tensor] = []
        self._in_flight: collections.deque[_Started] = collections.deque()
        self._next = 0  # the next bucket to start
        self._callback_queued = False
        #: gradients reduced since the last :meth:`take` (else a step reduces ``.grad``)
        self.reduced = False
        #: the most bytes of send and receive buffers and not yet freed ``.grad`` seen
        self.peak_buffer_bytes = 0
        self._progress = Progress()  # (plain buckets move during backward too)
        self._handles = [q.register_post_accumulate_grad_hook(self._on_gradient)
                         for _, _, q, _ in layout.placed if q.requires_grad]

    # -- during backward -----------------------------------------------------------------
    def _on_gradient(self, q: Any) -> None:
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        self._add(q, q.grad)
        self._note_buffers(q.grad.numel() * q.grad.element_size())
        q.grad = None
        while self._next < len(self._missing) and self._missing[self._next] <= 0:
            self._start(self._next)

    def _add(self, q: Any, grad: Any) -> None:
        g = grad.detach().reshape(-1)
        for piece in self.layout.pieces[id(q)]:
            b = self.layout.buckets[piece.bucket]
            send = self._filling.get(piece.bucket)
            if send is None:
                send = self._filling[piece.bucket] = self._send_buffer(self.layout.size * b.part)
            at = piece.at - b.start
            send[at:at + piece.count].copy_(g[piece.offset:piece.offset + piece.count])
            self._missing[piece.bucket] -= piece.count

    def _start(self, k: int) -> None:
        while len(self._in_flight) >= IN_FLIGHT:
            self.complete_oldest()
        b = self.layout.buckets[k]
        send = self._filling.pop(k, None)
        if send is None:  # no gradient reached it: this rank sends zeros
            send = self._send_buffer(self.layout.size * b.part)
        ops = self.memory.ops
        part = torch.empty(b.part, dtype=torch.float32, device=self.memory.device)
        with self.memory.ordered():
            x = self.feedback.compensate(k, self.memory.values(send, f"bucket {k}"), ops)
            y = self.memory.values(part, f"bucket {k}'s part")
            req = self.comm.Ireduce_scatter_block(x, y, **self.settings)
            if self.feedback.active:  # (its update made while the call is in flight)
                self._ahead(k, x)
        self._in_flight.append(_Started(k, req, self._progress.watch(req), x, part, y, send,
                                        self.memory.stream()))
        self._missing[k] = self._expected[k]
        self._next += 1
        self._note_buffers(0)

    def complete_oldest(self) -> None:
        """Wait for the oldest bucket in flight; add its averaged part to the shard."""
        s = self._in_flight.popleft()
        s.tested.result()  # (the helper thread completes it: one thread at a time may)
        ops = self.memory.ops
        self.memory.after(s.stream)
        with self.memory.ordered():
            s.req.Wait()
            if self.feedback.active:  # (x itself where the call went plain)
                self.feedback.settle(s.bucket, ops,
                                     None if getattr(s.req, "compressed", False) else s.x)
            ops.divide(s.y, self.layout.size)
        b = self.layout.buckets[s.bucket]
        self.shard[b.master_at:b.master_at + b.part] += s.part
        if s.send.device.type == "cpu" and len(self._spares) < IN_FLIGHT:
            self._spares.append(s.send)

    def _end_backward(self) -> None:
        self._callback_queued = False
        for k in range(self._next, len(self.layout.buckets)):
            self._start(k)
        while self._in_flight:
            self.complete_oldest()
        self._next = 0
        self.feedback.end_step()
        self.reduced = True

    # -- from the optimizer ---------------------------------------------------------------
    def reduce_unreduced(self) -> None:
        """When nothing was reduced since the last :meth:`take`: the ``.grad`` tensors as
        they are (collective)."""
        if self.reduced:
            return
        for _, _, q, _ in self.layout.placed:
            if q.grad is not None:
                self._add(q, q.grad)
        self._end_backward()

    def take(self) -> None:
        """A step used the shard: the next gradients are reduced anew."""
        self.reduced = False

    def zero(self) -> None:
        self.shard.zero_()

    def buffer_bytes(self) -> int:
        """Bytes of the send and receive buffers held now (spare send buffers included)."""
        return (sum(t.numel() * 4 for t in (*self._filling.values(), *self._spares))
                + sum(s.x.nbytes + s.part.numel() * 4 for s in self._in_flight))

    def _note_buffers(self, extra: int) -> None:
        self.peak_buffer_bytes = max(self.peak_buffer_bytes, self.buffer_bytes() + extra)

    def _zeros(self, n: int) -> torch.Tensor:
        return torch.zeros(n, dtype=torch.float32, device=self.memory.device)

    def _send_buffer(self, n: int) -> torch.Tensor:
        """``n`` zeros to send: a completed bucket's buffer of that size where one is spare."""
        for i, t in enumerate(self._spares):
            if t.numel() == n:
                return self._spares.pop(i).zero_()
        return self._zeros(n)

    def _ahead(self, k: int, x: Any) -> None:
        """Bucket ``k``'s error feedback, made while its reduce-scatter of ``x`` is in flight,
        as the call carries ``x`` when it goes compressed: the direct and allgather
        algorithms send each other rank's block as a stream of its own and this rank's
        nowhere (it is added exact), the ring codes the whole buffer block by block."""
        pol = self.comm.resolved_policy(**self.settings)
        pieces = None
        if pol.algorithm in ("allgather", "direct"):
            part = x.size // self.layout.size
            pieces = [slice(j * part, (j + 1) * part) for j in range(self.layout.size)
                      if j != self.layout.rank]
        self.feedback.ahead(k, x, pol.codec, self.memory.ops, pieces)

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
