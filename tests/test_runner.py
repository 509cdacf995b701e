"""``python -m mpicomp``: an unchanged program run with mpi4py's COMM_WORLD compressing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launcher import find_mpiexec  # tests/launcher.py

TIMEOUT_S = 180

PROBE = """
import json, os, sys
from mpi4py import MPI
import mpicomp
import __main__
pol = MPI.COMM_WORLD.resolved_policy()
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__,
                  "main_is_this": getattr(__main__, "MARK", None) == 7,
                  "swapped": MPI.COMM_WORLD is mpicomp.COMM_WORLD,
                  "codec": pol.codec.get_config(), "threshold": pol.threshold}))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MPICOMP_", "PMI_", "MPI_", "HYDRA_"))}
    env["MPIEXEC_TIMEOUT"] = str(TIMEOUT_S)
    return env


def _run(args: list[str], cwd: Path, ranks: int = 0) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mpicomp", *args]
    if ranks:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            pytest.skip("no mpiexec next to the interpreter or on PATH")
        cmd = [mpiexec, "-n", str(ranks), *cmd]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S + 30)


@pytest.fixture
def serial_only(comm):
    if comm.Get_size() > 1:
        pytest.skip("starts processes of its own")


def _last_json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_script_sees_argv_path_and_main_as_python_gives_them(serial_only, tmp_path):
    prog = tmp_path / "sub" / "prog.py"
    prog.parent.mkdir()
    prog.write_text("MARK = 7\n" + PROBE)
    got = _last_json(_run(["--codec", "zfp", "--rate", "8", "--threshold", "1K", str(prog),
                           "a", "--codec", "b"], tmp_path))
    assert got["argv"] == [str(prog), "a", "--codec", "b"]
    assert got["path0"] == str(prog.parent.resolve())
    assert got["name"] == "__main__" and got["main_is_this"]
    assert got["swapped"]
    assert got["codec"] == {"id": "zfp", "rate": 8.0, "dims": 1} and got["threshold"] == 1024


def test_a_module_and_a_command(serial_only, tmp_path):
    (tmp_path / "probe_mod.py").write_text("MARK = 7\n" + PROBE)
    got = _last_json(_run(["-m", "probe_mod", "x"], tmp_path))
    assert got["argv"] == [str(tmp_path / "probe_mod.py"), "x"]
    assert got["path0"] == str(tmp_path)
    assert got["name"] == "__main__" and got["main_is_this"] and got["swapped"]
    assert got["codec"]["id"] == "bitplane"  # the default (codec auto)
    got = _last_json(_run(["--codec", "none", "-c", "MARK = 7\n" + PROBE, "y"], tmp_path))
    assert got["argv"] == ["-c", "y"] and got["path0"] == ""
    assert got["main_is_this"] and got["codec"] == {"id": "none"}


def test_bad_settings_and_usage_are_named(serial_only, tmp_path):
    proc = _run(["--rate", "zero", "-c", "pass"], tmp_path)
    assert proc.returncode != 0 and "MPICOMP_RATE" in proc.stderr, proc.stderr
    proc = _run(["--stats"], tmp_path)
    assert proc.returncode == 2 and "no program given" in proc.stderr, proc.stderr


def test_stats_summary_over_the_job(serial_only, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import numpy as np\nfrom mpi4py import MPI\n"
        "x = np.ones(1 << 16, np.float32); y = np.empty_like(x)\n"
        "for _ in range(3):\n    MPI.COMM_WORLD.Allreduce(x, y)\n"
        "MPI.COMM_WORLD.Bcast(np.ones(10, np.float32))\n"
        "assert y[0] == MPI.COMM_WORLD.Get_size()\n")
    proc = _run(["--codec", "bitplane", "--rate", "8.25", "--threshold", "1K", "--stats",
                 str(prog)], tmp_path, ranks=2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.startswith("  ")}
    assert "mpicomp job summary: 2 rank(s)" in proc.stdout, proc.stdout
    assert rows["Allreduce"][1:3] == ["6", "100.0%"], proc.stdout  # 3 calls on each rank
    assert rows["Bcast"][1:3] == ["2", "0.0%"], proc.stdout
    assert "below threshold (40 B < 1024 B): 2" in proc.stdout, proc.stdout
    assert float(rows["Allreduce"][5]) > 0  # MiB saved


def test_a_failing_rank_ends_the_job(serial_only, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(
        "from mpi4py import MPI\n"
        "def boom():\n    raise RuntimeError('rank one fails')\n"
        "if MPI.COMM_WORLD.Get_rank() == 1:\n    boom()\n"
        "MPI.COMM_WORLD.Barrier()\n")
    proc = _run([str(prog)], tmp_path, ranks=2)
    assert proc.returncode != 0
    assert "RuntimeError: rank one fails" in proc.stderr, proc.stderr
    assert "runpy" not in proc.stderr and "runner.py" not in proc.stderr, proc.stderr
    assert 'prog.py", line 3, in boom' in proc.stderr, proc.stderr
    prog.write_text("import sys\nfrom mpi4py import MPI\n"
                    "if MPI.COMM_WORLD.Get_rank() == 0:\n    sys.exit(3)\n"
                    "MPI.COMM_WORLD.Barrier()\n")
    proc = _run([str(prog)], tmp_path, ranks=2)
    assert proc.returncode != 0 and "sys.exit(3) on rank 0" in proc.stderr, proc.stderr

