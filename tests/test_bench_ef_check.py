"""The error-feedback check (mpicomp.bench.ef_check), 2 steps: every configuration trains
and is scored the same on every rank (skipped without torch)."""
from __future__ import annotations

import argparse
import json
import math

import pytest

torch = pytest.importorskip("torch")

from mpicomp.bench import ef_check  # noqa: E402


@pytest.mark.mpi(min_size=2)
def test_every_configuration_trains_and_scores_alike_on_every_rank(comm, tmp_path_factory):
    p = argparse.ArgumentParser()
    ef_check.add_arguments(p)
    path = comm.bcast(str(tmp_path_factory.mktemp("ef") / "ef.json"))
    args = p.parse_args(["--steps", "2", "--seeds", "1", "--rates", "4.25", "--json", path])
    assert ef_check.main(args, []) == 0
    comm.Barrier()
    results = json.load(open(path))["results"]["4.25"]
    assert list(results) == [c[0] for c in ef_check.CONFIGS]
    plain = results["plain"][0]
    assert math.isfinite(plain) and 4.0 < plain < 6.0  # (ln 256 = 5.55: barely trained)
    for label, (loss,) in results.items():
        assert abs(loss / plain - 1) < 0.05, label
