"""Sharded data parallelism (ZeRO stage 2): each rank keeps the gradients and optimizer
state of ``1/p`` of the parameters.

::

    opt = mt.ShardedOptimizer(model.parameters(), torch.optim.AdamW, comm=g.dp, lr=1e-3,
                              codec="bitplane", rate=4.25, error_feedback="loco")
    loss.backward(); opt.clip_grad_norm_(1.0); opt.step()

(the shape of PyTorch's ``ZeroRedundancyOptimizer``: ``parameters()``,
``named_parameters()`` or param-group dicts with their own ``lr``,
``weight_decay``, ...). The parameters become views of one flat vector
(:mod:`.flat_layout`: each group's parameters in reverse order, cut into
buckets of at most ``bucket_mib`` MiB, rank ``r`` owning the ``r``-th part of
every bucket). Then:

1. during backward, each bucket's gradients are reduce-scattered as soon as
   they are all there (:mod:`.shard_gradients`: nonblocking
   ``Ireduce_scatter_block`` with the gradient settings ``codec``, ``rate``,
   ``threshold``, ``algorithm``; by default the direct algorithm, every
   gradient quantized once) and freed, this rank keeping the average of its
   shard only; with ``error_feedback`` (``"classic"`` or ``"loco"``) what
   compression lost of what this rank sent is added to its next gradient;
2. ``step()`` steps ``optimizer_class`` on this rank's shard alone, in float32
   master values: the parameters themselves for float32 parameters gathered
   plain, a float32 copy of the shard for bfloat16/float16 parameters or
   compressed parameter gathers;
3. and allgathers each bucket's updated parts into every rank's parameters:
   plain by default, or compressed with ``param_settings`` (e.g. ``{"codec":
   "bitplane", "rate": 8.25}``, ZeRO++'s quantized weights; float32 parameters),
   the owner keeping its exact master values. Every rank decodes every part,
   its own included, so the parameters are the same bits on every replica.
   With ``gather_deltas=True`` each step gathers the parameters' change instead:
   the owner's master values minus the values the replicas hold, which every
   rank adds to its parameters. What a compressed gather lost is then part of
   the next step's change (error feedback on the parameters): the replicas stay
   within one gather's codec error of the master values, an error of the size
   of a step's update rather than of the weights, so a low rate holds the loss.
   With :meth:`ShardedOptimizer.gather_during_forward` the gathers start in
   forward's order and the next forward waits for each bucket just before
   the first submodule that uses it (Megatron's ``overlap_param_gather``).

Per rank, for ``P`` float32 parameter values on ``p`` ranks: the parameters
(``4P`` bytes), the gradient shard (``4P/p``) and a few buckets in flight,
and Adam's state (``8P/p``): ``(1 + 3/p)/4`` of replicated Adam's ``16P``
plus the buckets (:meth:`ShardedOptimizer.memory`). At construction rank 0's
parameters are copied to every rank (exactly), so every replica starts alike.
The parameters' ``.grad`` are ``None`` after backward: clip with
:meth:`ShardedOptimizer.clip_grad_norm_`, which also spans tensor- and
pipeline-parallel groups. Everything lives where the parameters do
(:class:`.tensors.TensorMemory`): for CUDA parameters the flat vector, the
buckets, the shard, the master values, the optimizer state and the error
feedback's residuals are device memory, and the codecs and the feedback run
on the device, on PyTorch's current stream. An MPI that is not CUDA-aware
gets a compressed call's bytes through pinned host buffers, a plain call's
whole buffers (the default plain parameter gathers) through host copies.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch
from mpi4py import MPI

from ..training.feedback import ErrorFeedback
from .flat_layout import FlatLayout, param_groups
from .progress import Progress
from .shard_gradients import GradientShards
from .tensors import TensorMemory
from .tensors import world as _world

__all__ = ["GRADIENT_SETTINGS", "ShardedOptimizer"]

#: the keyword arguments that are the gradient reduce-scatter's mpicomp settings; any
#: other keyword is the optimizer's
GRADIENT_SETTINGS = ("codec", "rate", "threshold", "algorithm")

#: parameter dtypes a sharded optimizer takes (float32 master values for every one)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class _Gather(NamedTuple):
    """A bucket's parameter allgather in flight."""
    req: Any
    tested: Any  #: the helper thread's future of ``req``
    #: with gather_deltas: the change received, to add to the bucket's parameters, and this
    #: rank's part of it (the send buffer); else None
    received: torch.Tensor | None
    sent: torch.Tensor | None
    stream: Any  #: the stream it started on (:meth:`.tensors.TensorMemory.stream`)


class ShardedOptimizer:
    """``optimizer_class`` on this rank's shard of ``params`` (see the module).

    ``tensor_parallel`` / ``pipeline_parallel``: the communicators of the other model
    parallel dimensions, for :meth:`clip_grad_norm_` (a parameter not marked
    ``tensor_model_parallel``, as Megatron marks split weights, is a copy on every rank
    of the tensor-parallel group and counts once)."""

    def __init__(self, params: Iterable[Any], optimizer_class: Any = torch.optim.Adam,
                 comm: Any = None, error_feedback: str = "none", beta: float = 0.8,
                 reset_every: int = 1024, residual_dtype: Any = None,
                 param_settings: Mapping[str, Any] | None = None, gather_deltas: bool = False,
                 bucket_mib: float = 25.0,
                 tensor_parallel: Any = None, pipeline_parallel: Any = None,
                 **optimizer_defaults_and_settings: Any) -> None:
        self.comm = _world(comm)
        groups, options = param_groups(params)
        self.named = [item for group in groups for item in group]
        self._check_parameters()
        given = dict(optimizer_defaults_and_settings)
        self.gradient_settings = {k: given.pop(k) for k in GRADIENT_SETTINGS if k in given}
        self.gradient_settings.setdefault("algorithm", "allgather")
        self.param_settings = dict(param_settings or {"codec": "none"})
        # bad settings: an error now, on every rank (no rank waits in a collective)
        self.comm.resolved_policy(**self.gradient_settings)
        compress_params = self.comm.resolved_policy(**self.param_settings).enabled
        feedback = ErrorFeedback(error_feedback, beta, reset_every, residual_dtype)
        if feedback.active and self.comm.resolved_policy(**self.gradient_settings).auto:
            raise ValueError("error feedback needs a named codec (the codec is 'auto'); "
                             "pass codec= with error_feedback=")
        if gather_deltas and not compress_params:
            raise ValueError("gather_deltas sends each step's parameter change compressed: "
                             "give param_settings a codec (e.g. {'codec': 'bitplane', "
                             f"'rate': 4.25}}), got param_settings={param_settings!r}")
        #: whether the parameter gathers carry each step's change (see the module)
        self.gather_deltas = bool(gather_deltas)
        #: bytes of the changes' receive buffers at their most so far (gather_deltas)
        self.peak_delta_bytes = 0
        if not float(bucket_mib) > 0:
            raise ValueError(f"bucket_mib must be > 0, got {bucket_mib!r}")
        self.dtype = self.named[0][1].dtype
        if compress_params and self.dtype != torch.float32:
            raise ValueError(f"param_settings compress float32 parameters; these are "
                             f"{self.dtype}: gather them as they are (param_settings=None)")
        device = self.named[0][1].device
        shape = [[(n, tuple(q.shape), str(q.dtype)) for n, q in group] for group in groups]
        every = self.comm.allgather((shape, device.type, TensorMemory.unusable(device)))
        if len({repr(s) for s, _, _ in every}) != 1:
            raise ValueError("ShardedOptimizer: the ranks hold different parameter names, "
                             "shapes, dtypes or groups")
        if len({d for _, d, _ in every}) != 1:
            raise TypeError("ShardedOptimizer: the ranks' parameters lie on different kinds of "
                            f"device ({sorted({d for _, d, _ in every})})")
        problem = next((u for _, _, u in every if u), None)
        if problem is not None:
            raise TypeError(f"ShardedOptimizer: {problem}")
        #: where the parameters, and so every buffer of this optimizer, live
        self.tensors = TensorMemory(device)
        self.tensor_parallel = None if tensor_parallel is None else _world(tensor_parallel)
        self.pipeline_parallel = (None if pipeline_parallel is None
                                  else _world(pipeline_parallel))
        size = self.comm.Get_size()
        per_bucket = max(size, int(float(bucket_mib) * (1 << 20)) // 4 // size * size)
        self.layout = FlatLayout(groups, size, self.comm.Get_rank(), per_bucket)
        self.buckets = self.layout.buckets
        self.numel = sum(q.numel() for _, q in self.named)
        #: the parameters as every rank holds them; each parameter is a view of it
        self.flat = torch.zeros(self.layout.numel, dtype=self.dtype, device=device)
        with torch.no_grad():
            for _, _, q, at in self.layout.placed:
                self.flat[at:at + q.numel()].copy_(q.detach().reshape(-1))
        with self.tensors.ordered():
            self.comm.Bcast(self._wire(self.flat), root=0, codec="none")  # replicas alike
        for _, _, q, at in self.layout.placed:
            q.data = self.flat[at:at + q.numel()].view_as(q)
        #: the master values are the parameters themselves (float32, gathered plain)
        self.aliased = self.dtype == torch.float32 and not compress_params
        if self.aliased:
            self._master_flat = None
            parts = [self.flat[self.layout.mine(b)] for b in self.buckets]
        else:
            self._master_flat = torch.zeros(self.layout.shard_numel, dtype=torch.float32,
                                            device=device)
            for b in self.buckets:
                self._master_flat[b.master_at:b.master_at + b.part].copy_(
                    self.flat[self.layout.mine(b)])
            parts = [self._master_flat[b.master_at:b.master_at + b.part] for b in self.buckets]
        self.grads = GradientShards(self.layout, self.comm, self.gradient_settings, feedback,
                                    self.tensors)
        self.feedback = feedback
        self.masters = [torch.nn.Parameter(t) for t in parts]
        for m, b in zip(self.masters, self.buckets, strict=True):
            m.grad = self.grads.shard[b.master_at:b.master_at + b.part]
        self.optimizer = optimizer_class(
            [{"params": [m for m, b in zip(self.masters, self.buckets, strict=True)
                         if b.group == g], **options[g]}
             for g in range(len(groups)) if any(b.group == g for b in self.buckets)],
            **given)
        self._counted = self._norm_ranges()
        self.steps = 0
        #: parameter allgathers in flight, by bucket
        self._gathers: dict[int, _Gather] = {}
        self._gather_hooks: list[Any] | None = None  # gather_during_forward's
        self._progress = Progress()

    def _check_parameters(self) -> None:
        names = [n for n, _ in self.named]
        if len(set(names)) != len(names):
            raise ValueError("ShardedOptimizer: duplicate parameter names")
        if len({id(q) for _, q in self.named}) != len(self.named):
            raise ValueError("ShardedOptimizer: a parameter is given twice")
        for name, q in self.named:
            if q.dtype not in DTYPES:
                raise TypeError(f"parameter {name!r} is {q.dtype}: a sharded optimizer takes "
                                "float32, bfloat16 or float16 parameters")
        dtypes = sorted({str(q.dtype) for _, q in self.named})
        if len(dtypes) > 1:
            raise TypeError(f"ShardedOptimizer: parameters of one dtype, got {dtypes}")
        devices = sorted({str(q.device) for _, q in self.named})
        if len(devices) > 1:
            raise TypeError(f"ShardedOptimizer: parameters on one device, got {devices}")

    # -- one step ------------------------------------------------------------------------
    def step(self, closure: Any = None) -> Any:
        """Step this rank's shard with the gradients reduced so far, then allgather the
        parameters (collective: every rank of the communicator)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.finish_param_gather()  # (the master values are a gather's send buffers)
        self.grads.reduce_unreduced()
        self.optimizer.step()
        self.grads.take()
        # forward's order: the layout holds the parameters in reverse
        for k in reversed(range(len(self.buckets))):
            self._start_gather(k)
        if self._gather_hooks is None:
            self.finish_param_gather()
        self.steps += 1
        return loss

    def gather_during_forward(self, module: torch.nn.Module) -> None:
        """From now on :meth:`step` starts the parameter allgathers and returns, and the
        next forward of ``module`` overlaps them (Megatron's ``overlap_param_gather``): a
        forward pre-hook on each submodule that holds parameters waits for the buckets of
        its own parameters, which start in the order forward uses them. Whatever reads the
        parameters otherwise (an evaluation outside ``module``'s forward, a hash, a
        checkpoint of the module) calls :meth:`finish_param_gather` first; this optimizer's
        own methods do."""
        if self._gather_hooks is not None:
            raise ValueError("gather_during_forward: already called")
        where = {id(q): sorted({piece.bucket for piece in self.layout.pieces[id(q)]})
                 for _, _, q, _ in self.layout.placed}
        hooks = []
        for sub in module.modules():
            mine = sorted({k for q in sub.parameters(recurse=False) if id(q) in where
                           for k in where[id(q)]})
            if mine:
                hooks.append(sub.register_forward_pre_hook(
                    lambda _m, _args, ks=tuple(mine): self.finish_param_gather(ks)))
        self._gather_hooks = hooks

    def finish_param_gather(self, buckets: Iterable[int] | None = None) -> None:
        """Wait for the parameter allgathers :meth:`step` started (of ``buckets``, by index,
        else all): after it the parameters hold the step's values (at once unless
        :meth:`gather_during_forward` was called)."""
        for k in (list(self._gathers) if buckets is None else buckets):
            started = self._gathers.pop(k, None)
            if started is not None:
                started.tested.result()  # (the helper thread completes it: one at a time may)
                started.req.Wait()
                self.tensors.after(started.stream)
                if started.received is not None:  # the same bits added on every rank
                    with torch.no_grad():
                        self.flat[self.layout.whole(self.buckets[k])].add_(started.received)

    def _start_gather(self, k: int) -> None:
        with self.tensors.ordered():
            self._gathers[k] = self._gather(k)

    def _gather(self, k: int) -> _Gather:
        """Start bucket ``k``'s parameter allgather: what :attr:`_gathers` keeps of it."""
        b, m = self.buckets[k], self.masters[k]
        whole = self._wire(self.flat[self.layout.whole(b)])
        received = mine = None
        if self.gather_deltas:  # the master values less what every replica holds
            with torch.no_grad():
                mine = m.detach() - self.flat[self.layout.mine(b)]
            received = torch.empty(self.layout.size * b.part, dtype=torch.float32,
                                   device=self.tensors.device)
            req = self.comm.Iallgather(self._wire(mine), self._wire(received),
                                       **self.param_settings)
            held = received.numel() * 4 + sum(g.received.numel() * 4
                                              for g in self._gathers.values()
                                              if g.received is not None)
            self.peak_delta_bytes = max(self.peak_delta_bytes, held)
        elif self.aliased:
            req = self.comm.Iallgather(MPI.IN_PLACE, whole, **self.param_settings)
        elif self.dtype == torch.float32:  # compressed: the owner decodes its part too
            req = self.comm.Iallgather(self._wire(m.detach()), whole, **self.param_settings)
        else:
            with torch.no_grad():
                self.flat[self.layout.mine(b)].copy_(m)
            req = self.comm.Iallgather(MPI.IN_PLACE, whole, **self.param_settings)
        return _Gather(req, self._progress.watch(req), received, mine, self.tensors.stream())

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Scale this step's gradient so that its norm over the whole model (every rank's
        shard, and the tensor- and pipeline-parallel ranks' parameters) is at most
        ``max_norm``, as ``torch.nn.utils.clip_grad_norm_`` does on an unsharded model;
        returns that norm (collective: every rank of every group, after backward and before
        ``step()``, which then uses the clipped gradient)."""
        if not float(max_norm) > 0 or not float(norm_type) > 0:
            raise ValueError(f"clip_grad_norm_: max_norm and norm_type must be > 0, got "
                             f"{max_norm!r} and {norm_type!r}")
        self.grads.reduce_unreduced()
        shard = self.grads.shard
        kind = float(norm_type)
        pieces = [shard[a:b] for a, b in self._counted]
        groups = [c for c in (self.comm, self.tensor_parallel, self.pipeline_parallel)
                  if c is not None]
        if kind == float("inf"):
            total = max((float(t.abs().max()) for t in pieces if t.numel()), default=0.0)
            for c in groups:
                total = c.allreduce(total, op=MPI.MAX)
        else:
            total = sum(float(t.double().abs().pow(kind).sum()) for t in pieces)
            for c in groups:
                total = c.allreduce(total)
            total **= 1.0 / kind
        scale = float(max_norm) / (total + 1e-6)
        if scale < 1.0:
            shard.mul_(scale)
        return torch.tensor(total, device=shard.device)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.grads.zero()
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
        self.finish_param_gather()
        self.tensors.synchronize()  # (the feedback's residuals are copied by the host)
        return {"optimizer": self.optimizer.state_dict(),
                "master": self.master_values(),
                "params": self.flat.detach().clone(),
                "feedback": self.feedback.state_dict(),
                "steps": self.steps,
                "layout": self.layout.describe()}

    def consolidate_state_dict(self, to: int = 0) -> dict[str, Any] | None:
        """Every rank's :meth:`state_dict`, gathered on rank ``to`` (collective; as
        ``ZeroRedundancyOptimizer.consolidate_state_dict``): ``{"shards": [rank 0's, ...]}``
        there, one file for the whole optimizer, its tensors in host memory (CUDA ones
        copied: rank ``to`` holds no other rank's state on a GPU); None on the other ranks.
        Every rank may load it back with :meth:`load_state_dict` (each takes its own shard,
        onto its parameters' device)."""
        shards = self.comm.gather(_to_cpu(self.state_dict()), root=to)
        return {"shards": shards} if self.comm.Get_rank() == to else None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore this rank's :meth:`state_dict`, or its shard of a
        :meth:`consolidate_state_dict` (collective: every rank loads its own; a state of
        another layout is refused on every rank)."""
        if isinstance(state, Mapping) and "shards" in state:
            shards = state["shards"]
            state = shards[self.comm.Get_rank()] if len(shards) > self.comm.Get_rank() else {}
        layout = self.layout.describe()
        given = state.get("layout") if isinstance(state, Mapping) else None
        mismatch = None if given == layout else (
            f"rank {layout['rank']} of {layout['size']}: a state of layout {given!r}, this "
            f"optimizer's is rank {layout['rank']} of {layout['size']}, {self.numel} values "
            f"in {len(self.buckets)} buckets")
        every = self.comm.allgather(mismatch)
        if any(every):
            raise ValueError("ShardedOptimizer.load_state_dict: the state does not match the "
                             f"optimizer ({next(m for m in every if m)})")
        self.finish_param_gather()
        with torch.no_grad():
            self.flat.copy_(state["params"])
            if self._master_flat is not None:
                self._master_flat.copy_(state["master"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.feedback.load_state_dict(state["feedback"])
        self.grads.zero()
        self.steps = int(state["steps"])

    # -- what it holds -------------------------------------------------------------------
    def master_values(self) -> torch.Tensor:
        """This rank's float32 master values, bucket after bucket (a copy; padded)."""
        return torch.cat([m.detach().reshape(-1) for m in self.masters]).clone() \
            if self.masters else torch.zeros(0, device=self.tensors.device)

    def state_bytes(self) -> int:
        """Bytes of this rank's optimizer state (its shard's), with the master values when
        they are a copy (bfloat16 parameters, compressed parameter gathers)."""
        total = 0 if self._master_flat is None else self._master_flat.numel() * 4
        for state in self.optimizer.state.values():
            total += sum(v.numel() * v.element_size() for v in state.values()
                         if torch.is_tensor(v))
        return total

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds now for the model's training state, by kind: the
        ``parameters`` (the flat vector and, with ``gather_deltas``, the changes' receive
        buffers at their most so far: a bucket each in flight), the ``gradients`` (the
        shard and, at their most so far, the buckets in flight and any ``.grad`` not yet
        freed), the ``optimizer`` (:meth:`state_bytes`) and the error ``feedback``'s
        residuals."""
        grads = self.grads.shard.numel() * 4 + self.grads.peak_buffer_bytes
        grads += sum(q.grad.numel() * q.grad.element_size() for _, q in self.named
                     if q.grad is not None)
        return {"parameters": self.flat.numel() * self.flat.element_size()
                + self.peak_delta_bytes,
                "gradients": grads, "optimizer": self.state_bytes(),
                "feedback": self.feedback.nbytes()}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def owned(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions in the flat parameter vector, positions in :meth:`master_values`) of
        the values this rank owns (padding left out)."""
        return self.layout.owned()

    def remove_hooks(self) -> None:
        """Stop reducing gradients during backward (``step()`` then reduces ``.grad``) and
        gathering parameters during forward (``step()`` then gathers them itself)."""
        self.grads.remove_hooks()
        self.finish_param_gather()
        for h in self._gather_hooks or []:
            h.remove()
        self._gather_hooks = None

    # -- helpers -------------------------------------------------------------------------
    def _norm_ranges(self) -> list[tuple[int, int]]:
        """The shard's ranges :meth:`clip_grad_norm_` counts: all of it, but for the copies
        of unsplit parameters on tensor-parallel ranks other than the first."""
        whole = [(0, self.layout.shard_numel)]
        tp = self.tensor_parallel
        if tp is None or tp.Get_rank() == 0:
            return whole
        return [span for _, _, q, _ in self.layout.placed
                if getattr(q, "tensor_model_parallel", False)
                for span in self.layout.shard_spans(q)]

    def _wire(self, t: torch.Tensor) -> Any:
        """What the communicator takes for ``t`` (:meth:`.tensors.TensorMemory.wire`)."""
        return self.tensors.wire(t)


def _to_cpu(state: Any) -> Any:
    """``state`` (dicts, lists, tuples, tensors) with every tensor in host memory."""
    if torch.is_tensor(state):
        return state.cpu()
    if isinstance(state, Mapping):
        return {k: _to_cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_to_cpu(v) for v in state)
    return state
