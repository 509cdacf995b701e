"""``python -m mpicomp.bench first-call``: a new job per codec, its first compressed Allreduce."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # left out of make test-quick

TIMEOUT_S = 300


def test_first_call_benchmark_prints_a_row_per_codec(comm, tmp_path):
    if comm.Get_size() > 1:
        pytest.skip("starts jobs of its own")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MPICOMP_", "PMI_", "MPI_", "HYDRA_"))}
    env["MPIEXEC_TIMEOUT"] = str(TIMEOUT_S)
    proc = subprocess.run([sys.executable, "-m", "mpicomp.bench", "first-call", "--codecs",
                           "cast:bfloat16,bitplane:8.25"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert [r[0] for r in rows] == ["cast:bfloat16", "bitplane:8.25"], proc.stdout
    for r in rows:  # float32 and float64: first and second call, seconds
        assert len(r) == 5 and all(float(t) > 0 for t in r[1:]), proc.stdout
    # the summary names the slowest first call of the table, and judges it by the target
    summary = [line for line in proc.stdout.splitlines()
               if line.startswith("# slowest first call ")]
    assert len(summary) == 1, proc.stdout
    worst = float(summary[0].split()[4])
    assert worst == pytest.approx(max(float(r[i]) for r in rows for i in (1, 3)), abs=1e-3)
    target = float(proc.stdout.split("target <= ")[1].split()[0])
    assert summary[0].endswith("target met" if worst <= target else "target MISSED"), summary
