"""mpicomp.torch.CompressedReduceScatter and CompressedAllGather: FSDP2's gradient
reduce-scatter and parameter all-gather through mpicomp."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
fsdp = pytest.importorskip("torch.distributed.fsdp")

import mpicomp.torch as mt  # noqa: E402


def _model(reduce_scatter=None, all_gather=None):
    """A small MLP under FSDP2 (every layer and the model sharded, equal initial weights),
    with the custom communication objects given."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 16))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fsdp.fully_shard(layer)
    fsdp.fully_shard(model)
    for m in model.modules():
        if isinstance(m, fsdp.FSDPModule):
            if reduce_scatter is not None:
                m.set_custom_reduce_scatter(reduce_scatter)
            if all_gather is not None:
                m.set_custom_all_gather(all_gather)
    return model


def _input(comm):
    return torch.randn(32, 64, generator=torch.Generator().manual_seed(1 + comm.Get_rank()))


def _sharded_grads(comm, reduce_scatter=None):
    """Each parameter's local gradient shard after one backward pass (rank-dependent
    data)."""
    model = _model(reduce_scatter)
    model(_input(comm)).square().mean().backward()
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


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("codec", ["none", "bitplane"])
def test_all_gather_gives_fsdps_forward(comm, process_group, codec):
    """The parameters all-gathered through mpicomp: codec none gives FSDP2's own outputs
    bitwise; bitplane 16.25 within a stated bound (each parameter within 2**-14 of its
    block's largest magnitude, so the outputs within a few 1e-4 relative), the same outputs
    on every rank for the same input, and the sharded parameters untouched (exact)."""
    x = _input(comm)
    want = _model()(x).detach()
    ag = mt.CompressedAllGather(comm, codec=codec, rate=16.25, threshold=0)
    model = _model(all_gather=ag)
    got = model(x).detach()
    if codec == "none":
        assert torch.equal(got, want)
        return
    scale = float(want.abs().max())
    assert float((got - want).abs().max()) <= 2e-3 * scale
    assert ag.comm.stats()["Allgather"]["compressed"] >= 1
    same = model(torch.ones(4, 64)).detach().numpy().tobytes()
    assert len(set(comm.allgather(same))) == 1
    exact = _model()
    for a, b in zip(model.parameters(), exact.parameters(), strict=True):
        assert torch.equal(a.to_local(), b.to_local())
