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
    for r in rows:
        first, second = float(r[1]), float(r[2])
        assert first > 0 and second > 0, proc.stdout
    assert "# slowest first call" in proc.stdout, proc.stdout
