"""mpicomp.torch.compressed_allreduce_hook: DDP's gradient buckets through mpicomp."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import mpicomp.torch as mt  # noqa: E402


def _grads(comm, hook_state=None, steps=1, bucket_cap_mb=0.05, hook=None, device="cpu"):
    """Each parameter's gradient after ``steps`` backward passes of a small MLP under DDP
    (rank-dependent data, the same initial weights), with our hook (or ``hook``) when a
    state is given; the model on ``device``, the gradients returned on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    if hook_state is not None:
        ddp.register_comm_hook(hook_state, hook or mt.compressed_allreduce_hook)
    g = torch.Generator().manual_seed(1 + comm.Get_rank())
    out = []
    for _ in range(steps):
        ddp.zero_grad()
        x = torch.randn(32, 64, generator=g).to(device)
        ddp(x).square().mean().backward()
        out.append([p.grad.detach().cpu().clone() for p in model.parameters()])
    return out


@pytest.mark.mpi(min_size=2)
def test_codec_none_is_ddps_own_allreduce(comm, process_group):
    """codec none: bit for bit PyTorch's allreduce hook, and within float32 rounding of
    DDP's built-in reduction (which divides by the world size at another point)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    builtin = _grads(comm)
    got = _grads(comm, mt.HookState(comm=comm, codec="none"))
    want = _grads(comm, dist.group.WORLD, hook=default_hooks.allreduce_hook)
    for a, b, c in zip(want[0], got[0], builtin[0], strict=True):
        assert torch.equal(a, b)
        assert torch.allclose(b, c, rtol=1e-6, atol=1e-9)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("feedback", ["none", "classic", "loco"])
def test_compressed_buckets_average_within_the_codecs_bound(comm, process_group, feedback):
    """bitplane 16.25 over several buckets: every gradient within its error bound of DDP's
    average, the same bits on every rank; error feedback keeps a residual per bucket."""
    want = _grads(comm, steps=2)
    state = mt.HookState(comm=comm, codec="bitplane", rate=16.25, threshold=0,
                         error_feedback=feedback)
    got = _grads(comm, state, steps=2)
    for step in range(2):
        for a, b in zip(want[step], got[step], strict=True):
            err = float((a - b).abs().max())
            # a block's error is at most 2**-14 of its largest magnitude per rank's term;
            # the ring's partial sums and the average keep it within this (stated) bound
            bound = 2.0 ** -12 * float(a.abs().max()) * comm.Get_size() + 1e-7
            assert err <= bound, (step, err, bound)
            digests = comm.allgather(b.numpy().tobytes())
            assert len(set(digests)) == 1
    stats = state.comm.stats()
    assert stats["Iallreduce"]["compressed"] >= 2  # (several buckets, each compressed)
    assert (state.feedback.nbytes() > 0) == (feedback != "none")


@pytest.mark.mpi(min_size=2)
@pytest.mark.device
def test_compressed_buckets_on_cuda(comm, process_group):
    """Where a GPU is: CUDA buckets through mpicomp's device path (LoCo feedback), every
    gradient within the bound of the CPU test above of DDP's own average, the same bits
    on every rank."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU for PyTorch")
    want = _grads(comm, steps=2, device="cuda")
    state = mt.HookState(comm=comm, codec="bitplane", rate=16.25, threshold=0,
                         error_feedback="loco")
    got = _grads(comm, state, steps=2, device="cuda")
    for step in range(2):
        for a, b in zip(want[step], got[step], strict=True):
            bound = 2.0 ** -12 * float(a.abs().max()) * comm.Get_size() + 1e-7
            assert float((a - b).abs().max()) <= bound, step
            assert len(set(comm.allgather(b.numpy().tobytes()))) == 1
    stats = state.comm.stats()["Iallreduce"]
    assert stats["compressed"] >= 2 and all(m.startswith("device") for m in stats["memory"])


def test_bad_settings_raise_when_the_state_is_made():
    with pytest.raises(ValueError):
        mt.HookState(codec="bitplane", rate=-1.0)
    with pytest.raises(ValueError, match="error_feedback"):
        mt.HookState(codec="bitplane", rate=8.25, error_feedback="sometimes")
