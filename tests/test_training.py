"""Gradient reduction with error feedback and layer rules (mpicomp.training)."""
from __future__ import annotations

import numpy as np
import pytest
from launcher import find_mpiexec  # tests/launcher.py
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.algorithms.common import split
from mpicomp.backend.host import HOST
from mpicomp.codecs import get_codec
from mpicomp.training import ErrorFeedback, GradientReducer, settings_for
from mpicomp.training import buckets as bucketing
from mpicomp.training.rules import check_rules


def grads_of(r: int, step: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * r + step)
    return {
        "layer1.weight": rng.standard_normal((64, 48)).astype(np.float32),
        "layer1.bias": rng.standard_normal(64).astype(np.float32),
        "norm.weight": rng.standard_normal(64).astype(np.float32),
        "layer2.weight": rng.standard_normal((10, 64)).astype(np.float32),
        "layer2.bias": rng.standard_normal(10).astype(np.float32),
    }


def test_rules_first_match_wins():
    rules = check_rules([("*.bias", {"codec": "none"}), ("*norm*", {"rate": 16.25}),
                         (lambda n, a: a.size < 100, {"codec": "cast"})])
    default = {"codec": "bitplane", "rate": 4.25}
    a = np.zeros(10)
    assert settings_for("layer2.bias", a, rules, default) == {"codec": "none", "rate": 4.25}
    assert settings_for("norm.weight", a, rules, default)["rate"] == 16.25
    assert settings_for("x.weight", a, rules, default)["codec"] == "cast"
    assert settings_for("x.weight", np.zeros(1000), rules, default) == default
    with pytest.raises(TypeError, match="rule 0"):
        check_rules([("*.bias",)])
    with pytest.raises(ValueError, match="unknown settings"):
        check_rules([("*", {"codek": "none"})])


def test_bucket_plan_is_order_independent():
    g = grads_of(0)
    s = {n: {} for n in g}
    a = bucketing.plan(g, s, 8 << 10)
    b = bucketing.plan(dict(reversed(list(g.items()))), s, 8 << 10)
    assert [x.names for x in a] == [x.names for x in b]
    assert all(x.size * 4 <= max(8 << 10, max(g[n].nbytes for n in x.names)) for x in a)
    assert sorted(n for x in a for n in x.names) == sorted(g)
    assert bucketing.fingerprint(g, s) == bucketing.fingerprint(dict(reversed(list(g.items()))), s)


def test_loco_residual_resets():
    fb = ErrorFeedback("loco", beta=0.5, reset_every=2)
    for step in range(4):
        x = fb.compensate("k", np.ones(4))
        if step % 2 == 0:
            assert np.array_equal(x, np.ones(4)), step  # reset at steps 0 and 2
        else:
            assert np.allclose(x, 1.5), (step, x)       # 1 + (1 - 0.5) * e with e = 1
        fb.update("k", x, np.zeros(4) if step % 2 == 0 else x)
        fb.end_step()
    with pytest.raises(ValueError, match="error_feedback"):
        ErrorFeedback("sometimes")


@pytest.mark.mpi
@pytest.mark.parametrize("feedback", ["none", "classic", "loco"])
def test_reducer_averages_within_bound_identically(comm, feedback):
    p, r = comm.Get_size(), comm.Get_rank()
    red = GradientReducer(comm, codec="bitplane", rate=8.25, threshold=0, bucket_mib=0.01,
                          error_feedback=feedback, rules=[("*.bias", {"codec": "none"})])
    g = grads_of(r)
    exact = {n: comm.allreduce(a.astype(np.float64)) / p for n, a in g.items()}
    red.reduce(g)
    c, a = bounds.codec_constants(get_codec("bitplane", rate=8.25), np.dtype(np.float32))
    for name, v in g.items():
        if name.endswith(".bias"):  # the rule: plain MPI, exact up to float32 rounding
            assert np.allclose(v, exact[name], rtol=1e-6, atol=1e-6), name
        else:
            gsum = sum(comm.allgather(float(np.abs(grads_of(r)[name]).max())))
            limit = max(bounds.allreduce_bound(alg, p, c, a, gsum, np.dtype(np.float32))
                        for alg in ("ring", "recursive_doubling", "allgather")) / p
            assert np.abs(v - exact[name]).max() <= max(limit, 1e-6) * 1.01, name
        every = comm.allgather(v.tobytes())
        assert all(e == every[0] for e in every), f"{name}: not the same bits on every rank"
    assert len(red.describe()) >= 3


@pytest.mark.mpi
def test_error_feedback_removes_the_bias_over_steps(comm):
    """A constant gradient each step: without feedback the compressed mean keeps its error;
    with classic feedback (and LoCo) the mean over steps approaches the exact mean. With the
    allgather algorithm each rank's input is quantized once, which is exactly the error the
    feedback sees; the ring also re-quantizes partial sums, which it does not."""
    p, r = comm.Get_size(), comm.Get_rank()
    if p == 1:
        pytest.skip("one rank sends nothing compressed")
    base = np.random.default_rng(r).standard_normal(4096).astype(np.float32)
    exact = comm.allreduce(base.astype(np.float64)) / p
    errors = {}
    for mode, algorithm in [(m, a) for a in ("allgather", "ring", "direct")
                            for m in ("none", "classic", "loco")]:
        red = GradientReducer(comm, codec="bitplane", rate=2.25, threshold=0,
                              algorithm=algorithm, error_feedback=mode, beta=0.5,
                              reset_every=1000)
        total = np.zeros(4096)
        steps = 40
        for _ in range(steps):
            g = {"w": base.copy()}
            red.reduce(g)
            total += g["w"]
        errors[mode, algorithm] = float(np.abs(total / steps - exact).mean())
    none = errors["none", "allgather"]
    assert errors["classic", "allgather"] < 0.25 * none, errors
    assert errors["loco", "allgather"] < 0.5 * none, errors
    assert errors["classic", "ring"] < 0.8 * errors["none", "ring"], errors
    # direct: each input quantized once (fed back), then the chunk's sum (not)
    assert errors["classic", "direct"] < 0.8 * errors["none", "direct"], errors


@pytest.mark.mpi
def test_direct_allreduce_feeds_back_only_the_chunks_a_rank_sent(comm):
    """``algorithm="direct"`` adds a rank's own chunk exact: its classic residual is zero
    there, and ``x - C(x)`` on every chunk it sent."""
    p, r = comm.Get_size(), comm.Get_rank()
    if p == 1:
        pytest.skip("one rank sends nothing compressed")
    n = 5000
    red = GradientReducer(comm, codec="bitplane", rate=2.25, threshold=0, algorithm="direct",
                          error_feedback="classic")
    x = np.random.default_rng(r).standard_normal(n).astype(np.float32)
    red.reduce({"w": x.copy()})
    (key,) = red.feedback._state
    residual = np.asarray(red.feedback._load(key, HOST), np.float32)
    codec = get_codec("bitplane", rate=2.25)
    expected = x - codec.decode(codec.encode(x), out=np.empty_like(x))
    counts, displs = split(n, p)
    own = slice(displs[r], displs[r] + counts[r])
    expected[own] = 0
    assert red.comm.stats()["Iallreduce"]["algorithms"] == {"direct": 1}
    assert not np.any(residual[own]), "the own chunk crossed no wire: nothing to feed back"
    np.testing.assert_allclose(residual, expected, rtol=0, atol=1e-6)


@pytest.mark.mpi
def test_layout_disagreement_is_an_error_on_every_rank(comm):
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks")
    red = GradientReducer(comm, codec="bitplane", rate=8.25)
    g = grads_of(0)
    if comm.Get_rank() == 1:
        del g["layer2.bias"]
    with pytest.raises(ValueError, match="different gradient names"):
        red.reduce(g)
    comm.Barrier()


def test_bad_inputs():
    red = GradientReducer(MPI.COMM_SELF, codec="bitplane", rate=8.25)
    with pytest.raises(TypeError, match="float array"):
        red.reduce({"i": np.zeros(4, np.int32)})
    with pytest.raises(TypeError, match="NumPy arrays"):
        red.reduce({"l": [1.0, 2.0]})
    with pytest.raises(ValueError, match="bucket_mib"):
        GradientReducer(MPI.COMM_SELF, bucket_mib=0)
    assert isinstance(red.comm, mpicomp.Comm)


@pytest.mark.mpi
def test_parallel_groups_megatron_layout_and_policies(comm):
    from mpicomp.training import parallel_groups

    p, r = comm.Get_size(), comm.Get_rank()
    layouts = [(p, 1, 1), (1, p, 1), (1, 1, p)] + ([(2, 2, p // 4)] if p % 4 == 0 else []) + (
        [(2, 1, p // 2), (1, 2, p // 2)] if p % 2 == 0 else [])
    for dp, tp, pp in layouts:
        g = parallel_groups(comm, dp=dp, tp=tp, pp=pp, policies={"pp": {"codec": "none"}})
        try:
            assert (g.dp.Get_size(), g.tp.Get_size(), g.pp.Get_size()) == (dp, tp, pp)
            assert r == g.pp_rank * dp * tp + g.dp_rank * tp + g.tp_rank
            assert (g.dp.Get_rank(), g.tp.Get_rank(), g.pp.Get_rank()) == (
                g.dp_rank, g.tp_rank, g.pp_rank)
            # members: the dp group holds the ranks with this rank's tp and pp coordinates
            dp_members = g.dp.allgather(r)
            assert dp_members == [g.pp_rank * dp * tp + d * tp + g.tp_rank for d in range(dp)]
            tp_members = g.tp.allgather(r)
            assert tp_members == [g.pp_rank * dp * tp + g.dp_rank * tp + t for t in range(tp)]
            assert g.dp.resolved_policy().rate == 4.25
            assert g.tp.resolved_policy().rate == 16.25
            assert g.pp.resolved_policy().codec.codec_id == "none"
            x = np.full(1 << 14, r, np.float32)
            y = np.empty_like(x)
            g.dp.Allreduce(x, y, threshold=0)
            assert np.allclose(y, sum(dp_members), rtol=0.2)
        finally:
            g.free()
    with pytest.raises(ValueError, match="dp \\* tp \\* pp"):
        parallel_groups(comm, dp=p + 1)
    with pytest.raises(ValueError, match="policies keys"):
        parallel_groups(comm, dp=p, policies={"ep": {}})


def test_train_study_runs(tmp_path):
    """``python -m mpicomp.bench train`` on 2 ranks, a few steps: records, identical parameters."""
    import json
    import subprocess
    import sys

    pytest.importorskip("sklearn")
    out = tmp_path / "train.json"
    mpiexec = find_mpiexec() or "mpiexec"
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "mpicomp.bench", "train",
                           "--steps", "6", "--eval-every", "3",
                           "--cases", "plain,bitplane:4.25+classic,zfp:8+loco",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    records = json.loads(out.read_text())
    assert [r["case"] for r in records] == ["plain", "bitplane:4.25+classic", "zfp:8+loco"]
    assert all(r["identical"] for r in records)
    assert records[1]["wire_bytes"] < 0.2 * records[0]["wire_bytes"]
    assert records[1]["residual_bytes"] > 0 and records[0]["residual_bytes"] == 0
    assert all(np.isfinite(r["final_loss"]) for r in records)
    assert "final loss" in proc.stdout
    for r in records:  # the soak's memory: settled (step 6 here: fewer than SETTLED) and end
        rss = r["memory"]["rss"]
        assert 0 < rss["settled"] <= 2 * rss["end"] and "device_pool" not in r["memory"]
    assert "rss " in proc.stdout


@pytest.mark.mpi
def test_request_says_whether_the_call_was_compressed(comm):
    """``Request.compressed`` after completion: True through a codec, False when the call
    went plain (below the threshold; a NaN on one rank, which every rank learns)."""
    if comm.Get_size() == 1:
        pytest.skip("one rank sends nothing compressed")
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25, threshold=0, algorithm="allgather")
    x = np.random.default_rng(comm.Get_rank()).standard_normal(1000).astype(np.float32)
    y = np.empty_like(x)
    req = mc.Iallreduce(x, y)
    req.Wait()
    assert req.compressed is True
    nan = x.copy()
    if comm.Get_rank() == 0:
        nan[10] = np.nan
    req = mc.Iallreduce(nan, y)
    req.Wait()
    assert getattr(req, "compressed", False) is False
    req = mc.Iallreduce(x, y, threshold=1 << 20)
    req.Wait()
    assert getattr(req, "compressed", False) is False


@pytest.mark.mpi
def test_plain_bucket_keeps_a_zero_residual_on_every_rank(comm):
    """A NaN on rank 0 sends the bucket plain on every rank: nothing was lost, so the
    classic residual is zero everywhere (also on the ranks whose own input was finite)."""
    if comm.Get_size() == 1:
        pytest.skip("one rank sends nothing compressed")
    red = GradientReducer(comm, codec="bitplane", rate=2.25, threshold=0,
                          error_feedback="classic")
    g = {"w": np.random.default_rng(comm.Get_rank()).standard_normal(500).astype(np.float32)}
    red.reduce(dict(g))
    assert any(np.any(red.feedback._load(k, HOST)) for k in red.feedback._state)
    if comm.Get_rank() == 0:
        g["w"][3] = np.nan
    red.reduce(g)
    assert all(not np.any(red.feedback._load(k, HOST)) for k in red.feedback._state)


def _feedback_steps(fb, codec, xs, made_ahead, pieces=None, plain_at=()):
    """The residuals ``fb`` keeps over the inputs ``xs`` (one bucket, a step each): made by
    ``ahead`` and ``settle`` (``made_ahead``; the steps ``plain_at`` settled as a call that
    went plain), or after the call by ``update`` with the stream's round trip."""
    kept = []
    for step, g in enumerate(xs):
        x = fb.compensate("k", g.copy())
        if made_ahead:
            fb.ahead("k", x, codec, HOST, pieces)
            fb.settle("k", HOST, x if step in plain_at else None)
        elif step in plain_at:
            fb.update("k", x, x)
        elif pieces is None:
            fb.update("k", x, HOST.roundtrip(codec, x))
        else:
            rt = x.copy()
            for piece in pieces:
                rt[piece] = HOST.roundtrip(codec, x[piece])
            fb.update("k", x, rt)
        fb.end_step()
        kept.append(fb._load("k", HOST).copy())
    return kept


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["classic", "loco"])
@pytest.mark.parametrize("codec", [{"id": "bitplane", "rate": 4.25},
                                   {"id": "bitplane", "rate": 8.25, "block_size": 64},
                                   {"id": "zfp", "rate": 8}, {"id": "cast"}, {"id": "none"}])
def test_residuals_made_while_the_call_is_in_flight_are_those_made_after_it(dtype, mode, codec):
    """ErrorFeedback.ahead (bitplane: one fused pass, C(x) never coded; other codecs: the
    stream's round trip into a buffer of its own) and settle keep bit for bit the residuals
    of update after the call: with a short last block, a call settled as plain, steps whose
    input holds NaN or Inf (the codec refuses it: that step keeps only the decayed
    residual), and pieces coded as streams of their own (the sharded optimizer's direct
    reduce-scatter)."""
    codec = get_codec(codec)
    rng = np.random.default_rng(7)
    n = 4093  # (not a whole number of blocks)
    xs = [(rng.standard_normal(n) * 10.0 ** rng.integers(-6, 3, n)).astype(dtype)
          for _ in range(6)]
    xs[3][100] = np.nan
    xs[4][n - 1] = -np.inf
    plain = (2,)
    for pieces in (None, [slice(0, 2048)], [slice(0, 1344), slice(2720, n)]):
        want = _feedback_steps(ErrorFeedback(mode), codec, xs, False, pieces, plain)
        got = _feedback_steps(ErrorFeedback(mode), codec, xs, True, pieces, plain)
        for step, (w, g) in enumerate(zip(want, got, strict=True)):
            assert g.dtype == dtype and np.array_equal(w.view(np.uint8), g.view(np.uint8)), \
                (pieces, step, np.flatnonzero(w.view(np.uint8) != g.view(np.uint8))[:5])
        assert np.all(np.isfinite(got[-1]))
        assert np.any(got[-1]) == (codec.codec_id != "none")  # (codec none loses nothing)


def test_fused_bitplane_residual_is_the_streams_round_trip():
    """The bitplane codec's fused residual (kernels/feedback_cpu.bitplane_residual) against
    the residual of its decoded stream, float32 and float64, every rate's plane count,
    subnormals and values near the largest: bit for bit, and NaN/Inf blocks counted."""
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        info = np.finfo(dtype)
        x = (rng.standard_normal(3000) * 10.0 ** rng.integers(-3, 3, 3000)).astype(dtype)
        x[:40] = info.tiny * rng.standard_normal(40)  # (subnormals and the smallest normals)
        x[40:72] = info.max * rng.uniform(-1, 1, 32)
        prev = rng.standard_normal(x.size).astype(dtype)
        for rate in (3.25, 4.25, 8.25, 16.25, 24.25 if dtype == np.float32 else 40.25):
            codec = get_codec("bitplane", rate=rate)
            out = np.empty_like(x)
            assert codec.residual_into(x, prev, 0.5, 0.5, float(info.max), out) == 0
            rt = HOST.roundtrip(codec, x)
            want = HOST.residual(x, rt, prev, 0.5, 0.5, float(info.max))
            assert np.array_equal(out.view(np.uint8), want.view(np.uint8)), (dtype, rate)
        y = x.copy()
        y[5], y[2999] = np.nan, np.inf
        assert get_codec("bitplane", rate=8.25).residual_into(y, None, 0.0, 1.0, 1.0,
                                                              np.empty_like(y)) == 2
    assert get_codec("zfp", rate=8).residual_into(x, None, 0.0, 1.0, 1.0, out) is None


@pytest.mark.parametrize("store", ["float16", "bfloat16"])
def test_two_byte_residuals_are_clipped_not_infinite(store):
    fb = ErrorFeedback("classic", residual_dtype=store)
    x = np.array([1e6, -3.4e38, 0.5, -3.0], np.float32) if store == "bfloat16" else \
        np.array([1e6, -1e5, 0.5, -3.0], np.float32)
    fb.update("k", x, np.zeros_like(x))
    kept = fb._load("k", HOST)
    assert np.all(np.isfinite(kept)) and fb.nbytes() == 8
    assert kept[2] == 0.5 and kept[3] == -3.0
    assert kept[1] == np.float32(-65504.0 if store == "float16" else -3.3895313892515355e38)
    with pytest.raises(ValueError, match="residual_dtype"):
        ErrorFeedback("classic", residual_dtype="int8")


@pytest.mark.mpi(min_size=4)
def test_a_bucket_label_keeps_unsplit_gradients_identical_across_tensor_parallel_ranks(comm):
    """4 ranks as 2 data-parallel groups x 2 tensor-parallel ranks: 'norm' has the same
    gradient on both tensor-parallel ranks, 'weight' differs. In one bucket a
    bitplane block straddles both, and the two groups' reduced 'norm' differ; with
    'norm' labelled into a bucket of its own they are the same bits."""
    if comm.Get_size() != 4:
        pytest.skip("2 x 2 ranks")
    r = comm.Get_rank()
    tp_rank, dp_rank = r % 2, r // 2
    dp = mpicomp.Comm(comm).Split(tp_rank, dp_rank)
    rng = np.random.default_rng(dp_rank)
    norm = rng.standard_normal(48).astype(np.float32)  # the same on both tp ranks
    weight = (np.random.default_rng(10 + r).standard_normal(1000) * (1 + 3 * tp_rank)
              ).astype(np.float32)  # another scale on each tp rank

    def reduced(rules) -> bytes:
        g = {"norm": norm.copy(), "weight": weight.copy()}
        GradientReducer(dp, codec="bitplane", rate=4.25, threshold=0, rules=rules).reduce(g)
        return g["norm"].tobytes()

    mixed = comm.allgather(reduced([]))
    labelled = comm.allgather(reduced([("norm", {"bucket": "unsplit"})]))
    assert mixed[0] != mixed[1] and mixed[2] != mixed[3]  # tp ranks 0 and 1 drifted apart
    assert len(set(labelled)) == 1
    with pytest.raises(TypeError, match="bucket must be a label"):
        GradientReducer(dp, rules=[("norm", {"bucket": 1})])
    dp.Free()
