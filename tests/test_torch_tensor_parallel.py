"""Tensor parallelism (mpicomp.torch.tensor_parallel): the split model computes what the
unsplit one computes (skipped without torch)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpicomp  # noqa: E402
import mpicomp.torch as mt  # noqa: E402
from mpicomp.algorithms import bounds  # noqa: E402
from mpicomp.codecs import get_codec  # noqa: E402

#: the tensor-parallel group's compressing policy of the tests (the mild default of
#: parallel_groups), the ring algorithm, whose bound mpicomp.algorithms.bounds states
BITPLANE = {"codec": "bitplane", "rate": 16.25, "threshold": 0, "algorithm": "ring"}


def _group(comm, **settings):
    """The tensor-parallel communicator: every rank of ``comm`` (2 or 4 ranks)."""
    p = comm.Get_size()
    if p not in (2, 4):
        pytest.skip("tensor parallelism tests run on 2 or 4 ranks")
    return mpicomp.Comm(comm, **settings)


def _mlp(seed: int, dtype=torch.float64):
    """The unsplit model (the same on every rank): Linear -> GELU -> Linear."""
    torch.manual_seed(seed)
    return (torch.nn.Linear(12, 16, dtype=dtype), torch.nn.Linear(16, 12, dtype=dtype))


def _input(seed: int, shape=(8, 3, 12), dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype)


def _part(t, p: int, r: int, dim: int):
    return t.chunk(p, dim=dim)[r]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_a_split_mlp_gives_the_unsplit_outputs_and_gradients(comm, sequence_parallel):
    """Column-parallel then row-parallel (codec none): the output, the input's gradient
    and every parameter's gradient (this rank's shard of it) equal the unsplit model's,
    with and without sequence parallelism (then each rank holds its part of the
    sequence, dimension 0, and the row layer's bias gradient is summed over the group)."""
    tp = _group(comm, codec="none")
    p, r = tp.Get_size(), tp.Get_rank()
    fc1, fc2 = _mlp(0)
    x = _input(1)
    # the unsplit model
    xf = x.clone().requires_grad_(True)
    yf = fc2(torch.nn.functional.gelu(fc1(xf)))
    (yf.square().sum()).backward()
    # the split one
    col = mt.ColumnParallelLinear.from_linear(fc1, tp, sequence_parallel=sequence_parallel)
    row = mt.RowParallelLinear.from_linear(fc2, tp, sequence_parallel=sequence_parallel)
    assert col.weight.shape == (16 // p, 12) and row.weight.shape == (12, 16 // p)
    xs = (_part(x, p, r, 0) if sequence_parallel else x).clone().requires_grad_(True)
    y = row(torch.nn.functional.gelu(col(xs)))
    want_y = _part(yf, p, r, 0) if sequence_parallel else yf
    torch.testing.assert_close(y, want_y.detach(), rtol=1e-12, atol=1e-12)
    # the loss of the part this rank holds (the sum over ranks is the unsplit loss)
    (y.square().sum()).backward()
    if sequence_parallel:
        assert mt.allreduce_sequence_parallel_grads(row, tp) == 1
    want_xg = _part(xf.grad, p, r, 0) if sequence_parallel else xf.grad
    # without sequence parallelism every rank's loss is the whole loss: the gradients of
    # the unsplit model once (the row layer's output is replicated, not summed again)
    torch.testing.assert_close(xs.grad, want_xg, rtol=1e-10, atol=1e-12)
    rows, cols = slice(r * 16 // p, (r + 1) * 16 // p), slice(r * 16 // p, (r + 1) * 16 // p)
    torch.testing.assert_close(col.weight.grad, fc1.weight.grad[rows], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(col.bias.grad, fc1.bias.grad[rows], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(row.weight.grad, fc2.weight.grad[:, cols], rtol=1e-10,
                               atol=1e-12)
    torch.testing.assert_close(row.bias.grad, fc2.bias.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.mpi(min_size=2)
def test_layers_made_on_the_group_start_alike_and_split_the_whole_layer(comm):
    """A layer made from sizes: rank 0's whole ``torch.nn.Linear`` (PyTorch's init), cut
    into shards (every rank seeded differently, the shards still fit together); sizes
    that do not divide by the group raise a ValueError naming them, on every rank."""
    tp = _group(comm, codec="none")
    p, r = tp.Get_size(), tp.Get_rank()
    torch.manual_seed(100 + r)
    col = mt.ColumnParallelLinear(6, 8, tp, gather_output=True, dtype=torch.float64)
    whole_w = torch.cat(
        [torch.from_numpy(w) for w in tp.allgather(col.weight.detach().numpy())])
    whole_b = torch.cat([torch.from_numpy(b) for b in tp.allgather(col.bias.detach().numpy())])
    x = _input(2, (5, 6))
    torch.testing.assert_close(col(x), torch.nn.functional.linear(x, whole_w, whole_b),
                               rtol=1e-12, atol=1e-12)
    row = mt.RowParallelLinear(8, 4, tp, input_is_parallel=False, dtype=torch.float64)
    w = torch.cat([torch.from_numpy(v) for v in tp.allgather(row.weight.detach().numpy())],
                  dim=1)
    assert len({b.tobytes() for b in tp.allgather(row.bias.detach().numpy())}) == 1
    x = _input(3, (5, 8))
    torch.testing.assert_close(row(x), torch.nn.functional.linear(x, w, row.bias),
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=f"out_features 6 must be divisible by .* size {p}"
                       if p == 4 else "out_features 7 must be divisible"):
        mt.ColumnParallelLinear(4, 6 if p == 4 else 7, tp)
    with pytest.raises(TypeError, match="float32 or float64"):
        mt.reduce_from_group(torch.ones(4, dtype=torch.int32), tp)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compressed_tensor_parallel_collectives_stay_within_the_codec_bound(comm, dtype):
    """Through a group that compresses (bitplane 16.25, ring): the row layer's forward
    sum and the column layer's backward sum of input gradients each stay within the
    bound mpicomp states for one compressed ring allreduce of those partials; what needs
    no communication (the column layer's output and weight gradients) is exact."""
    tp = _group(comm, **BITPLANE)
    p, r = tp.Get_size(), tp.Get_rank()
    npdt = np.dtype(np.float32 if dtype == torch.float32 else np.float64)
    c, a = bounds.codec_constants(get_codec({"id": "bitplane", "rate": 16.25}), npdt)
    fc1, fc2 = _mlp(5, dtype)
    x = _input(6, (64, 12), dtype)
    col = mt.ColumnParallelLinear.from_linear(fc1, tp)
    row = mt.RowParallelLinear.from_linear(fc2, tp)
    rows = slice(r * 16 // p, (r + 1) * 16 // p)

    # forward of the row layer: the exact sum of the ranks' partials, within the bound
    h = torch.nn.functional.gelu(fc1(x)).detach()
    partials = [torch.nn.functional.linear(_part(h, p, q, -1), _part(fc2.weight, p, q, 1))
                for q in range(p)]
    exact = torch.stack([t.double() for t in partials]).sum(0).detach()
    g = sum(t.abs().max().item() for t in partials)
    y = row(_part(h, p, r, -1)) - fc2.bias.detach()
    err = (y.double() - exact).abs().max().item()
    assert err <= bounds.allreduce_bound("ring", p, c, a, g, npdt), err
    assert err > 0  # 16 bits a value: something was lost on the way

    # backward of the column layer: the input's gradient summed over the ranks
    xs = x.clone().requires_grad_(True)
    out = col(xs)
    torch.testing.assert_close(out, fc1(x)[:, rows].detach())
    upstream = _input(7, out.shape, dtype)
    out.backward(upstream)
    # (every rank's upstream gradient is the same tensor: seed 7)
    per_rank = [upstream @ _part(fc1.weight, p, q, 0).detach() for q in range(p)]
    exact = torch.stack([t.double() for t in per_rank]).sum(0).detach()
    g = sum(t.abs().max().item() for t in per_rank)
    err = (xs.grad.double() - exact).abs().max().item()
    assert err <= bounds.allreduce_bound("ring", p, c, a, g, npdt), err
    torch.testing.assert_close(col.weight.grad, upstream.T @ x)
    assert tp.stats()["Allreduce"]["compressed"] == 2
