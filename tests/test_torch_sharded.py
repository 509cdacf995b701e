"""Sharded data parallelism (mpicomp.torch.ShardedOptimizer): identical replicas, the
unsharded trajectory with codec none, the optimizer state divided by the ranks (skipped
without torch)."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from real_like import gradient_like

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
    parts = sum(b.part for b in opt.buckets)  # this rank's values, padded
    # (the master values are the float32 parameters themselves; + Adam's step counts)
    assert opt.aliased and opt.state_bytes() == 2 * 4 * parts + 4 * len(opt.buckets)
    assert opt.state_bytes() <= unsharded / p + 3 * 4 * len(opt.buckets)


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
    # reduce-scattered during backward, each gradient quantized once (the direct algorithm)
    assert stats["Ireduce_scatter_block"]["compressed"] == 30
    assert stats["Ireduce_scatter_block"]["algorithms"] == {"direct": 30}
    assert stats["Iallgather"]["compressed"] == 30
    # the owner's master values are exact; the parameters it holds are their decoding
    mine = opt.flat.numpy()
    master = opt.master_values().numpy()
    in_flat, in_master = opt.owned()
    owned, exact = mine[in_flat], master[in_master]
    assert owned.size and np.abs(owned - exact).max() > 0  # 8 bits lost something
    c, a = bounds.codec_constants(get_codec({"id": "bitplane", "rate": 8.25}),
                                  np.dtype(np.float32))
    assert np.abs(owned - exact).max() <= c * np.abs(master).max() + a
    assert torch.nn.functional.mse_loss(model(x), t).item() < first


class _Skipping(torch.nn.Module):
    """Three linear layers; the middle one is used only when ``use_middle``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.a, self.b, self.c = (torch.nn.Linear(5, 9), torch.nn.Linear(9, 9),
                                  torch.nn.Linear(9, 3))
        self.use_middle = True

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.use_middle:
            h = torch.tanh(self.b(h))
        return self.c(h)


@pytest.mark.mpi(min_size=2)
def test_parameter_changes_gathered_compressed_stay_within_one_gathers_error(comm):
    """gather_deltas at bitplane 4.25 (gradients plain): after every step the replicas hold
    the same bits, and the values each rank owns are within the codec's bound of this
    step's change from the master values (what a gather lost goes with the next change:
    no error builds up over the steps), far closer than gathering the values at the same
    rate; the changes' receive buffers are counted in ``memory()``."""
    r = comm.Get_rank()
    params = {"codec": "bitplane", "rate": 4.25, "threshold": 0}
    c, a = bounds.codec_constants(get_codec({"id": "bitplane", "rate": 4.25}),
                                  np.dtype(np.float32))
    eps = float(np.finfo(np.float32).eps)
    worst = {}
    for deltas in (False, True):
        dp = mpicomp.Comm(comm)
        model = _model(0)
        opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=dp,
                                  lr=0.01, codec="none", param_settings=params,
                                  gather_deltas=deltas, bucket_mib=1e-4)
        in_flat, in_master = opt.owned()
        worst[deltas] = 0.0
        for step in range(20):
            before = opt.flat.numpy()[in_flat].copy()
            x, t = _data(r, step)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), t).backward()
            opt.step()
            assert len(set(comm.allgather(_blob(model)))) == 1  # identical replicas
            owned = opt.flat.numpy()[in_flat]
            master = opt.master_values().numpy()[in_master]
            gap = float(np.abs(owned - master).max())
            if deltas:  # the codec's bound on this step's change (and two roundings)
                change = np.abs(master - before).max()
                assert gap <= c * change + a + 2 * eps * np.abs(master).max()
            worst[deltas] = max(worst[deltas], gap)
        assert dp.stats()["Iallgather"]["compressed"] == 20 * len(opt.buckets)
        held = opt.memory()["parameters"] - opt.flat.numel() * 4  # (step() starts all)
        assert held == (4 * sum(opt.layout.whole(b).stop - opt.layout.whole(b).start
                                for b in opt.buckets) if deltas else 0)
    assert 0 < worst[True] and 8 * worst[True] < worst[False]
    with pytest.raises(ValueError, match="gather_deltas sends each step's parameter change"):
        mt.ShardedOptimizer(_model(0).parameters(), comm=mpicomp.Comm(comm),
                            gather_deltas=True)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("param_codec", ["none", "bitplane", "deltas"])
def test_parameters_gathered_during_forward_are_the_bits_of_a_blocking_gather(comm,
                                                                              param_codec):
    """gather_during_forward: step() returns with the allgathers in flight (several
    buckets, cut through tensors), forward waits for each; a layer forward skips is
    gathered by the next step or a checkpoint. Every step's parameters are the bits of the
    same run gathered in step(), on every rank alike."""
    r = comm.Get_rank()
    params = {"codec": "bitplane", "rate": 8.25, "threshold": 0} \
        if param_codec != "none" else None
    runs = []
    for overlap in (False, True):
        dp = mpicomp.Comm(comm)
        model = _Skipping()
        opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=dp,
                                  lr=0.01, codec="bitplane", rate=4.25, threshold=0,
                                  param_settings=params, gather_deltas=param_codec == "deltas",
                                  bucket_mib=1e-4)
        assert len(opt.buckets) > 3
        if overlap:
            opt.gather_during_forward(model)
        seen = []
        for step in range(6):
            model.use_middle = step % 3 != 1  # (step 1 and 4 leave b's buckets in flight)
            x, t = _data(r, step)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), t).backward()
            opt.step()
            if overlap and step == 0:  # in flight until forward (or a checkpoint) waits
                everyone = set(range(len(opt.buckets)))
                assert set(opt._gathers) == everyone
                of_a = {piece.bucket for q in model.a.parameters()
                        for piece in opt.layout.pieces[id(q)]}
                model.a(x)  # waits for a's buckets, and only for them
                assert set(opt._gathers) == everyone - of_a
            state = opt.state_dict()  # (waits for every bucket)
            seen.append(state["params"].numpy().tobytes())
        if overlap:
            with pytest.raises(ValueError, match="already called"):
                opt.gather_during_forward(model)
            opt.remove_hooks()  # step() gathers by itself again
            x, t = _data(r, 6)
            torch.nn.functional.mse_loss(model(x), t).backward()
            opt.step()
            assert not opt._gathers
        assert len(set(comm.allgather(seen[-1]))) == 1
        runs.append(seen)
    assert runs[0] == runs[1]


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
@pytest.mark.parametrize("feedback", ["none", "loco", "loco+deltas"])
def test_a_run_saved_and_resumed_gives_the_bits_of_an_uninterrupted_one(comm, feedback):
    """state_dict() mid-way (each rank its own), a new model and optimizer (other initial
    weights) loading it: the parameters after the remaining steps are bitwise those of the
    uninterrupted run, compressed gradients and error feedback (residuals, LoCo's reset
    count: reset_every 2) included, and compressed parameter changes (gather_deltas: the
    master values and the replicas' values both carried over)."""
    import copy

    deltas = feedback.endswith("+deltas")
    feedback = feedback.removesuffix("+deltas")
    settings = {"codec": "bitplane", "rate": 4.25, "threshold": 0, "error_feedback": feedback,
                "reset_every": 2, "bucket_mib": 1e-4, "lr": 1e-2}
    if deltas:
        settings.update(param_settings={"codec": "bitplane", "rate": 4.25, "threshold": 0},
                        gather_deltas=True)
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
    with pytest.raises(ValueError, match="param_settings compress float32 parameters"):
        mt.ShardedOptimizer(_model(0).to(torch.bfloat16).parameters(), comm=comm,
                            param_settings={"codec": "bitplane", "rate": 8.25})
    assert opt.master_values().dtype == torch.float32 and not opt.aliased
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
    flat = opt.flat.float()
    mine = opt.master_values()[torch.from_numpy(where_master)]
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
    named_parameters()."""
    settings = {"bucket_mib": 1e-4, "lr": 1e-2}
    named = _steps(*_fresh(0, comm, settings), comm, 0, 2)
    model = _model(0)
    opt = mt.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm=comm, **settings)
    assert _steps(model, opt, comm, 0, 2) == named


def _groups(model):
    """Two param groups: the weights (lr 0.02, weight decay 0.1) and the biases (lr 0.005,
    no decay), as transformer recipes split them."""
    weights = [w for n, w in model.named_parameters() if n.endswith("weight")]
    biases = [w for n, w in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights, "lr": 0.02, "weight_decay": 0.1},
            {"params": biases, "lr": 0.005, "weight_decay": 0.0}]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_mib", [25.0, 1e-4])
def test_param_groups_follow_adamw_with_the_same_groups(comm, bucket_mib):
    """Param-group dicts with their own lr and weight decay: codec none follows AdamW on
    the unsharded model with the same groups; an lr changed in ``param_groups`` (a
    scheduler's) takes effect."""
    p, r = comm.Get_size(), comm.Get_rank()
    model = _model(0)
    opt = mt.ShardedOptimizer(_groups(model), torch.optim.AdamW,
                              comm=mpicomp.Comm(comm, codec="none"), bucket_mib=bucket_mib)
    assert [g["lr"] for g in opt.param_groups] == [0.02, 0.005]
    ref = _model(0)
    ref_opt = torch.optim.AdamW(_groups(ref))
    for step in range(4):
        if step == 2:
            for g, h in zip(opt.param_groups, ref_opt.param_groups, strict=True):
                g["lr"] = h["lr"] = g["lr"] / 2
        x, t = _data(r, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()
        _reference_step(ref, ref_opt, p, step)  # AdamW on every rank's gradient, averaged
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.mpi(min_size=2)
def test_bad_param_groups_raise_a_type_error_naming_them(comm):
    model = _model(0)
    with pytest.raises(TypeError, match="mixed with parameters"):
        mt.ShardedOptimizer([{"params": [model[0].weight]}, model[0].bias], comm=comm)
    with pytest.raises(TypeError, match="param group 1 has no 'params'"):
        mt.ShardedOptimizer([{"params": [model[0].weight]}, {"lr": 1}], comm=comm)
    with pytest.raises(ValueError, match="a parameter is given twice"):
        mt.ShardedOptimizer([{"params": [model[0].weight]}, {"params": [model[0].weight]}],
                            comm=comm)
    with pytest.raises(TypeError, match="parameters of one dtype"):
        mixed = _model(0)
        mixed[2].to(torch.bfloat16)
        mt.ShardedOptimizer(mixed.parameters(), comm=comm)
    # a device the optimizer cannot work on in place: refused on every rank, naming it
    meta = torch.nn.Linear(3, 2, device="meta")
    with pytest.raises(TypeError, match="tensors on the CPU or a CUDA device, got meta"):
        mt.ShardedOptimizer(meta.parameters(), comm=comm)


def _wide(seed: int):
    """32 layers of 64 x 64 (133 K values, 4 K a layer): buckets of 2 K values and a layer's
    gradient are a few percent of the model."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(32)])


@pytest.mark.mpi(min_size=2)
def test_gradients_reduce_during_backward_and_memory_is_zero2s(comm):
    """Backward itself reduce-scatters every bucket and frees the parameters' gradients;
    the most this rank held for parameters, gradients (shard, buckets in flight, .grad not
    yet freed) and Adam's state is (1 + 3/p)/4 of replicated Adam's (parameters, gradients,
    two moments), plus the buckets: at most half of it on 4 ranks."""
    p, r = comm.Get_size(), comm.Get_rank()
    dp = mpicomp.Comm(comm, codec="none")
    model = _wide(0)
    opt = mt.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm=dp, lr=1e-3,
                              bucket_mib=1 / 128)
    values = sum(w.numel() for w in model.parameters())
    assert len(opt.buckets) >= 16
    peak = 0
    for step in range(3):
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 * step + r))
        opt.zero_grad()
        model(x).square().mean().backward()
        assert all(w.grad is None for w in model.parameters())  # freed as reduced
        assert dp.stats()["Ireduce_scatter_block"]["calls"] == len(opt.buckets) * (step + 1)
        opt.step()
        peak = max(peak, sum(opt.memory().values()))
    replicated = 4 * values * 4  # parameters, gradients, Adam's two moments: float32
    bucket, layer = (1 << 20) // 128, 4 * 64 * 65  # bytes
    # the buckets in flight with the parts they receive, the buckets a layer's gradient
    # fills, that gradient, Adam's step count of each bucket
    extra = 2 * (1 + 1 / p) * bucket + (layer / bucket + 1) * bucket + layer + 4 * len(
        opt.buckets)
    assert peak <= (1 + 3 / p) / 4 * replicated + extra, (peak, replicated)
    if comm.Get_rank() == 0:  # (docs/training.md quotes it: pytest -s)
        print(f"\nZeRO-2 peak on {p} ranks: {peak:,} bytes, {peak / replicated:.3f} of "
              f"replicated Adam's {replicated:,}")
    if p == 4:
        assert peak <= 0.5 * replicated, (peak / replicated)


def _shard_average(comm, feedback: str, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Every step the same gradients (set by hand, SGD with lr 0, no zero_grad: the shard
    accumulates what each step reduced): (the shard's average over the steps, the exact
    average over the ranks) at this rank's positions."""
    p, r = comm.Get_size(), comm.Get_rank()
    model = _wide(0)
    opt = mt.ShardedOptimizer(model.parameters(), torch.optim.SGD, comm=mpicomp.Comm(comm),
                              lr=0.0, codec="bitplane", rate=4.25, threshold=0,
                              error_feedback=feedback, bucket_mib=1 / 16)
    opt.remove_hooks()
    grads = [torch.from_numpy(gradient_like(w.numel(), np.float32, seed=7 * r + i))
             .reshape(w.shape) for i, w in enumerate(model.parameters())]
    for _ in range(steps):
        for w, g in zip(model.parameters(), grads, strict=True):
            w.grad = g.clone()
        opt.step()
    mine = np.zeros(opt.layout.numel, np.float32)
    for _, _, w, at in opt.layout.placed:
        mine[at:at + w.numel()] = w.grad.reshape(-1).numpy()
    exact = sum(v.astype(np.float64) for v in comm.allgather(mine)) / p
    in_flat, in_shard = opt.owned()
    return opt.grads.shard.numpy().astype(np.float64)[in_shard] / steps, exact[in_flat]


@pytest.mark.mpi(min_size=2)
def test_error_feedback_gives_back_what_the_reduce_scatter_lost(comm):
    """The same gradients every step, bitplane 4.25, the direct reduce-scatter: with classic
    error feedback the sum of the reduced shards over T steps is T times the exact average
    less the last residuals (what every rank's contribution lost is carried into the next
    step: nothing is lost for good), so the average's error falls as 1/T; without it, it
    stays one step's error."""
    steps = 20
    got, exact = _shard_average(comm, "none", steps)
    plain_err = float(np.abs(got - exact).max())
    got, exact = _shard_average(comm, "classic", steps)
    err = float(np.abs(got - exact).max())
    c, a = bounds.codec_constants(get_codec({"id": "bitplane", "rate": 4.25}),
                                  np.dtype(np.float32))
    biggest = comm.allreduce(float(np.abs(exact).max()) * comm.Get_size(), op=MPI.MAX)
    one_step = c * 2 * biggest + a  # (a residual: one encode of a gradient and a residual)
    assert err <= 2 * one_step / steps
    assert err < plain_err / 4, (err, plain_err)


@pytest.mark.mpi(min_size=4)
@pytest.mark.parametrize("split", ["tensor", "pipeline"])
def test_clip_grad_norm_spans_tensor_and_pipeline_groups(comm, split):
    """4 ranks, 2 data-parallel x 2 model-parallel: the model's gradients split between the
    model-parallel pair (pipeline: one layer each; tensor: the first weight's rows split,
    marked ``tensor_model_parallel``, the rest a copy on both): clip_grad_norm_ returns the
    whole model's norm of the data-parallel average (each copy counted once)."""
    if comm.Get_size() != 4:
        pytest.skip("2 x 2 ranks")
    r = comm.Get_rank()
    dp = mpicomp.Comm(comm.Split(r % 2, r), codec="none")
    mp = mpicomp.Comm(comm.Split(r // 2, r))
    whole = _model(0)
    x, t = _data(dp.Get_rank(), 0)
    torch.nn.functional.mse_loss(whole(x), t).backward()
    full = {n: w.grad.clone() for n, w in whole.named_parameters()}
    avg = {n: sum(dp.allgather(g)) / 2 for n, g in full.items()}
    want = torch.sqrt(sum((g.double() ** 2).sum() for g in avg.values()))
    m = mp.Get_rank()
    if split == "pipeline":
        held = {n: torch.nn.Parameter(w.detach().clone()) for n, w in whole.named_parameters()
                if n.startswith("0." if m == 0 else "2.")}
        grads = {n: full[n] for n in held}
        kw = {"pipeline_parallel": mp}
    else:
        rows = slice(0, 4) if m == 0 else slice(4, 7)
        held = {n: torch.nn.Parameter(w.detach().clone()) for n, w in whole.named_parameters()
                if n != "0.weight"}
        held["0.weight"] = torch.nn.Parameter(whole[0].weight.detach()[rows].clone())
        held["0.weight"].tensor_model_parallel = True
        grads = {**full, "0.weight": full["0.weight"][rows]}
        kw = {"tensor_parallel": mp}
    opt = mt.ShardedOptimizer(list(held.items()), torch.optim.SGD, comm=dp, lr=0.1,
                              bucket_mib=1e-4, **kw)
    opt.remove_hooks()
    for n, w in held.items():
        w.grad = grads[n].clone()
    norm = opt.clip_grad_norm_(0.01)
    torch.testing.assert_close(norm.double(), want, rtol=1e-5, atol=0)
