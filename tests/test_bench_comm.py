"""The MPI benchmarks run end to end: ``--quick`` under ``mpiexec -n 2``, each a subprocess.

Not marked ``mpi``: these tests start their own mpiexec, so they run only in
the serial stage of ``tests/run_tests.py``. Speed is not asserted.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launcher import find_mpiexec  # tests/launcher.py

pytestmark = pytest.mark.slow  # left out of make test-quick

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300


def _run_bench(*args: str) -> list[str]:
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter or on PATH")
    env = dict(os.environ, MPIEXEC_TIMEOUT=str(TIMEOUT_S), OMP_WAIT_POLICY="PASSIVE")
    for var in ("MPICOMP_TEST_REPORT", "MPICOMP_TEST_STAGE", "MPICOMP_DEBUG"):
        env.pop(var, None)
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "mpicomp.bench", *args, "--quick"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S + 30)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.splitlines()


def _rows(lines: list[str], heading: str) -> list[list[str]]:
    """The rows under each table heading line that starts with ``heading``."""
    rows, inside = [], False
    for line in lines:
        if line.startswith("#"):
            inside = False
        elif line.startswith(heading):
            inside = True
        elif inside and line.strip():
            rows.append(line.split())
    return rows


def test_allreduce_benchmark_quick():
    lines = _run_bench("allreduce")
    assert any(line.startswith("# command: mpiexec -n 2 ") for line in lines), lines
    rows = _rows(lines, "case ")
    cases = {(r[0], r[1]) for r in rows}
    assert ("plain", "MPI") in cases, lines
    for alg in ("allgather", "ring", "recursive_doubling"):
        assert ("bitplane:8.25", alg) in cases, lines
    assert any(r[0].startswith("homomorphic:8.25") for r in rows), lines
    # every case ran: a time in the "best ms" column
    assert all(float(r[-9]) > 0 for r in rows), rows
    assert not any("plain MPI in" in line for line in lines), lines


def test_overhead_benchmark_quick():
    lines = _run_bench("overhead")
    rows = _rows(lines, "method ")
    assert [" ".join(r[:3] + r[4:6]) for r in rows] == ["Allreduce bare float32 4 B",
                                                        "Allreduce bare float32 64 KiB"], lines
    assert all(float(r[-3]) > 0 for r in rows), rows
    assert any(line.startswith("# target: at most 1.05x plain") for line in lines), lines
    assert any("codec auto: one node" in line for line in lines), lines


def test_overhead_benchmark_of_every_method_quick():
    from bench.overhead import CALLS

    lines = _run_bench("overhead", "--methods", "all")
    rows = _rows(lines, "method ")
    assert [r[0] for r in rows] == [m for m in CALLS for _ in range(2)], lines
    assert all(float(r[-3]) > 0 for r in rows), rows
    # the point-to-point calls of the default went plain, counted as such
    assert any("'Recv': {'sender sent plain data'" in line for line in lines), lines


def test_overhead_benchmark_under_a_named_codec_quick():
    """``--codec``: the mpicomp side names a codec; Allgatherv's small calls go plain below
    its threshold (from Python, reading the v-spec's counts)."""
    lines = _run_bench("overhead", "--methods", "Allgatherv", "--codec", "bitplane")
    rows = _rows(lines, "method ")
    assert [" ".join(r[:2] + r[4:6]) for r in rows] == ["Allgatherv bare 4 B",
                                                        "Allgatherv bare 64 KiB"], lines
    assert all(float(r[-3]) > 0 for r in rows), rows
    assert any("mpicomp (codec='bitplane')" in line for line in lines), lines
    assert any("'Allgatherv': {'below threshold" in line for line in lines), lines


def test_overhead_benchmark_of_every_spec_form_quick():
    """``--specs all``: every buffer spec form mpi4py accepts, plain and mpicomp alike."""
    from bench.overhead import SPECS

    lines = _run_bench("overhead", "--methods", "Allreduce,Allgatherv,Sendrecv", "--specs", "all",
                       "--sizes", "4")
    rows = _rows(lines, "method ")
    assert [(r[0], r[1]) for r in rows] == [(m, f) for m in ("Allreduce", "Allgatherv", "Sendrecv")
                                            for f in SPECS], lines
    assert all(float(r[-3]) > 0 for r in rows), rows


def test_overhead_benchmark_dtypes_and_counts_quick():
    """``--dtypes`` and ``--counts``: every dtype mpi4py maps, empty and odd buffers; the
    verdict names the worst case."""
    from bench.overhead import DTYPES

    lines = _run_bench("overhead", "--methods", "Allreduce,Send/Recv", "--dtypes", "all",
                       "--counts", "0,3")
    rows = _rows(lines, "method ")
    assert [(r[0], r[2], r[3]) for r in rows] == [(m, d, c) for m in ("Allreduce", "Send/Recv")
                                                  for d in DTYPES for c in ("0", "3")], lines
    assert all(float(r[-3]) > 0 for r in rows), rows
    verdict = [line for line in lines if line.startswith("# target:")]
    assert verdict and " values, " in verdict[0], lines


def test_overlap_benchmark_quick():
    lines = _run_bench("overlap")
    rows = _rows(lines, "path ")
    assert {(r[0], r[1]) for r in rows} == {
        ("compressed", "numpy"), ("compressed", "sleep"), ("plain", "numpy"), ("plain", "sleep")
    }, lines
    for r in rows:  # the figures follow from the times (to their printed rounding)
        comm_ms, compute_ms, sum_ms, both_ms, overlap = map(float, r[2:])
        assert comm_ms > 0 and compute_ms > 0 and both_ms > 0, r
        assert sum_ms == pytest.approx(comm_ms + compute_ms, abs=0.011), r
        shorter = min(comm_ms, compute_ms)
        want = (sum_ms - both_ms) / shorter
        # each time printed to 0.005 ms: sum and t_both off by that, the divisor too
        slack = 0.006 + 0.011 / shorter + 0.005 / shorter * abs(want)
        assert overlap == pytest.approx(want, abs=slack), (r, want, slack)
    # compute is sized to each path's own communication time (numpy's: one sin pass over
    # 1 MiB at least); the plain and compressed rows report the same t_comm per path
    for path in ("compressed", "plain"):
        assert len({r[2] for r in rows if r[0] == path}) == 1, rows
