"""Sharded data parallelism (mpicomp.torch.ShardedOptimizer): identical replicas, the
unsharded trajectory with codec none, the optimizer state divided by the ranks (skipped
without torch)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpicomp  # noqa: E402
import mpicomp.torch as mt  # noqa: E402
from mpicomp.algorithms import bounds  # noqa: E402
from mpicomp.codecs import get_codec  # noqa: E402


def _model(seed: int):
    """Odd sizes (a 7x5 weight, a 3-value bias ...): shards cut through tensors."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def _data(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 5, generator=g), torch.randn(16, 3, generator=g)


def _reference_step(ref, ref_opt, p: int, step: int, clip=None):
    """One Adam step of the unsharded ``ref`` on every rank's gradient of ``step``, averaged
    (clipped first with ``clip`` = (max_norm, norm_type): returns the norm)."""
    ref_opt.zero_grad()
    grads = []
    for q in range(p):
        ref.zero_grad()
        xq, tq = _data(q, step)
        torch.nn.functional.mse_loss(ref(xq), tq).backward()
        grads.append([w.grad.clone() for w in ref.parameters()])
    for i, w in enumerate(ref.parameters()):
        w.grad = sum(g[i] for g in grads) / p
    norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), *clip) if clip else None
    ref_opt.step()
    return norm


def _blob(model) -> bytes:
    return b"".join(p.detach().numpy().tobytes() for p in model.parameters())


def _train(model, opt, comm, steps: int) -> list[bytes]:
    r = comm.Get_rank()
    seen = []
    for step in range(steps):
        x, t = _data(r, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()
        seen.append(_blob(model))
    return seen


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_mib", [25.0, 1e-4])
def test_codec_none_follows_the_unsharded_trajectory_on_identical_replicas(comm, bucket_mib):
    """Codec none, one bucket or several (26 values each, cut through tensors): after
    every step every rank holds the same bits, and they follow Adam on the whole model
    with the ranks' gradients averaged (float32 sums: to 1e-6); each rank's optimizer
    state is its share (1/p of the unsharded state, padding aside)."""
    p, r = comm.Get_size(), comm.Get_rank()
    dp = mpicomp.Comm(comm, codec="none")
    model = _model(r)  # different on every rank: the optimizer copies rank 0's
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=dp, lr=0.01,
                              bucket_mib=bucket_mib)
    assert len(opt.buckets) == (1 if bucket_mib > 1 else 3)  # 66 values
    ref = _model(0)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    assert _blob(model) == _blob(ref)
    for step in range(4):
        x, t = _data(r, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()
        assert len(set(comm.allgather(_blob(model)))) == 1  # identical replicas
        _reference_step(ref, ref_opt, p, step)  # every rank's gradient, averaged
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    # the unsharded optimizer's memory, counted alike: its parameters and its state
    unsharded = sum(w.numel() * 4 for w in ref.parameters()) + sum(
        v.numel() * v.element_size() for st in ref_opt.state.values() for v in st.values()
        if torch.is_tensor(v))
    parts = sum(-(-n // p) for _, n, _, _ in opt.buckets)  # this rank's values, padded
    assert opt.state_bytes() == 3 * 4 * parts + 4  # (+ Adam's step count)
    assert opt.state_bytes() <= unsharded / p + 3 * 4 * len(opt.buckets) + 4


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("feedback", ["none", "classic", "loco"])
def test_compressed_gradients_and_parameters_keep_replicas_identical(comm, feedback):
    """Gradients reduce-scattered at bitplane 4.25 (with error feedback or not) and
    parameters allgathered at bitplane 8.25: both compressed, the replicas the same bits
    after every step, the owner's master values exact, and the model still learns."""
    r = comm.Get_rank()
    dp = mpicomp.Comm(comm)
    model = _model(0)
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.SGD, comm=dp, lr=0.05,
                              codec="bitplane", rate=4.25, threshold=0,
                              error_feedback=feedback,
                              param_settings={"codec": "bitplane", "rate": 8.25,
                                              "threshold": 0})
    x, t = _data(r, 0)
    first = torch.nn.functional.mse_loss(model(x), t).item()
    for blob in _train(model, opt, dp, 30):
        assert len(set(comm.allgather(blob))) == 1
    stats = dp.stats()
    assert stats["Reduce_scatter_block"]["compressed"] == 30
    assert stats["Allgather"]["compressed"] == 30
    # the owner's master values are exact; the parameters it holds are their decoding
    mine = np.concatenate([w.detach().reshape(-1).numpy() for w in model.parameters()])
    master = opt.master.detach().numpy()
    in_flat, in_master = opt.owned()
    owned, exact = mine[in_flat], master[in_master]
    assert owned.size and np.abs(owned - exact).max() > 0  # 8 bits lost something
    c, a = bounds.codec_constants(get_codec({"id": "bitplane", "rate": 8.25}),
                                  np.dtype(np.float32))
    assert np.abs(owned - exact).max() <= c * np.abs(master).max() + a
    assert torch.nn.functional.mse_loss(model(x), t).item() < first


@pytest.mark.mpi(min_size=2)
def test_bad_sharded_optimizer_settings_raise_on_every_rank(comm):
    dp = mpicomp.Comm(comm)
    model = _model(0)
    with pytest.raises(ValueError, match="error_feedback must be one of"):
        mt.ShardedOptimizer(model.named_parameters(), comm=dp, error_feedback="sometimes")
    with pytest.raises(ValueError, match="error feedback needs a named codec"):
        mt.ShardedOptimizer(model.named_parameters(), comm=dp, error_feedback="loco")
    with pytest.raises(ValueError, match="bucket_mib must be > 0"):
        mt.ShardedOptimizer(model.named_parameters(), comm=dp, bucket_mib=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentum'"):
        mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=dp,
                            momentum=0.9)


def _fresh(seed: int, comm, settings):
    """A new model (initial weights of ``seed``) and its sharded Adam."""
    model = _model(seed)
    return model, mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=comm,
                                      **settings)


def _steps(model, opt, comm, first: int, last: int) -> bytes:
    """Steps ``first`` to ``last - 1`` (each its own data); the parameters' bytes after."""
    for step in range(first, last):
        x, t = _data(comm.Get_rank(), step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()
    return _blob(model)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("feedback", ["none", "loco"])
def test_a_run_saved_and_resumed_gives_the_bits_of_an_uninterrupted_one(comm, feedback):
    """state_dict() mid-way (each rank its own), a new model and optimizer (other initial
    weights) loading it: the parameters after the remaining steps are bitwise those of the
    uninterrupted run, compressed gradients and error feedback (residuals, LoCo's reset
    count: reset_every 2) included."""
    import copy

    settings = {"codec": "bitplane", "rate": 4.25, "threshold": 0, "error_feedback": feedback,
                "reset_every": 2, "bucket_mib": 1e-4, "lr": 1e-2}
    whole = _steps(*_fresh(0, comm, settings), comm, 0, 6)
    model, opt = _fresh(0, comm, settings)
    _steps(model, opt, comm, 0, 3)
    saved = copy.deepcopy(opt.state_dict())
    if feedback != "none":
        assert saved["feedback"]["residuals"]  # (something to carry over)
    model, opt = _fresh(1, comm, settings)
    opt.load_state_dict(saved)
    assert _steps(model, opt, comm, 3, 6) == whole


@pytest.mark.mpi(min_size=2)
def test_a_state_of_another_layout_is_refused_on_every_rank(comm):
    model = _model(0)
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=comm, lr=1e-2)
    state = opt.state_dict()
    if comm.Get_rank() == 0:  # one rank's state is wrong: every rank raises
        state["layout"] = {**state["layout"], "numel": state["layout"]["numel"] + 1}
    with pytest.raises(ValueError, match="does not match"):
        opt.load_state_dict(state)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm_is_the_whole_models_across_shards(comm, norm_type):
    """Codec none: clip_grad_norm_ returns the norm of the whole model's averaged gradient
    and clips it as torch.nn.utils.clip_grad_norm_ does unsharded (to float32 rounding), and
    the steps follow the unsharded Adam with clipping."""
    p, r = comm.Get_size(), comm.Get_rank()
    model = _model(0)
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam,
                              comm=mpicomp.Comm(comm, codec="none"), lr=0.01, bucket_mib=1e-4)
    ref = _model(0)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for step in range(3):
        x, t = _data(r, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        norm = opt.clip_grad_norm_(0.05, norm_type)
        opt.step()
        want = _reference_step(ref, ref_opt, p, step, clip=(0.05, norm_type))
        assert float(want) > 0.05  # (clipping happened)
        torch.testing.assert_close(norm.float(), want.float(), rtol=1e-5, atol=1e-7)
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.mpi(min_size=2)
def test_bfloat16_parameters_with_float32_master_shards(comm):
    """A bfloat16 model: the shards' master values and Adam's state stay float32, each
    step writes them rounded into the bfloat16 parameters, the same bits on every rank, and
    they follow the float32 master values (to bfloat16's rounding)."""
    model = _model(0).to(torch.bfloat16)
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=comm, lr=1e-2,
                              codec="bitplane", rate=8.25, threshold=0)
    assert opt.master.dtype == torch.float32
    for step in range(3):
        x, t = _data(comm.Get_rank(), step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.to(torch.bfloat16)),
                                     t.to(torch.bfloat16)).backward()
        opt.step()
        bits = b"".join(p.detach().view(torch.int16).numpy().tobytes() for p in model.parameters())
        assert len(set(comm.allgather(bits))) == 1
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    where_flat, where_master = opt.owned()
    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    mine = opt.master.detach()[torch.from_numpy(where_master)]
    torch.testing.assert_close(flat[torch.from_numpy(where_flat)], mine, rtol=2 ** -8, atol=0)


@pytest.mark.mpi(min_size=2)
def test_a_consolidated_state_resumes_every_rank(comm):
    """consolidate_state_dict(to=0): every rank's shard on rank 0 (None elsewhere); that
    one state, broadcast as a checkpoint file would be read, resumes every rank bitwise."""
    settings = {"codec": "bitplane", "rate": 4.25, "threshold": 0, "error_feedback": "loco",
                "bucket_mib": 1e-4, "lr": 1e-2}
    whole = _steps(*_fresh(0, comm, settings), comm, 0, 4)
    model, opt = _fresh(0, comm, settings)
    _steps(model, opt, comm, 0, 2)
    full = opt.consolidate_state_dict(to=0)
    assert (full is None) == (comm.Get_rank() != 0)
    if full is not None:
        assert [s["layout"]["rank"] for s in full["shards"]] == list(range(comm.Get_size()))
    full = comm.bcast(full, root=0)
    model, opt = _fresh(1, comm, settings)
    opt.load_state_dict(full)
    assert _steps(model, opt, comm, 2, 4) == whole


@pytest.mark.mpi(min_size=2)
def test_parameters_without_names_shard_alike(comm):
    """model.parameters() as ZeroRedundancyOptimizer takes them: the same steps as
    named_parameters(); param-group dicts raise a TypeError naming the constraint."""
    settings = {"bucket_mib": 1e-4, "lr": 1e-2}
    named = _steps(*_fresh(0, comm, settings), comm, 0, 2)
    model = _model(0)
    opt = mt.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm=comm, **settings)
    assert _steps(model, opt, comm, 0, 2) == named
    with pytest.raises(TypeError, match="param groups"):
        mt.ShardedOptimizer([{"params": list(model.parameters()), "lr": 1e-3}],
                            torch.optim.Adam, comm=comm)
