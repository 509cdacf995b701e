"""A rank that fails ends the whole job within seconds (no rank left waiting in a collective).

Each case is a small program run under ``mpiexec -n 2`` and ``-n 4`` with a
timeout: a hang would be killed by it and fail the test.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from launcher import find_mpiexec  # tests/launcher.py

MPIEXEC = find_mpiexec() or "mpiexec"
LIMIT_S = 120  # a hang is killed here; a job that aborts ends in seconds
BOUND_S = 45   # "within a bounded time": generous for a loaded 2-core machine

PRELUDE = """
import numpy as np
from mpi4py import MPI
import mpicomp
c = mpicomp.COMM_WORLD
x = np.ones(1 << 16, np.float32)
y = np.empty_like(x)
"""

CASES = {
    "before_collective": """
if c.rank == 1:
    raise RuntimeError("rank 1 fails before the collective")
c.Allreduce(x, y)
""",
    "inside_collective": """
bad = np.empty(10, np.float32) if c.rank == 1 else y   # rank 1 alone: ValueError inside
c.Allreduce(x, bad, codec="bitplane", rate=8.25, threshold=0)
""",
    "inside_nonblocking": """
rate = 16.25 if c.rank == 1 else 8.25          # the agreement step refuses on every rank
req = c.Iallreduce(x, y, codec="bitplane", rate=rate, threshold=0)
req.Wait()
""",
    "nonblocking_nobody_waits": """
rate = 16.25 if c.rank == 1 else 8.25
req = c.Iallreduce(x, y, codec="bitplane", rate=rate, threshold=0)
""",
}

EXPECT = {
    "before_collective": "RuntimeError: rank 1 fails before the collective",
    "inside_collective": "ValueError",
    "inside_nonblocking": "RankDisagreement",
    "nonblocking_nobody_waits": "a nonblocking operation failed and nothing waited for it",
}


pytestmark = pytest.mark.slow  # left out of make test-quick


def _run(tmp_path: Path, name: str, body: str, nprocs: int,
         env: dict[str, str] | None = None) -> tuple[int, str, float]:
    script = tmp_path / f"{name}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MPICOMP_")}
    full_env.update(env or {})
    started = time.perf_counter()
    try:
        proc = subprocess.run([MPIEXEC, "-n", str(nprocs), sys.executable, str(script)],
                              capture_output=True, text=True, timeout=LIMIT_S, env=full_env,
                              start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name} on {nprocs} ranks hung: killed after {LIMIT_S} s\n"
                    f"{(exc.stderr or b'')[-2000:]!r}")
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - started


@pytest.mark.parametrize("nprocs", [2, 4])
@pytest.mark.parametrize("case", list(CASES))
def test_a_failing_rank_ends_the_job(tmp_path, case, nprocs):
    rc, output, elapsed = _run(tmp_path, case, CASES[case], nprocs)
    assert rc != 0, output[-3000:]
    assert elapsed < BOUND_S, f"took {elapsed:.0f} s"
    assert EXPECT[case] in output, output[-3000:]
    assert "Traceback" in output or "nothing waited" in output
    assert "mpicomp: aborting the job" in output, output[-3000:]


def test_opt_out(tmp_path):
    """MPICOMP_ABORT_ON_ERROR=0: no hook; the failing rank exits alone (nobody waits here)."""
    body = """
if c.rank == 1:
    raise RuntimeError("rank 1 fails")
"""
    rc, output, _ = _run(tmp_path, "opt_out", body, 2, {"MPICOMP_ABORT_ON_ERROR": "0"})
    assert rc != 0 and "RuntimeError: rank 1 fails" in output
    assert "aborting the job" not in output


def test_one_rank_installs_nothing():
    from mpi4py import MPI

    from mpicomp import failfast

    if MPI.COMM_WORLD.Get_size() == 1:
        assert not failfast._installed
