"""PyTorch integration (optional: ``pip install 'mpicomp[torch]'``).

::

    import mpicomp.torch as mt
    mt.broadcast_parameters(model.state_dict(), root=0)       # every rank starts alike
    opt = mt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                  named_parameters=model.named_parameters(),
                                  codec="bitplane", rate=4.25, error_feedback="loco")
    loss.backward(); opt.step()     # gradients averaged across the ranks, then the step

(Horovod users know this shape.) ``init_process_group("gloo")`` starts PyTorch's
own process group from MPI (:mod:`mpicomp.torch.distributed`: no torchrun
variables under ``mpiexec``). Tensor parallelism (Megatron-LM's column-
and row-parallel linear layers and the collectives under them) is in
:mod:`mpicomp.torch.tensor_parallel`, pipeline parallelism
(:class:`PipelineStage`) in :mod:`mpicomp.torch.pipeline`, sharded data
parallelism (:class:`ShardedOptimizer`, ZeRO stage 2) in
:mod:`mpicomp.torch.sharded`; their names are also here.

``DistributedOptimizer`` reduces the gradients with a
:class:`mpicomp.training.GradientReducer` (its keyword settings: codec,
rate, error feedback, buckets, rules) before each ``step()``, or, with
``overlap=True``, bucket by bucket while backward runs
(:mod:`mpicomp.torch.overlap`, as DDP does). Contiguous float32 gradients
are reduced in place, CPU tensors on the host and CUDA tensors on their GPU
(the reducer's device path: packed, compressed and averaged there, on the
current stream); other gradients
(bfloat16/float16, non-contiguous) go through a float32 copy on their own
device, which is reduced and copied back (counted in
:attr:`DistributedOptimizer.staged`).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .distributed import init_process_group
from .hooks import HookState, compressed_allreduce_hook

__all__ = ["ColumnParallelLinear", "CompressedAllGather", "CompressedReduceScatter",
           "DistributedOptimizer", "HookState", "PipelineStage", "RowParallelLinear",
           "ShardedOptimizer",
           "allreduce_sequence_parallel_grads", "broadcast_parameters",
           "compressed_allreduce_hook", "copy_to_group", "gather_from_group",
           "gather_from_sequence", "init_process_group", "reduce_from_group",
           "reduce_scatter_to_sequence", "scatter_to_group"]

#: what ``mpicomp.torch.tensor_parallel`` and ``.pipeline`` give (imported on first use:
#: they import torch)
_TENSOR_PARALLEL = ("ColumnParallelLinear", "RowParallelLinear",
                    "allreduce_sequence_parallel_grads", "copy_to_group", "gather_from_group",
                    "gather_from_sequence", "reduce_from_group", "reduce_scatter_to_sequence",
                    "scatter_to_group")
_PIPELINE = ("PipelineStage",)
_SHARDED = ("ShardedOptimizer",)
_FSDP = ("CompressedAllGather", "CompressedReduceScatter")


def __getattr__(name: str) -> Any:
    if name in _TENSOR_PARALLEL:
        _torch()
        from . import tensor_parallel

        return getattr(tensor_parallel, name)
    if name in _PIPELINE:
        _torch()
        from . import pipeline

        return getattr(pipeline, name)
    if name in _SHARDED:
        _torch()
        from . import sharded

        return getattr(sharded, name)
    if name in _FSDP:
        _torch()
        from . import fsdp

        return getattr(fsdp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("mpicomp.torch needs PyTorch: pip install 'mpicomp[torch]' "
                          "(or pip install torch)") from e
    return torch


def _buffer(t: Any) -> Any:
    """What a communicator takes for a contiguous tensor: a NumPy view on the CPU, the
    tensor itself on a CUDA device (a device buffer)."""
    return t.numpy() if t.device.type == "cpu" else t


def _reducible(g: Any, back: list[tuple[Any, Any]]) -> Any:
    """What a ``GradientReducer`` takes for gradient ``g``: :func:`_buffer` of ``g``, or, for
    a gradient not float32 or not contiguous, of a float32 copy on its own device, listed in
    ``back`` with ``g`` for :func:`_write_back` after the reduction."""
    torch = _torch()
    if g.dtype != torch.float32 or not g.is_contiguous():
        wide = g.detach().to(torch.float32).contiguous()
        back.append((g, wide))
        g = wide
    return _buffer(g.detach())


def _write_back(back: list[tuple[Any, Any]]) -> None:
    """Each reduced float32 copy of :func:`_reducible` into its gradient."""
    with _torch().no_grad():
        for g, wide in back:
            g.copy_(wide)


def _world(comm: Any) -> Any:
    import mpicomp

    if comm is None:
        return mpicomp.COMM_WORLD
    return comm if isinstance(comm, mpicomp.Comm) else mpicomp.Comm(comm)


def broadcast_parameters(state: Mapping[str, Any] | Iterable[tuple[str, Any]], root: int = 0,
                         comm: Any = None) -> None:
    """Copy ``root``'s tensors to every rank, exactly (plain MPI, name order).

    ``state``: a ``state_dict()`` or ``named_parameters()``; every rank must
    hold the same names, shapes and dtypes.
    """
    torch = _torch()
    comm = _world(comm)
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

        _torch()
        self.optimizer = optimizer
        self.named = list(named_parameters)
        names = [n for n, _ in self.named]
        if len(set(names)) != len(names):
            raise ValueError("named_parameters has duplicate names")
        self.reducer = GradientReducer(_world(comm), **reducer_settings)
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
        grads = {name: _reducible(p.grad, back) for name, p in self.named
                 if p.grad is not None}
        self.reducer.reduce(grads)
        _write_back(back)
        self._staged += len(back)

    def zero_grad(self, *args: Any, **kwargs: Any) -> Any:
        return self.optimizer.zero_grad(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # param_groups, state, state_dict, ...
        return getattr(self.optimizer, name)
