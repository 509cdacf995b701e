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
(:class:`PipelineStage`) in :mod:`mpicomp.torch.pipeline_parallel`, sharded data
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

from typing import Any

from .distributed import init_process_group
from .hooks import HookState, compressed_allreduce_hook
from .replicated import DistributedOptimizer, broadcast_parameters
from .tensors import require_torch

__all__ = ["ColumnParallelLinear", "CompressedAllGather", "CompressedReduceScatter",
           "DistributedOptimizer", "HookState", "PipelineStage", "RowParallelLinear",
           "ShardedOptimizer",
           "allreduce_sequence_parallel_grads", "broadcast_parameters",
           "compressed_allreduce_hook", "copy_to_group", "gather_from_group",
           "gather_from_sequence", "init_process_group", "reduce_from_group",
           "reduce_scatter_to_sequence", "scatter_to_group"]

#: what ``mpicomp.torch.tensor_parallel``, ``.pipeline_parallel``, ``.sharded`` and
#: ``.fsdp`` give (imported on first use: they import torch)
_TENSOR_PARALLEL = ("ColumnParallelLinear", "RowParallelLinear",
                    "allreduce_sequence_parallel_grads", "copy_to_group", "gather_from_group",
                    "gather_from_sequence", "reduce_from_group", "reduce_scatter_to_sequence",
                    "scatter_to_group")
_PIPELINE = ("PipelineStage",)
_SHARDED = ("ShardedOptimizer",)
_FSDP = ("CompressedAllGather", "CompressedReduceScatter")


def __getattr__(name: str) -> Any:
    if name in _TENSOR_PARALLEL:
        require_torch()
        from . import tensor_parallel

        return getattr(tensor_parallel, name)
    if name in _PIPELINE:
        require_torch()
        from . import pipeline_parallel

        return getattr(pipeline_parallel, name)
    if name in _SHARDED:
        require_torch()
        from . import sharded

        return getattr(sharded, name)
    if name in _FSDP:
        require_torch()
        from . import fsdp

        return getattr(fsdp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
