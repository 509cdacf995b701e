"""The headline comparison (``make bench``) end to end, on 2 local ranks, and its plan.

The end-to-end test runs ``bench/headline.sh`` (what ``make bench`` runs)
with ``NETCLUSTER=0 HOSTS=2 PPN=1``, i.e. ``mpiexec -n 2 python -m
mpicomp.bench headline --quick`` on this machine, in a subprocess, and checks
the table, the JSON rows and the PNG: every case ran and passed its check
(the error bound of ``mpicomp.algorithms.bounds``, or bit for bit), the
errors are those of the codec's documented per-value bound (``docs/format.md``:
at most ``c * max|v|`` per value, ``c = 2**(1 - m)``, so a relative L2 error
of at most ``c * sqrt(block)`` per quantization), and the speedup column is
plain's median over each case's. Not marked ``mpi``: it starts its own
mpiexec, so it runs only in the serial stage of ``tests/run_tests.py``. Speed
is not asserted.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from launcher import find_mpiexec  # tests/launcher.py

from mpicomp.bench import headline
from mpicomp.codecs import get_codec

pytestmark = pytest.mark.slow  # left out of make test-quick

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "headline.sh"
TIMEOUT_S = 300
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CASES = {
    "Allreduce": ["plain", "bitplane:8.25", "bitplane:4.25", "default"],
    "Allgather": ["plain", "bitplane:8.25"],
    "Alltoall": ["plain", "bitplane:8.25"],
    "Bcast": ["plain", "bitplane:8.25"],
}
HEADINGS = ["collective", "size/rank", "case", "ran as", "calls", "best ms", "median ms",
            "speedup", "ratio", "rel L2", "check"]


def _rel_l2_limit(case: str, quantizations: int) -> float:
    """The relative L2 error the documented per-value bound allows a bitplane case."""
    rate = float(case.split(":")[1])
    cfg = get_codec("bitplane", rate=rate).get_config()
    m = math.floor(rate - 8 / cfg["block_size"]) - 1          # magnitude bits (float32)
    return quantizations * 2.0 ** (1 - m) * math.sqrt(cfg["block_size"])


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """(stdout lines, JSON run, PNG path) of one quick run on 2 local ranks."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter or on PATH")
    tmp = tmp_path_factory.mktemp("headline")
    png, js = tmp / "headline.png", tmp / "headline.json"
    env = dict(os.environ, NETCLUSTER="0", HOSTS="2", PPN="1", MPIEXEC=mpiexec,
               PYTHON=sys.executable, MPIEXEC_TIMEOUT=str(TIMEOUT_S), OMP_WAIT_POLICY="PASSIVE")
    for var in ("MPICOMP_TEST_REPORT", "MPICOMP_TEST_STAGE", "MPICOMP_DEBUG", "MPICOMP_CODEC",
                "MPICOMP_RATE", "MPICOMP_THRESHOLD", "MPICOMP_ALGORITHM"):
        env.pop(var, None)
    cmd = ["bash", str(SCRIPT), "--quick", "--plot", str(png), "--json", str(js)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S + 30)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "[10/10] Bcast" in proc.stderr, proc.stderr     # progress on stderr
    return proc.stdout.splitlines(), json.loads(js.read_text()), png


def test_table(quick_run):
    lines, _, _ = quick_run
    assert lines[0] == "# simulated cluster not used: NETCLUSTER=0", lines
    assert any(line.startswith("# machine: ") for line in lines), lines
    assert any(line.startswith("# 2 ranks (2 on this node)") for line in lines), lines
    assert any(line.startswith("# command: mpiexec -n 2 python -m mpicomp.bench headline ")
               for line in lines), lines
    heads = [i for i, line in enumerate(lines) if line.startswith("collective ")]
    assert len(heads) == 1, lines
    assert re.split(r"\s{2,}", lines[heads[0]].strip()) == HEADINGS, lines[heads[0]]
    # columns are 2 spaces apart at least; a size ("1 MiB") holds one
    rows = [dict(zip(HEADINGS, re.split(r"\s{2,}", line.strip()), strict=True))
            for line in lines[heads[0] + 1:] if not line.startswith("#")]
    assert [(r["collective"], r["case"]) for r in rows] == [
        (c, k) for c, ks in CASES.items() for k in ks], rows
    for r in rows:
        speedup = float(r["speedup"])
        assert 0 < speedup < math.inf, r
        if r["case"] == "plain":
            assert speedup == 1.0 and r["ran as"] == "MPI", r
        assert r["check"] == "ok", r


def test_rows_sane(quick_run):
    _, run, _ = quick_run
    assert run["benchmark"] == "headline" and run["ranks"] == 2 and run["dtype"] == "float32"
    assert run["where"].startswith("local ranks: 2"), run["where"]
    rows = run["rows"]
    by = {(r["collective"], r["case"]): r for r in rows}
    assert by[("Allreduce", "plain")]["size"] == 1 << 20
    for coll in ("Allgather", "Alltoall", "Bcast"):
        assert by[(coll, "plain")]["size"] == 256 << 10, coll
    for r in rows:
        what = (r["collective"], r["case"])
        assert r["check"] == "ok", (what, r["check_detail"])
        assert 0 < r["best_ms"] <= r["median_ms"], (what, r)
        plain = by[(r["collective"], "plain")]
        assert r["speedup"] == pytest.approx(plain["median_ms"] / r["median_ms"]), what
        if r["case"] == "plain":
            # float rounding of a float32 sum; moved data exactly
            if r["collective"] == "Allreduce":
                assert r["rel_l2"] < 1e-6, what
            else:
                assert r["rel_l2"] == 0.0, what
            continue
        if r["case"] == "default":
            continue                                        # the model decides how it runs
        assert r["ran_as"] not in ("plain", "MPI"), (what, r["path"])
        assert r["ratio"] > 1.0, (what, r)
        # an allreduce on 2 ranks quantizes a value at most twice (ring, recursive
        # doubling; allgather once); moved data once
        q = 2 if r["collective"] == "Allreduce" else 1
        assert 0 < r["rel_l2"] <= _rel_l2_limit(r["case"], q), (what, r["rel_l2"])
    # fewer bits, more error
    assert by[("Allreduce", "bitplane:4.25")]["rel_l2"] > by[("Allreduce", "bitplane:8.25")][
        "rel_l2"]
    # one stream per rank of 8.25 bits per 32-bit value
    for coll in ("Allgather", "Bcast"):
        assert by[(coll, "bitplane:8.25")]["ratio"] == pytest.approx(32 / 8.25, rel=0.01), coll


def test_png(quick_run):
    _, _, png = quick_run
    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE, data[:16]
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width >= 600 and height >= 400, (width, height)   # the IHDR chunk


def test_plan_sizes_and_cases():
    plans = headline.plan(16 << 20, 4 << 20, 4, 4)
    assert [p.bench.method for p in plans] == list(CASES)
    assert [[c["case"] for c in p.cases] for p in plans] == list(CASES.values())
    sizes = {p.bench.method: (p.nbytes, p.osu_size) for p in plans}
    assert sizes == {"Allreduce": (16 << 20, 16 << 20), "Allgather": (4 << 20, 4 << 20),
                     "Alltoall": (4 << 20, 1 << 20), "Bcast": (4 << 20, 4 << 20)}
    default = plans[0].cases[-1]
    assert default.get("default") and default["settings"] == {}
    assert plans[0].cases[1]["settings"]["codec"]["id"] == "bitplane"
    with pytest.raises(ValueError, match="too small"):
        headline.plan(1 << 20, 8, 4, 4)


def test_ran_as():
    assert headline.ran_as("compressed (ring)") == "ring"
    assert headline.ran_as("plain (codec auto: one node)") == "plain"
    assert headline.ran_as("plain MPI") == "MPI"
