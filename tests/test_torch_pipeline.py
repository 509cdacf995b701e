"""Pipeline parallelism (mpicomp.torch.pipeline_parallel): stages over micro-batches give the
unsplit model's loss and gradients (skipped without torch)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import mpicomp  # noqa: E402
import mpicomp.torch as mt  # noqa: E402

LAYERS = 4  # Linear+Tanh blocks of the model, split among 2 to 4 stages


def _model(seed: int = 0):
    torch.manual_seed(seed)
    blocks = []
    for _ in range(LAYERS):
        blocks += [torch.nn.Linear(6, 6, dtype=torch.float64), torch.nn.Tanh()]
    return torch.nn.Sequential(*blocks)


def _stage_of(model, stage: int, stages: int):
    """Stage ``stage``'s blocks (contiguous, as even as they split)."""
    first, last = stage * LAYERS // stages, (stage + 1) * LAYERS // stages
    return torch.nn.Sequential(*list(model)[2 * first:2 * last])


def _batch(n: int = 24):
    g = torch.Generator().manual_seed(3)
    return (torch.randn(n, 6, generator=g, dtype=torch.float64),
            torch.randn(n, 6, generator=g, dtype=torch.float64))


def _pipeline(comm):
    p = comm.Get_size()
    if not 2 <= p <= 4:
        pytest.skip("pipeline tests run on 2 to 4 ranks")
    return mpicomp.Comm(comm, codec="none")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("micro_batches", [1, 2, 3, 8])
def test_a_pipeline_gives_the_unsplit_loss_and_gradients(comm, micro_batches, schedule):
    """2 to 4 stages (as many as ranks), 1 to 8 micro-batches, both schedules, codec
    none: the loss returned on every stage and each stage's parameter gradients equal
    the unsplit model's on the whole batch; no deadlock (the stage's timeout would catch
    one)."""
    pp = _pipeline(comm)
    s, n = pp.Get_rank(), pp.Get_size()
    x, t = _batch()
    whole = _model()
    want = torch.nn.functional.mse_loss(whole(x), t)
    want.backward()
    stage = mt.PipelineStage(_stage_of(_model(), s, n), pp)
    loss = stage.step(x if s == 0 else None, t if s == n - 1 else None,
                      torch.nn.functional.mse_loss, micro_batches=micro_batches,
                      schedule=schedule)
    assert loss == pytest.approx(want.item(), rel=1e-12)
    # GPipe holds every micro-batch's activations; 1F1B at most stages - stage
    assert stage.peak_in_flight == (micro_batches if schedule == "gpipe"
                                    else min(n - s, micro_batches))
    mine = list(stage.module.parameters())
    ref = list(_stage_of(whole, s, n).parameters())
    assert mine and len(mine) == len(ref)
    for a, b in zip(mine, ref, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)
    # a second step accumulates, as backward() does
    stage.step(x if s == 0 else None, t if s == n - 1 else None,
               torch.nn.functional.mse_loss, micro_batches=micro_batches, schedule=schedule)
    for a, b in zip(mine, ref, strict=True):
        torch.testing.assert_close(a.grad, 2 * b.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.mpi(min_size=2)
def test_a_compressing_pipeline_sends_frames_and_stays_close(comm):
    """Through a pipeline group that compresses (bitplane 24.25 on every message): the
    activations and gradients travel compressed and the loss stays within 1e-4 of the
    exact one."""
    if not 2 <= comm.Get_size() <= 4:
        pytest.skip("pipeline tests run on 2 to 4 ranks")
    pp = mpicomp.Comm(comm, codec="bitplane", rate=24.25, threshold=0)
    s, n = pp.Get_rank(), pp.Get_size()
    x, t = _batch()
    want = torch.nn.functional.mse_loss(_model()(x), t).item()
    stage = mt.PipelineStage(_stage_of(_model(), s, n), pp)
    loss = stage.step(x if s == 0 else None, t if s == n - 1 else None,
                      torch.nn.functional.mse_loss, micro_batches=4)
    assert loss == pytest.approx(want, rel=1e-4)
    sent = pp.stats().get("Isend", {})
    assert sent.get("compressed", 0) == 4 * (2 if 0 < s < n - 1 else 1)


@pytest.mark.mpi(min_size=2)
def test_bad_pipeline_calls_raise_before_anything_is_sent(comm):
    pp = _pipeline(comm)
    s, n = pp.Get_rank(), pp.Get_size()
    stage = mt.PipelineStage(_stage_of(_model(), s, n), pp)
    x, t = _batch(10)
    with pytest.raises(ValueError, match="micro_batches must be a positive integer"):
        stage.step(x, t, torch.nn.functional.mse_loss, micro_batches=0)
    with pytest.raises(ValueError, match="schedule must be one of"):
        stage.step(x, t, torch.nn.functional.mse_loss, micro_batches=2, schedule="zb")
    if s == 0:
        with pytest.raises(ValueError, match="batch of 10 .* divisible by micro_batches=4"):
            stage.step(x, None, None, micro_batches=4)
    if s == n - 1:
        with pytest.raises(ValueError, match="needs loss_fn"):
            stage.step(None, t, None, micro_batches=2)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("micro_batches", [1, 3])
def test_evaluate_gives_the_unsplit_loss_and_touches_no_gradient(comm, micro_batches):
    """Forward only: the unsplit model's loss on every stage, no ``.grad`` set."""
    pp = _pipeline(comm)
    s, n = pp.Get_rank(), pp.Get_size()
    x, t = _batch()
    with torch.no_grad():
        want = torch.nn.functional.mse_loss(_model()(x), t).item()
    stage = mt.PipelineStage(_stage_of(_model(), s, n), pp)
    loss = stage.evaluate(x if s == 0 else None, t if s == n - 1 else None,
                          torch.nn.functional.mse_loss, micro_batches=micro_batches)
    assert loss == pytest.approx(want, rel=1e-12)
    assert all(q.grad is None for q in stage.module.parameters())
