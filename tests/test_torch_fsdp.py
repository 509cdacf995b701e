"""mpicomp.torch.CompressedReduceScatter: FSDP2's gradient reduce-scatter through mpicomp."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
fsdp = pytest.importorskip("torch.distributed.fsdp")

import mpicomp.torch as mt  # noqa: E402


def _sharded_grads(comm, reduce_scatter=None):
    """Each parameter's local gradient shard after one backward pass of a small MLP under
    FSDP2 (every layer and the model sharded; rank-dependent data, equal initial weights)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 16))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fsdp.fully_shard(layer)
    fsdp.fully_shard(model)
    if reduce_scatter is not None:
        for m in model.modules():
            if isinstance(m, fsdp.FSDPModule):
                m.set_custom_reduce_scatter(reduce_scatter)
    g = torch.Generator().manual_seed(1 + comm.Get_rank())
    model(torch.randn(32, 64, generator=g)).square().mean().backward()
    return [p.grad.to_local().clone() for p in model.parameters()]


@pytest.mark.mpi(min_size=2)
def test_codec_none_gives_fsdps_gradients(comm, process_group):
    want = _sharded_grads(comm)
    got = _sharded_grads(comm, mt.CompressedReduceScatter(comm, codec="none"))
    for a, b in zip(want, got, strict=True):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-9)


@pytest.mark.mpi(min_size=2)
def test_compressed_reduce_scatter_within_the_codecs_bound(comm, process_group):
    """bitplane 16.25: every gradient shard within a stated bound of FSDP2's own (a block's
    error at most 2**-14 of its largest magnitude per rank's term, summed over the ranks)."""
    want = _sharded_grads(comm)
    rs = mt.CompressedReduceScatter(comm, codec="bitplane", rate=16.25, threshold=0)
    got = _sharded_grads(comm, rs)
    for a, b in zip(want, got, strict=True):
        bound = 2.0 ** -12 * float(a.abs().max()) * comm.Get_size() + 1e-7
        assert float((a - b).abs().max()) <= bound
    assert rs.comm.stats()["Reduce_scatter_block"]["compressed"] >= 1
