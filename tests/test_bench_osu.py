"""The OSU-style sweeps (``python -m mpicomp.bench osu_*``) end to end, and their formatting.

The end-to-end tests run each benchmark under ``mpiexec -n 2`` in a
subprocess with tiny sizes and iteration counts, ``-c -f --json``, and check
OSU's output format (header lines, the ``# Size`` column header, rows of
``%-10d`` then ``%20.2f``), the JSON records and that validation passed.
Not marked ``mpi``: they start their own mpiexec, so they run only in the
serial stage of ``tests/run_tests.py``. Speed is not asserted.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from launcher import find_mpiexec  # tests/launcher.py

from mpicomp.bench import osu
from mpicomp.bench.osu_cases import BENCHMARKS
from mpicomp.codecs import get_codec
from mpicomp.decision.screen import ONE_NODE

pytestmark = pytest.mark.slow  # left out of make test-quick

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120
TINY = ("-m", "4096:65536", "-i", "3", "-x", "1")
SIZES = [4096, 8192, 16384, 32768, 65536]
RECORD_KEYS = {"size", "avg_us", "min_us", "max_us", "iterations", "plain_avg_us", "speedup",
               "predicted_us", "ratio", "rel_l2", "max_abs_err", "path", "check_ok"}
TITLES = {
    "osu_allreduce": "Allreduce Latency Test",
    "osu_allgather": "Allgather Latency Test",
    "osu_alltoall": "All-to-All Personalized Exchange Latency Test",
    "osu_reduce_scatter": "Reduce_scatter Latency Test",
    "osu_bcast": "Broadcast Latency Test",
    "osu_latency": "Latency Test",
    "osu_bw": "Bandwidth Test",
}


def _run(*args: str, n: int = 2,
         entry: tuple[str, ...] = ("-m", "mpicomp.bench")) -> subprocess.CompletedProcess:
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter or on PATH")
    env = dict(os.environ, MPIEXEC_TIMEOUT=str(TIMEOUT_S), OMP_WAIT_POLICY="PASSIVE",
               NUMBA_NUM_THREADS="1")
    for var in ("MPICOMP_TEST_REPORT", "MPICOMP_TEST_STAGE", "MPICOMP_DEBUG", "MPICOMP_CODEC",
                "MPICOMP_RATE", "MPICOMP_THRESHOLD", "MPICOMP_ALGORITHM", "MPICOMP_TOLERANCE"):
        env.pop(var, None)
    cmd = [mpiexec, "-n", str(n), sys.executable, *entry, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S + 30)


def _ok(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, (
        f"{proc.args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout.splitlines()


def _table(lines: list[str]) -> tuple[list[str], str, list[str]]:
    """(comment lines before the column header, the column header, the rows)."""
    heads = [i for i, line in enumerate(lines) if line.startswith("# Size")]
    assert len(heads) == 1, lines
    h = heads[0]
    rows = [line for line in lines[h + 1:] if line and not line.startswith("#")]
    return lines[:h], lines[h], rows


def _headings(header: str) -> list[str]:
    assert header.startswith("# Size    "), header
    return re.split(r"\s{2,}", header[len("# Size"):].strip())


def _check_row(row: str, size: int) -> None:
    """OSU's ``%-10d%20.2f``: the size left-aligned in 10, then a 20-wide fixed-point figure."""
    assert row[:10] == f"{size:<10d}", row
    assert re.fullmatch(r" *\d+\.\d\d", row[10:30]) and len(row[10:30]) == 20, row


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_osu_benchmark_validated(name, tmp_path):
    out = tmp_path / "run.json"
    lines = _ok(_run(name, *TINY, "-c", "-f", "--codec", "bitplane", "--rate", "8.25",
                     "--data", "gradient", "--json", str(out)))
    comments, header, rows = _table(lines)
    assert f"# mpicomp OSU-style MPI {TITLES[name]} (OMB v7.4 conventions)" in comments, lines
    assert "# Datatype: MPI_FLOAT." in comments, lines
    assert all(line.startswith("#") for line in comments if line), comments
    heads = _headings(header)
    if name == "osu_bw":
        assert heads[:3] == ["Bandwidth (MB/s)", "Iterations", "Validation"], heads
    else:
        assert heads[:5] == ["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)",
                             "Iterations", "Validation"], heads
    assert heads[-6:-2] == (["Plain BW (MB/s)", "Speedup", "Ratio", "Predicted (MB/s)"]
                            if name == "osu_bw" else
                            ["Plain Avg(us)", "Speedup", "Ratio", "Predicted(us)"]), heads
    assert heads[-2:] == ["Rel L2", "Max Abs Err"], heads
    assert len(rows) == len(SIZES), lines
    for row, size in zip(rows, SIZES, strict=True):
        _check_row(row, size)
        cells = row.split()
        assert len(cells) == 1 + len(heads), row
        assert cells[heads.index("Validation") + 1] == "Pass", row
        assert cells[heads.index("Iterations") + 1] == "3", row

    run = json.loads(out.read_text())
    assert run["benchmark"] == name and run["ranks"] == 2 and run["datatype"] == "MPI_FLOAT"
    assert run["policy"]["codec"]["id"] == "bitplane" and run["policy"]["threshold"] == 0
    records = run["records"]
    assert [r["size"] for r in records] == SIZES
    for r in records:
        assert RECORD_KEYS <= set(r), sorted(r)
        assert r["check_ok"] is True and r["validation"] == "Pass", r
        assert r["path"].startswith("compressed"), r  # threshold 0: every size compressed
        assert r["iterations"] == 3 and r["avg_us"] > 0 and r["plain_avg_us"] > 0
        assert r["min_us"] <= r["avg_us"] <= r["max_us"], r
        assert r["speedup"] == pytest.approx(r["plain_avg_us"] / r["avg_us"])
        assert r["ratio"] > 3.0, r  # 8.25 bits of 32, less headers
        assert 0 < r["rel_l2"] < 0.1 and r["max_abs_err"] > 0, r
        if name == "osu_bw":
            assert r["bandwidth_mbps"] == pytest.approx(r["size"] / r["avg_us"])


def test_osu_allreduce_default_policy_with_progress_and_plot(tmp_path):
    """No --codec: the library's default policy; --progress lines on stderr; --plot a PNG."""
    plot = importlib.util.find_spec("matplotlib") is not None
    png, out = tmp_path / "sweep.png", tmp_path / "run.json"
    extra = ("--plot", str(png)) if plot else ()
    proc = _run("osu_allreduce", *TINY, "-c", "--data", "gradient", "--progress",
                "--json", str(out), *extra)
    lines = _ok(proc)
    _, header, rows = _table(lines)
    assert _headings(header)[:2] == ["Avg Latency(us)", "Validation"], header
    for row, size in zip(rows, SIZES, strict=True):
        _check_row(row, size)
    assert "osu_allreduce: size 65536 B (5/5)" in proc.stderr, proc.stderr
    run = json.loads(out.read_text())
    assert run["policy"]["threshold"] == 65536, run["policy"]  # the default's
    assert all(r["check_ok"] for r in run["records"]), run["records"]
    # one node, codec auto: every size goes plain for that reason (checked first)
    assert all(r["path"] == f"plain ({ONE_NODE})" for r in run["records"]), run["records"]
    if not plot:
        pytest.skip("matplotlib is not installed: the plot was not tried")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


#: the benchmarks' command line with a bound no result can meet
_IMPOSSIBLE_BOUND = """
import sys
from mpicomp.algorithms import bounds
bounds.allreduce_bound = lambda *args: -1.0
from mpicomp.bench.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_osu_failed_check_exits_1_on_every_rank():
    proc = _run("osu_allreduce", "-m", "4096:8192", "-i", "1", "-x", "0", "-c", "--codec",
                "bitplane", "--data", "gradient", entry=("-c", _IMPOSSIBLE_BOUND))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    _, header, rows = _table(lines)
    column = _headings(header).index("Validation") + 1
    assert [r.split()[column] for r in rows] == ["Fail", "Fail"], lines
    failures = [line for line in lines if line.startswith("# Validation failed")]
    assert len(failures) == 2, lines
    assert re.match(r"# Validation failed at size 4096 \(compressed \(\w+\)\): max abs err "
                    r"\S+ > bound -1\.000e\+00", failures[0]), failures


def test_osu_latency_needs_two_ranks():
    proc = _run("osu_latency", *TINY, n=1)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "needs at least 2 ranks" in proc.stderr, proc.stderr


# -- in-process: option parsing and OSU's formatting ---------------------------------
def test_message_sizes():
    assert osu.message_sizes(None, 4)[0] == 4 and osu.message_sizes(None, 4)[-1] == 1 << 20
    assert osu.message_sizes(None, 8)[0] == 8
    assert osu.message_sizes("1024:16777216", 4) == [1 << k for k in range(10, 25)]
    assert osu.message_sizes("65536", 4)[-1] == 65536
    assert osu.message_sizes("2048:", 4) == [1 << k for k in range(11, 21)]
    for bad in ("abc", "8:4", "2:1024", "6:1024"):
        with pytest.raises(osu.UsageError):
            osu.message_sizes(bad, 4)


def test_osu_row_format():
    cols = osu.columns(BENCHMARKS["osu_allreduce"], full=True, validate=False)
    header = osu.header_line(cols)
    assert header.startswith("# Size    " + "Avg Latency(us)".rjust(20)
                             + "Min Latency(us)".rjust(20) + "Max Latency(us)".rjust(20)
                             + "Iterations".rjust(12))
    row = {"size": 1024, "avg_us": 0.744, "min_us": 0.73, "max_us": 0.75, "iterations": 200,
           "plain_avg_us": 1.5, "speedup": 2.0, "ratio": None, "predicted_us": None,
           "rel_l2": 1.5e-3, "max_abs_err": 2e-2}
    line = osu.row_line(cols, row)
    osu_printf = "%-10d%20.2f%20.2f%20.2f%12d" % (1024, 0.744, 0.73, 0.75, 200)  # noqa: UP031
    assert line.startswith(osu_printf)
    assert line.split()[6:] == ["2.00", "-", "-", "1.50e-03", "2.00e-02"]


def test_model_check_judges_predictions_from_the_threshold_up(tmp_path, capsys):
    """model_check: errors are predicted / measured - 1, sizes below --from are shown but
    not judged, and the exit status says whether the target held."""
    from mpicomp.bench import __main__ as cli

    def rec(size, plain, plain_pred, comp, comp_pred):
        return {"size": size, "plain_avg_us": plain, "predicted_plain_us": plain_pred,
                "avg_us": comp, "predicted_compressed_us": comp_pred,
                "predicted_algorithm": "ring"}

    doc = {"benchmark": "osu_allreduce", "ranks": 4, "policy": {}, "command": "x",
           "records": [rec(1024, 10.0, 40.0, 10.0, 10.0),
                       rec(1 << 20, 100.0, 120.0, 50.0, 40.0)]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["model_check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| 1048576 | 100 | 120 | +20% | 50 | 40 | -20% | ring |" in out
    assert "+300%" in out and "worst |error| from 1048576 B: 20%" in out
    assert cli.main(["model_check", "--target", "0.1", str(path)]) == 1
    assert cli.main(["model_check", "--from", "0", str(path)]) == 1


def test_model_check_prints_the_rings_terms_from_a_calibration(tmp_path, capsys):
    """model_check --calibration: per size the ring's g, W, C and hidden part, as the model
    computes them from the calibration file the job saved (checked by hand on a
    calibration of round numbers); a calibration of another job is refused."""
    from mpicomp.bench import __main__ as cli
    from mpicomp.calibration import speed_key
    from mpicomp.model import Calibration, Fit
    from mpicomp.topology import Layout

    codec = get_codec("bitplane", rate=8.25)
    beta, e, d, add = 1e-9, 1e-9, 1e-9, 0.25e-9
    cal = Calibration(Layout((0, 1)), 1, 50e-6, Fit(0.0, beta),
                      {m: Fit(0.0, beta) for m in ("Allreduce", "Allgather", "Alltoall",
                                                  "Bcast", "Reduce_scatter_block")},
                      add, 0.0, overlap=0.0, fixed_s=100e-6)
    cal.codecs[speed_key(codec, np.float32, False)] = (e, d)
    cal_path = tmp_path / "cal.json"
    cal_path.write_text(json.dumps(cal.as_dict()))
    n = 1 << 20
    doc = {"benchmark": "osu_allreduce", "ranks": 2, "datatype": "MPI_FLOAT",
           "buffer": "numpy", "policy": {"codec": codec.get_config()}, "command": "x",
           "records": [{"size": n, "plain_avg_us": 1000.0, "predicted_plain_us": 1000.0,
                        "avg_us": 3000.0, "predicted_compressed_us": 3000.0,
                        "predicted_algorithm": "ring"}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["model_check", str(path), "--calibration", str(cal_path)]) == 0
    rho = codec.encoded_nbytes(n // 4, np.dtype(np.float32)) / n
    g, wire = 150.0, 2 * beta * rho * n / 2 * 1e6  # agreement + fixed; 2 steps of n/2
    codec_us = (e + d * 3 / 2 + add / 2) * n * 1e6  # encode n, decode 3n/2, add n/2
    out = capsys.readouterr().out
    assert "overlap 0.00; ring = g + W + C - hidden" in out
    assert (f"| {n} | 1 | {g:.0f} | {wire:.0f} | {codec_us:.0f} | 0 "
            f"| {g + wire + codec_us:.0f} |") in out
    doc["ranks"] = 4
    path.write_text(json.dumps(doc))
    assert cli.main(["model_check", str(path), "--calibration", str(cal_path)]) == 2
    assert "the calibration is of 2 ranks, the benchmark ran on 4" in capsys.readouterr().err


def test_model_check_spread_is_the_slowest_files_mean_over_the_fastests(tmp_path, capsys):
    """model_check --spread: per size measured in every file, the slowest mean over the
    fastest (plain and compressed), with the bound one prediction can cover; files of
    different runs are refused."""
    from mpicomp.bench import __main__ as cli

    def doc(plain, comp, benchmark="osu_allreduce"):
        return {"benchmark": benchmark, "ranks": 2, "policy": {}, "command": "x",
                "records": [{"size": n, "plain_avg_us": p, "predicted_plain_us": p,
                             "avg_us": c, "predicted_compressed_us": c,
                             "predicted_algorithm": "ring"}
                            for n, p, c in zip((1 << 20, 1 << 21), plain, comp, strict=True)]}

    paths = []
    for i, (plain, comp) in enumerate((((100.0, 200.0), (300.0, 400.0)),
                                       ((150.0, 200.0), (330.0, 800.0)),
                                       ((120.0, 250.0), (360.0, 500.0)))):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(doc(plain, comp)))
    assert cli.main(["model_check", "--spread", *map(str, paths)]) == 0
    out = capsys.readouterr().out
    assert "one prediction is within 25% of both only up to 1.67x" in out
    assert f"| {1 << 20} | 1.50x | 1.20x |" in out
    assert f"| {1 << 21} | 1.25x | 2.00x |" in out
    paths[1].write_text(json.dumps(doc((1.0, 1.0), (1.0, 1.0), "osu_bcast")))
    assert cli.main(["model_check", "--spread", *map(str, paths)]) == 2
    assert "--spread: the files are of different runs" in capsys.readouterr().err


def test_osu_alltoall_node_aware_check(tmp_path):
    """``--algorithm hierarchical`` on one node: the node-aware Alltoall moves every block
    plain, and ``-c`` expects exactly that (not the codec's round trip)."""
    out = tmp_path / "run.json"
    lines = _ok(_run("osu_alltoall", *TINY, "-c", "--codec", "bitplane", "--rate", "8.25",
                     "--algorithm", "hierarchical", "--data", "gradient", "--json", str(out)))
    records = json.loads(out.read_text())["records"]
    assert [r["path"] for r in records] == ["compressed (alltoall-hierarchical)"] * len(SIZES)
    assert all(r["check_ok"] and r["rel_l2"] == 0.0 for r in records), lines


def test_osu_allreduce_hierarchical_check(tmp_path):
    """``-c`` on the node-aware allreduce: its bound counts one quantization per node
    (it needs the job's node count, which the check finds)."""
    out = tmp_path / "run.json"
    lines = _ok(_run("osu_allreduce", *TINY, "-c", "--codec", "bitplane", "--rate", "8.25",
                     "--algorithm", "hierarchical", "--data", "gradient", "--json", str(out)))
    records = json.loads(out.read_text())["records"]
    assert [r["path"] for r in records] == ["compressed (hierarchical)"] * len(SIZES)
    assert all(r["check_ok"] for r in records), lines


@pytest.mark.parametrize("name", ["osu_allgather", "osu_allreduce"])
def test_osu_tolerance_compresses_with_errbound_and_checks(tmp_path, name):
    """``--tolerance``: every size compressed with errbound (threshold 0), the header says
    so, ``-c`` passes (moved data: the codec's round trip; sums: within the bound), the
    streams smaller than the data, and the error within the tolerance plus rounding."""
    out = tmp_path / "run.json"
    lines = _ok(_run(name, *TINY, "-c", "--tolerance", "1e-4", "--json", str(out)))
    assert any("tolerance 0.0001 per call" in line for line in lines), lines
    records = json.loads(out.read_text())["records"]
    assert all(r["path"].startswith("compressed") and r["check_ok"] for r in records), lines
    assert all(r["ratio"] > 1.5 and r["max_abs_err"] <= 1e-4 * 1.01 for r in records), records


def test_osu_bcast_of_a_field_with_its_shape_checks_the_bound(tmp_path):
    """A shaped codec codes a field's slabs piece by piece, so its values depend on the cut:
    ``-c`` checks each value within the bound (not a whole-buffer round trip), and passes."""
    out = tmp_path / "run.json"
    codec = '{"id": "errbound", "tolerance": 1e-4, "shape": [1024, 1024]}'
    lines = _ok(_run("osu_bcast", "-m", "4194304:4194304", "-i", "2", "-x", "1", "-c", "--data",
                     "field", "--codec", codec, "--json", str(out)))
    records = json.loads(out.read_text())["records"]
    assert all(r["path"].startswith("compressed") and r["check_ok"] for r in records), lines
    assert all(r["max_abs_err"] <= 1e-4 and r["ratio"] > 20 for r in records), records
