"""PyTorch integration: DistributedOptimizer and broadcast_parameters (skipped without torch).

torch is an optional extra of the package; ``make venv`` installs it into ``.venv``
(docs/training.md), so these run in ``make test``.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpicomp.torch as mt  # noqa: E402


def _model(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def _identical(comm, model) -> bool:
    blob = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return len(set(comm.allgather(blob))) == 1


@pytest.mark.mpi
def test_broadcast_parameters_makes_every_rank_start_alike(comm):
    model = _model(comm.Get_rank())          # different on every rank
    mt.broadcast_parameters(model.state_dict(), root=0, comm=comm)
    assert _identical(comm, model)
    ref = _model(0)
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)


@pytest.mark.mpi
@pytest.mark.parametrize("feedback", ["none", "loco"])
def test_distributed_optimizer_averages_and_keeps_ranks_identical(comm, feedback):
    p, r = comm.Get_size(), comm.Get_rank()
    model = _model(0)
    opt = mt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), comm=comm,
                                  codec="bitplane", rate=8.25, threshold=0,
                                  error_feedback=feedback,
                                  rules=[("*.bias", {"codec": "none"})])
    gen = torch.Generator().manual_seed(100 + r)
    for step in range(5):
        x = torch.rand(16, 64, generator=gen)
        y = torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        mine = {n: q.grad.detach().clone().numpy() for n, q in model.named_parameters()}
        exact = {n: comm.allreduce(g.astype(np.float64)) / p for n, g in mine.items()}
        opt.synchronize()
        for n, q in model.named_parameters():
            got = q.grad.numpy()
            scale = max(float(np.abs(exact[n]).max()), 1e-12)
            tol = 1e-6 if n.endswith("bias") else 0.05
            assert np.abs(got - exact[n]).max() <= tol * scale + 1e-7, (step, n)
        opt.optimizer.step()
        assert _identical(comm, model), step
    assert opt.staged == 0


@pytest.mark.mpi
def test_bfloat16_gradients_are_staged_as_float32(comm):
    model = _model(0).to(torch.bfloat16)
    opt = mt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), comm=comm,
                                  codec="bitplane", rate=16.25, threshold=0)
    x = torch.rand(8, 64, generator=torch.Generator().manual_seed(comm.Get_rank()))
    model(x.to(torch.bfloat16)).float().pow(2).mean().backward()
    opt.step()
    assert opt.staged == 4
    assert all(q.grad.dtype == torch.bfloat16 for q in model.parameters())
    assert _identical_bf16(comm, model)


def _identical_bf16(comm, model) -> bool:
    blob = b"".join(p.detach().view(torch.int16).numpy().tobytes() for p in model.parameters())
    return len(set(comm.allgather(blob))) == 1


@pytest.mark.mpi
@pytest.mark.gpu
def test_cuda_gradients_are_reduced_on_the_device(comm):
    """CUDA float32 gradients go through the reducer's device path (no copy: staged 0),
    bfloat16 ones through a float32 copy on the GPU; the mean within the codec's bound of
    the exact mean, parameters the same bits on every rank."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    p, r = comm.Get_size(), comm.Get_rank()
    for dtype, staged in ((torch.float32, 0), (torch.bfloat16, 4)):
        model = _model(0).to("cuda", dtype)
        opt = mt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      named_parameters=model.named_parameters(), comm=comm,
                                      codec="bitplane", rate=8.25, threshold=0,
                                      error_feedback="classic")
        x = torch.rand(16, 64, generator=torch.Generator().manual_seed(r)).to("cuda", dtype)
        model(x).float().pow(2).mean().backward()
        mine = {n: q.grad.float().cpu().numpy() for n, q in model.named_parameters()}
        exact = {n: comm.allreduce(g.astype(np.float64)) / p for n, g in mine.items()}
        opt.synchronize()
        torch.cuda.synchronize()
        for n, q in model.named_parameters():
            assert q.grad.device.type == "cuda" and q.grad.dtype == dtype
            got = q.grad.float().cpu().numpy()
            scale = max(float(np.abs(exact[n]).max()), 1e-12)
            tol = 0.05 if dtype == torch.float32 else 0.06  # bf16: one more rounding
            assert np.abs(got - exact[n]).max() <= tol * scale + 1e-7, n
        assert opt.staged == staged
        assert all(b["settings"]["place"] == "device" for b in opt.reducer.describe())
        opt.optimizer.step()
        blob = b"".join(q.detach().float().cpu().numpy().tobytes() for q in model.parameters())
        assert len(set(comm.allgather(blob))) == 1


def _overlap_run(comm, steps: int, **settings):
    """Adam steps of ``_model(0)`` with ``DistributedOptimizer``: per step the Iallreduce
    calls started during backward, and the parameters' bytes after the step."""
    r = comm.Get_rank()
    model = _model(0)
    import mpicomp

    dp = mpicomp.Comm(comm)
    opt = mt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-2),
                                  named_parameters=model.named_parameters(), comm=dp,
                                  bucket_mib=1 / 256, **settings)
    started, blobs, after = [], [], 0
    gen = torch.Generator().manual_seed(300 + r)
    for _ in range(steps):
        x, y = torch.rand(16, 64, generator=gen), torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        calls = dp.stats().get("Iallreduce", {}).get("calls", 0)
        started.append(calls - after)  # the Iallreduce calls started during backward
        opt.step()
        after = dp.stats().get("Iallreduce", {}).get("calls", 0)
        blobs.append(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    return opt, started, blobs


@pytest.mark.mpi(min_size=2)
def test_overlap_reduces_during_backward_with_the_same_result(comm):
    """overlap=True, codec none: from the second step every bucket starts during backward,
    and the parameters are bitwise those of overlap=False (the same averages); bitplane 8.25
    with LoCo keeps the replicas identical; a second backward before the step raises."""
    opt, started, overlapped = _overlap_run(comm, 4, overlap=True, codec="none")
    _, _, plain = _overlap_run(comm, 4, overlap=False, codec="none")
    assert overlapped == plain
    buckets = len(opt.reducer.plan)
    assert buckets >= 2
    # buckets in backward's order: the last layer's first
    assert opt.reducer.plan[0].names[0] == "2.bias"
    # the first step reduces at step(); every later step's buckets all start in backward
    assert started == [0] + [buckets] * 3
    opt, _, blobs = _overlap_run(comm, 4, overlap=True, codec="bitplane", rate=8.25,
                                 threshold=0, error_feedback="loco")
    assert all(len(set(comm.allgather(b))) == 1 for b in blobs)
    assert opt.reducer.feedback.nbytes() > 0
    model = torch.nn.Linear(8, 8)
    opt = mt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), comm=comm,
                                  overlap=True)
    x = torch.ones(2, 8)
    for _ in range(2):  # (the first step makes the plan)
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    opt.zero_grad()
    model(x).sum().backward()
    with pytest.raises(RuntimeError, match="one backward per step"):
        model(x).sum().backward()
    opt.step()  # (the first backward's buckets finish)


def test_progress_waits_for_mpicomp_requests_without_testing_them(monkeypatch):
    """The overlap helper drives plain MPI requests by testing them, but an mpicomp
    request completes by its own work: the helper waits for that, never calls its
    ``Test`` (about 0.9 ms of a core a rank and step in the transformer study
    otherwise), and the caller's ``Wait`` then completes it, re-raising what the work
    raised."""
    import threading

    from mpicomp.requests import Request
    from mpicomp.torch.progress import Progress

    tests = []
    monkeypatch.setattr(Request, "Test", lambda self, status=None: tests.append(1) or True)
    go = threading.Event()
    req = Request.start(go.wait)
    progress = Progress()
    watched = progress.watch(req)
    assert not watched.done() and not go.is_set()
    go.set()
    assert watched.result(timeout=30) is True
    req.Wait()
    assert tests == []

    def fails() -> None:
        raise RuntimeError("the work failed")

    bad = Request.start(fails)
    assert progress.watch(bad).result(timeout=30) is True
    with pytest.raises(RuntimeError, match="the work failed"):
        bad.Wait()
