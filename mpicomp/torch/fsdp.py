"""FSDP2's gradient reduce-scatter and parameter all-gather through mpicomp:
``fully_shard`` models, compressed.

::

    from torch.distributed.fsdp import fully_shard
    import mpicomp.torch as mt
    mt.init_process_group("gloo")
    fully_shard(model)
    model.set_custom_reduce_scatter(mt.CompressedReduceScatter(codec="bitplane", rate=8.25))
    model.set_custom_all_gather(mt.CompressedAllGather(codec="bitplane", rate=16.25))

FSDP2 (PyTorch's ``fully_shard``) reduce-scatters each parameter group's
flat gradient in backward through a ``ReduceScatter`` communication object
(``allocate`` its buffers, then ``__call__(output_tensor, input_tensor,
group, op)``), which ``set_custom_reduce_scatter`` replaces, and all-gathers
the group's parameters before forward and backward through an ``AllGather``
(``set_custom_all_gather``). These are a ``Reduce_scatter_block`` (``op``
SUM, or AVG: the sum divided by the group's size) and an ``Allgather`` of
mpicomp's communicator with the per-call settings given: a compressed
all-gather gives every rank the same decoded parameters, its own shard's
included, while FSDP2's sharded parameters (what the optimizer steps) stay
exact; an all-gather buffer that is not float32/float64 (FSDP2 gathers
parameters of mixed dtypes as bytes) goes plain. The process group must hold
the communicator's ranks in its order (checked each call). CPU tensors go
through NumPy views, CUDA tensors through mpicomp's device path. FSDP2 runs
on PyTorch's CPU build with the gloo backend (torch 2.13.0+cpu here); error
feedback on the reduce-scatter is not in these objects (the sharded
optimizer's is, :mod:`.shard_gradients`). PyTorch keeps FSDP2's
``ReduceScatter`` and ``AllGather`` interfaces in a private module
(``torch.distributed.fsdp._fully_shard._fsdp_api``), imported from there;
the tests hold that to the installed version.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

from .tensors import buffer as _buffer
from .tensors import world as _world

__all__ = ["CompressedAllGather", "CompressedReduceScatter"]


class _Compressed:
    """What both objects share: ``comm``, an MPI communicator of the process group's ranks
    (``MPI.COMM_WORLD`` by default); ``codec``, ``rate``, ``algorithm``, ``threshold``: the
    calls' settings (checked here, on every rank)."""

    def __init__(self, comm: Any = None, codec: Any = None, rate: float | None = None,
                 algorithm: str | None = None, threshold: int | None = None) -> None:
        self.comm = _world(comm)
        self.call = {k: v for k, v in (("codec", codec), ("rate", rate),
                                       ("algorithm", algorithm), ("threshold", threshold))
                     if v is not None}
        self.comm.resolved_policy(**self.call)

    def allocate(self, size: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def _check_group(self, group: dist.ProcessGroup) -> None:
        n = self.comm.Get_size()
        if dist.get_world_size(group) != n or dist.get_rank(group) != self.comm.Get_rank():
            raise ValueError(
                f"{type(self).__name__}: the process group (rank {dist.get_rank(group)} of "
                f"{dist.get_world_size(group)}) is not the communicator's ranks in its order "
                f"(rank {self.comm.Get_rank()} of {n})")


class CompressedAllGather(_Compressed, AllGather):
    """FSDP2's parameter all-gather (see the module's doc)."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, async_op: bool = False) -> None:
        self._check_group(group)
        from mpi4py import MPI

        nbytes = input_tensor.numel() * input_tensor.element_size()
        mine = output_tensor.data_ptr() + self.comm.Get_rank() * nbytes
        # FSDP2 copies each rank's shard into its place of the output first: in place
        send = MPI.IN_PLACE if input_tensor.data_ptr() == mine else _buffer(input_tensor)
        self.comm.Allgather(send, _buffer(output_tensor), **self.call)
        return None


class CompressedReduceScatter(_Compressed, ReduceScatter):
    """FSDP2's gradient reduce-scatter (see the module's doc)."""

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, op: Any, async_op: bool = False) -> None:
        self._check_group(group)
        n = self.comm.Get_size()
        if op not in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            raise ValueError(f"CompressedReduceScatter: op must be SUM or AVG, got {op}")
        from mpi4py import MPI

        self.comm.Reduce_scatter_block(_buffer(input_tensor), _buffer(output_tensor),
                                       op=MPI.SUM, **self.call)
        if op == dist.ReduceOp.AVG:
            output_tensor.div_(n)
        return None
