"""Tensor parallelism over an mpicomp communicator (Megatron-LM's scheme).

A linear layer ``y = x W^T + b`` is split across the ``p`` ranks of a
tensor-parallel communicator in one of two ways:

* :class:`ColumnParallelLinear`: each rank holds ``out_features / p`` rows of
  ``W`` (and of ``b``) and computes its slice of ``y`` from the whole ``x``;
  the backward pass sums the input gradient over the ranks;
* :class:`RowParallelLinear`: each rank holds ``in_features / p`` columns of
  ``W``, takes its slice of ``x`` and computes a partial ``y``; the forward
  pass sums the partials (``b`` added once, after the sum).

A column-parallel layer followed by a row-parallel one (an MLP, attention's
projections) needs one allreduce forward and one backward. The collectives
are autograd functions, each the mirror of the other in the backward pass:

==========================  ============================  ============================
function                    forward                       backward
==========================  ============================  ============================
``copy_to_group``           identity                      allreduce
``reduce_from_group``       allreduce                     identity
``scatter_to_group``        this rank's slice of ``dim``  allgather along ``dim``
``gather_from_group``       allgather along ``dim``       this rank's slice
``gather_from_sequence``    allgather along ``dim`` (0)   reduce-scatter along ``dim``
``reduce_scatter_to_seq..`` reduce-scatter along ``dim``  allgather along ``dim``
==========================  ============================  ============================

The last two are sequence parallelism's: with ``sequence_parallel=True`` a
column-parallel layer takes this rank's part of the sequence (dimension 0)
and gathers the rest, and a row-parallel layer reduce-scatters its output
back into parts of the sequence, so that the layers between (norms,
dropout) work on ``1/p`` of the activations. Its bias then sees only this
rank's part of the sequence: :func:`allreduce_sequence_parallel_grads` sums
those gradients over the group before the optimizer step.

Every collective is a call of the communicator's own method (``Allreduce``,
``Allgather``, ``Reduce_scatter_block``) without settings, so the
communicator's policy decides how it travels (``parallel_groups`` gives the
tensor-parallel group a mild one: bitplane, about 16 bits per value).
Tensors are float32 or float64, on the CPU (NumPy views, no copy) or on a
CUDA device (handed to the communicator as device buffers).
"""
from __future__ import annotations

from typing import Any

import torch

from .replicated import broadcast_parameters
from .tensors import buffer as _buffer

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "allreduce_sequence_parallel_grads",
           "copy_to_group", "gather_from_group", "gather_from_sequence",
           "reduce_from_group", "reduce_scatter_to_sequence", "scatter_to_group"]


# -- the communicator's collectives on tensors -----------------------------------------

def _floating(t: Any, what: str) -> Any:
    if t.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{what}: tensor parallelism takes float32 or float64 tensors, "
                        f"got {t.dtype}")
    return t.detach().contiguous()


def _allreduce(t: Any, comm: Any) -> Any:
    src = _floating(t, "allreduce")
    out = torch.empty_like(src)
    comm.Allreduce(_buffer(src), _buffer(out))
    return out


def _dim(t: Any, dim: int) -> int:
    if not -t.dim() <= dim < t.dim():
        raise ValueError(f"dim {dim} is out of range for a tensor of {t.dim()} dimensions")
    return dim % t.dim()


def _allgather(t: Any, comm: Any, dim: int) -> Any:
    """The ranks' tensors concatenated along ``dim`` in rank order."""
    src = _floating(t, "allgather")
    p = comm.Get_size()
    out = torch.empty((p, *src.shape), dtype=src.dtype, device=src.device)
    comm.Allgather(_buffer(src), _buffer(out))
    d = _dim(src, dim)
    return torch.cat(out.unbind(0), dim=d) if d else out.reshape(p * src.shape[0],
                                                                  *src.shape[1:])


def _parts(t: Any, p: int, dim: int, what: str) -> int:
    d = _dim(t, dim)
    if t.shape[d] % p:
        raise ValueError(f"{what}: dimension {d} of size {t.shape[d]} must be divisible by "
                         f"the group's size {p}")
    return d


def _slice(t: Any, comm: Any, dim: int) -> Any:
    """This rank's part of ``t`` along ``dim`` (one of ``p`` equal parts)."""
    p, r = comm.Get_size(), comm.Get_rank()
    d = _parts(t, p, dim, "scatter")
    return t.chunk(p, dim=d)[r].contiguous()


def _reduce_scatter(t: Any, comm: Any, dim: int) -> Any:
    """The sum over the ranks of ``t``, this rank keeping its part along ``dim``."""
    src = _floating(t, "reduce-scatter")
    p = comm.Get_size()
    d = _parts(src, p, dim, "reduce-scatter")
    parts = torch.stack(src.chunk(p, dim=d)).contiguous()  # [p, part...]
    out = torch.empty(parts.shape[1:], dtype=src.dtype, device=src.device)
    comm.Reduce_scatter_block(_buffer(parts), _buffer(out))
    return out


# -- the autograd functions --------------------------------------------------------------

def _identity(t: Any, comm: Any, dim: int) -> Any:
    return t.view_as(t)


def _sum(t: Any, comm: Any, dim: int) -> Any:
    return _allreduce(t, comm)


def _function(name: str, forward: Any, backward: Any) -> type:
    """An autograd function: ``forward(x, comm, dim)`` forward, ``backward(grad, comm,
    dim)`` backward (each of the pairs in the module's table)."""
    def fwd(ctx: Any, x: Any, comm: Any, dim: int) -> Any:
        ctx.comm, ctx.dim = comm, dim
        return forward(x, comm, dim)

    def bwd(ctx: Any, grad: Any) -> Any:
        return backward(grad, ctx.comm, ctx.dim), None, None

    return type(name, (torch.autograd.Function,),
                {"forward": staticmethod(fwd), "backward": staticmethod(bwd)})


CopyToGroup = _function("CopyToGroup", _identity, _sum)
ReduceFromGroup = _function("ReduceFromGroup", _sum, _identity)
ScatterToGroup = _function("ScatterToGroup", _slice, _allgather)
GatherFromGroup = _function("GatherFromGroup", _allgather, _slice)
GatherFromSequence = _function("GatherFromSequence", _allgather, _reduce_scatter)
ReduceScatterToSequence = _function("ReduceScatterToSequence", _reduce_scatter, _allgather)


def copy_to_group(x: Any, comm: Any) -> Any:
    """Identity forward; the gradient summed over ``comm`` backward."""
    return CopyToGroup.apply(x, comm, -1)


def reduce_from_group(x: Any, comm: Any) -> Any:
    """``x`` summed over ``comm`` forward; identity backward."""
    return ReduceFromGroup.apply(x, comm, -1)


def scatter_to_group(x: Any, comm: Any, dim: int = -1) -> Any:
    """This rank's part of ``x`` along ``dim`` forward; the parts gathered backward."""
    return ScatterToGroup.apply(x, comm, dim)


def gather_from_group(x: Any, comm: Any, dim: int = -1) -> Any:
    """The ranks' ``x`` concatenated along ``dim`` forward; this rank's part backward."""
    return GatherFromGroup.apply(x, comm, dim)


def gather_from_sequence(x: Any, comm: Any, dim: int = 0) -> Any:
    """The ranks' parts of the sequence gathered along ``dim`` forward; the gradient
    reduce-scattered back into parts backward."""
    return GatherFromSequence.apply(x, comm, dim)


def reduce_scatter_to_sequence(x: Any, comm: Any, dim: int = 0) -> Any:
    """``x`` summed over ``comm``, this rank keeping its part of ``dim``, forward; the
    gradient's parts gathered backward."""
    return ReduceScatterToSequence.apply(x, comm, dim)


# -- the layers ----------------------------------------------------------------------------

def _split(total: int, p: int, what: str) -> int:
    if total % p:
        raise ValueError(f"{what} {total} must be divisible by the tensor-parallel group's "
                         f"size {p}")
    return total // p


def _full_linear(in_features: int, out_features: int, bias: bool, comm: Any, dtype: Any,
                 device: Any) -> torch.nn.Linear:
    """A whole ``torch.nn.Linear`` initialised as PyTorch does, the same on every rank of
    ``comm`` (its rank 0's, copied exactly)."""
    full = torch.nn.Linear(in_features, out_features, bias=bias, dtype=dtype, device=device)
    broadcast_parameters(full.state_dict(), root=0, comm=comm)
    return full


class _ParallelLinear(torch.nn.Module):
    """What both layers share: the group, this rank's shard of a whole layer's weight
    and bias (made here, or given to :meth:`from_linear`), their sizes."""

    #: the size the layer splits across the group (its subclass's)
    SPLIT = ""

    def __init__(self, in_features: int, out_features: int, comm: Any, bias: bool,
                 sequence_parallel: bool, dtype: Any, device: Any, linear: Any) -> None:
        super().__init__()
        p, r = comm.Get_size(), comm.Get_rank()
        sizes = {"in_features": in_features, "out_features": out_features}
        part = _split(sizes[self.SPLIT], p, self.SPLIT)
        if linear is None:
            linear = _full_linear(in_features, out_features, bias, comm, dtype, device)
        weight, bias_part = self._shard(linear, slice(r * part, (r + 1) * part))
        self.comm = comm
        self.in_features, self.out_features = in_features, out_features
        self.sequence_parallel = bool(sequence_parallel)
        self.weight = torch.nn.Parameter(weight.detach().clone())
        self.bias = (None if bias_part is None
                     else torch.nn.Parameter(bias_part.detach().clone()))
        # what this rank holds alone (Megatron's mark): its part of a split tensor
        self.weight.tensor_model_parallel = True
        if self.bias is not None and self.SPLIT == "out_features":
            self.bias.tensor_model_parallel = True

    @staticmethod
    def _shard(linear: torch.nn.Linear, mine: slice) -> tuple[Any, Any]:
        raise NotImplementedError

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, comm: Any, **options: Any) -> Any:
        """This rank's shard of a whole ``linear`` (the same on every rank of ``comm``);
        ``options``: the layer's own (``gather_output``, ``input_is_parallel``,
        ``sequence_parallel``)."""
        return cls(linear.in_features, linear.out_features, comm, linear.bias is not None,
                   _linear=linear, **options)


class ColumnParallelLinear(_ParallelLinear):
    """``y = x W^T + b`` with ``W``'s rows (the output features) split across ``comm``.

    ``x``: the whole input (with ``sequence_parallel``: this rank's part of
    dimension 0, the sequence, gathered here). The output is this rank's
    ``out_features / p`` features, or all of them with ``gather_output``.
    ``weight``: ``[out_features / p, in_features]``, ``bias`` this rank's
    ``out_features / p``; initialised as ``torch.nn.Linear`` would be, the
    whole layer made on the group's rank 0 and cut into shards.
    """

    SPLIT = "out_features"

    def __init__(self, in_features: int, out_features: int, comm: Any, bias: bool = True,
                 gather_output: bool = False, sequence_parallel: bool = False,
                 dtype: Any = None, device: Any = None, *, _linear: Any = None) -> None:
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype,
                         device, _linear)
        self.gather_output = bool(gather_output)

    @staticmethod
    def _shard(linear: torch.nn.Linear, mine: slice) -> tuple[Any, Any]:
        return linear.weight[mine], None if linear.bias is None else linear.bias[mine]

    def forward(self, x: Any) -> Any:
        x = (gather_from_sequence(x, self.comm) if self.sequence_parallel
             else copy_to_group(x, self.comm))
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        return gather_from_group(y, self.comm, -1) if self.gather_output else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features} "
                f"({self.weight.shape[0]} here), gather_output={self.gather_output}, "
                f"sequence_parallel={self.sequence_parallel}")


class RowParallelLinear(_ParallelLinear):
    """``y = x W^T + b`` with ``W``'s columns (the input features) split across ``comm``.

    ``x``: this rank's ``in_features / p`` features (``input_is_parallel``,
    as a column-parallel layer gives them), or the whole input, cut here.
    The output is the whole ``y``, summed over the ranks (with
    ``sequence_parallel``: this rank's part of dimension 0, reduce-scattered;
    the bias is then marked ``sequence_parallel``, see
    :func:`allreduce_sequence_parallel_grads`). ``weight``:
    ``[out_features, in_features / p]``; ``bias`` whole, added once after the
    sum.
    """

    SPLIT = "in_features"

    def __init__(self, in_features: int, out_features: int, comm: Any, bias: bool = True,
                 input_is_parallel: bool = True, sequence_parallel: bool = False,
                 dtype: Any = None, device: Any = None, *, _linear: Any = None) -> None:
        super().__init__(in_features, out_features, comm, bias, sequence_parallel, dtype,
                         device, _linear)
        self.input_is_parallel = bool(input_is_parallel)
        if self.bias is not None and self.sequence_parallel:
            self.bias.sequence_parallel = True

    @staticmethod
    def _shard(linear: torch.nn.Linear, mine: slice) -> tuple[Any, Any]:
        return linear.weight[:, mine], linear.bias

    def forward(self, x: Any) -> Any:
        if not self.input_is_parallel:
            x = scatter_to_group(x, self.comm, -1)
        partial = torch.nn.functional.linear(x, self.weight)
        y = (reduce_scatter_to_sequence(partial, self.comm) if self.sequence_parallel
             else reduce_from_group(partial, self.comm))
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} ({self.weight.shape[1]} here), "
                f"out_features={self.out_features}, "
                f"input_is_parallel={self.input_is_parallel}, "
                f"sequence_parallel={self.sequence_parallel}")


def allreduce_sequence_parallel_grads(module: Any, comm: Any) -> int:
    """Sum over ``comm`` the gradients of ``module``'s parameters marked
    ``sequence_parallel`` (the biases of sequence-parallel row-parallel layers, and
    whatever the caller marks: norms between the layers); returns how many. Call it after
    ``backward()``, before the optimizer step, on every rank of the group."""
    grads = [p.grad for p in module.parameters()
             if getattr(p, "sequence_parallel", False) and p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    summed = _allreduce(flat, comm)
    with torch.no_grad():
        at = 0
        for g in grads:
            g.copy_(summed[at:at + g.numel()].view_as(g))
            at += g.numel()
    return len(grads)
