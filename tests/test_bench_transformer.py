"""The transformer study (mpicomp.bench.transformer) on 4 ranks, a tiny model, a few steps:
every layout computes the same model, compression sends fewer bytes, replicas stay
identical (skipped without torch; runs in the 4-rank stage)."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import mpicomp  # noqa: E402
from mpicomp.bench import stdlib_text, transformer  # noqa: E402
from mpicomp.bench.step_clock import StepClock  # noqa: E402

pytestmark = pytest.mark.slow  # left out of make test-quick


def _args(**over) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    transformer.add_arguments(p)
    args = p.parse_args(["--steps", "4", "--skip", "1", "--eval-every", "2", "--d", "32",
                         "--layers", "2", "--context", "16", "--global-batch", "16",
                         "--eval-seqs", "16", "--micro-batches", "2", "--val-kib", "4"])
    for k, v in over.items():
        setattr(args, k, v)
    return args


@pytest.mark.mpi(min_size=4)
def test_every_layout_trains_the_same_model_and_compression_sends_less(comm, tmp_path_factory):
    if comm.Get_size() != 4:
        pytest.skip("the study runs on 4 ranks")
    world = mpicomp.Comm(comm)
    args = _args()
    train, val, _ = stdlib_text.corpus(1 << 18, 1 << 14)
    data = {"train": train, "val": val}
    clock = StepClock()
    runs = [(layout, policy) for layout in transformer.LAYOUTS
            for policy in transformer.POLICIES if transformer.runs_in(layout, policy)]
    records = [transformer.run(world, layout, policy, args, data, clock)
               for layout, policy in runs]
    # a second seed of dp4's baselines: the table's means and spreads
    records += [transformer.run(world, "dp4", policy, _args(seed=1), data, clock)
                for policy in transformer.BASELINES if transformer.runs_in("dp4", policy)]
    assert {r["val_bytes"] for r in records} == {4096 // 17 // 16 * 16 * 17}
    assert all(r["identical"] for r in records)
    plain = [r for r in records if r["policy"] == "plain" and r["seed"] == 0]
    # the split models compute the unsplit one's losses (float32 sums in another order)
    want = plain[0]["val_curve"]
    for r in plain[1:]:
        got = r["val_curve"]
        assert [s for s, _ in got] == [s for s, _ in want]
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=2e-4)
    by = {(r["layout"], r["policy"]): r for r in records if r["seed"] == 0}
    for layout, (dp, tp, pp, _) in transformer.LAYOUTS.items():
        for policy in ("bf16", "bf16-net", "naive", "hybrid"):
            if (layout, policy) not in by:
                continue
            w = by[layout, policy]["wire_mib_per_step"]
            w0 = by[layout, "plain"]["wire_mib_per_step"]
            for group, size in (("dp", dp), ("tp", tp), ("pp", pp)):
                if size > 1 and group == "tp" and policy in ("bf16-net", "hybrid"):
                    # (one host here: the pair's traffic plain, through shared memory)
                    assert by[layout, policy]["local_tp"] and w[group] == w0[group]
                elif size > 1:  # (bf16's recursive doubling hands MPI half the bytes twice)
                    cast = policy.startswith("bf16")
                    less = w[group] <= w0[group] if cast else w[group] < w0[group]
                    assert 0 < w[group] and less, (layout, policy, group, w, w0)
        for r in (by[run] for run in runs if run[0] == layout):
            assert r["step_s"] > 0 and r["compute_s"] > 0 and r["comm_s"] >= 0
            # a rank's CPU time a step, all its threads: work was done, and no more of it
            # than its threads could do in the step's wall time (main, worker, progress,
            # Numba's and PyTorch's threads at most)
            assert 0 < r["cpu_s"] < 8 * r["step_s"], r
            assert np.isfinite(r["final_val_loss"]) and np.isfinite(r["final_train_loss"])
    if comm.Get_rank() == 0:
        out = tmp_path_factory.mktemp("study")
        (out / "r.json").write_text(json.dumps(records))
        text = transformer.table(records, ["test"])
        rows = transformer.summary(records)
        assert len(rows) == len(runs)
        assert text.count("| yes |") == len(rows)
        assert "CPU ms" in text and all(row["cpu"] > 0 for row in rows)
        # records from before the column: the row says "-", not a number
        old = [{k: v for k, v in r.items() if k != "cpu_s"} for r in records]
        assert all(row["cpu"] is None for row in transformer.summary(old))
        for row in rows:  # each against the faster baseline of its layout
            assert row["best"] in transformer.BASELINES
            if row["policy"] == row["best"]:
                assert row["vs_best"] == pytest.approx(1.0)
            assert row["seeds"] == (2 if row["layout"] == "dp4" and row["policy"] in
                                    transformer.BASELINES else 1), row
        dp4 = next(r for r in rows if r["layout"] == "dp4" and r["policy"] == "plain")
        assert dp4["val_gap"] == 0.0 and dp4["gap_spread"] == 0.0
        for png in transformer.plot(records, str(out / "study")):
            assert (out / png).stat().st_size > 1000


def test_policies_name_their_settings():
    assert transformer.policy_settings("plain")["grad"] == {"codec": "none"}
    bf16 = transformer.policy_settings("bf16")
    assert all(bf16[k]["codec"] == {"id": "cast", "dtype": "bfloat16"}
               for k in ("tp", "pp", "grad", "params"))
    hybrid = transformer.policy_settings("hybrid")
    assert hybrid["feedback"] == "loco" and hybrid["grad"]["rate"] == 4.25
    assert hybrid["tp"]["rate"] == hybrid["pp"]["rate"] == 16.25
    assert hybrid["params"]["rate"] == 3.25 and hybrid["param_deltas"]  # (each step's change)
    assert not any(transformer.policy_settings(p)["param_deltas"]
                   for p in ("plain", "bf16", "naive"))
    # each policy's faster bucket size: native MPI in small buckets, mpicomp's calls in one
    assert transformer.policy_settings("plain")["bucket_mib"] == transformer.SMALL_BUCKETS
    assert all(transformer.policy_settings(p)["bucket_mib"] == transformer.BIG_BUCKETS
               for p in ("bf16", "naive", "hybrid"))
    # shared memory: the tensor-parallel pair's traffic plain where it shares a host
    assert transformer.policy_settings("hybrid", local_tp=True)["tp"] == transformer.PLAIN
    assert transformer.policy_settings("bf16-net", local_tp=True)["tp"] == transformer.PLAIN
    assert transformer.policy_settings("bf16-net") == bf16
    assert transformer.policy_settings("bf16", local_tp=True) == bf16
    # a data-parallel average over fewer ranks: more bits for the gradients
    assert transformer.policy_settings("hybrid", dp=2)["grad"]["rate"] == 6.25
    assert set(transformer.TP_ONLY) <= set(transformer.BASELINES)
    assert transformer.runs_in("dp2xtp2", "bf16-net") and not transformer.runs_in("dp4",
                                                                                  "bf16-net")
    with pytest.raises(ValueError, match="policy must be one of"):
        transformer.policy_settings("gentle")


@pytest.mark.parametrize(("argv", "says"), [
    (["--eval-every", "0"], "--eval-every must be >= 1, got 0"),
    (["--seeds", "0"], "--seeds must be >= 1, got 0"),
    (["--steps", "5", "--skip", "5"], r"--skip must be in \[0, --steps\)"),
    (["--layouts", "dp3"], "unknown layout 'dp3'"),
    pytest.param(["--device", "cuda"], "--device cuda: this PyTorch .* sees no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")),
])
def test_bad_arguments_name_the_constraint(argv, says):
    """Bad options stop the study before any rank trains, naming the option and value."""
    parser = argparse.ArgumentParser()
    transformer.add_arguments(parser)
    with pytest.raises(SystemExit, match=says):
        transformer.main(parser.parse_args(argv), argv)


@pytest.mark.mpi(min_size=4)
@pytest.mark.device
def test_study_on_cuda_matches_the_cpu(comm):
    """``--device cuda`` (where a GPU is): the data-parallel layouts train on CUDA tensors,
    plain and compressed, the replicas identical, plain's losses those of the CPU run
    (float32 on two devices: 1e-3)."""
    if comm.Get_size() != 4:
        pytest.skip("the study runs on 4 ranks")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU for PyTorch")
    world = mpicomp.Comm(comm)
    train, val, _ = stdlib_text.corpus(1 << 18, 1 << 14)
    data = {"train": train, "val": val}
    clock = StepClock()
    for layout in ("dp4", "dp4-sharded"):
        cpu = transformer.run(world, layout, "plain", _args(), data, clock)
        for policy in ("plain", "hybrid"):
            r = transformer.run(world, layout, policy, _args(device="cuda"), data, clock)
            assert r["identical"] and r["device"] == "cuda", (layout, policy)
            assert np.isfinite(r["final_val_loss"])
            if policy == "plain":
                np.testing.assert_allclose([v for _, v in r["val_curve"]],
                                           [v for _, v in cpu["val_curve"]], rtol=1e-3)
