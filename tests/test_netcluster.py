"""bench/netcluster.sh: the simulated cluster really shapes traffic and always cleans up.

Runs only where the script can: as root with ``ip`` and ``tc`` (iproute2) and
a kernel with network namespaces, veth, bridge and tbf; skipped otherwise.
Not marked ``mpi``: the script starts its own mpiexec, so these tests run
once, in the serial stage of ``tests/run_tests.py``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import launcher  # tests/launcher.py
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "netcluster.sh"
BIN = Path(sys.executable).parent           # the venv's bin: python, mpiexec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netcluster.sh needs root (network namespaces, tc)"),
    pytest.mark.skipif(shutil.which("ip") is None or shutil.which("tc") is None,
                       reason="netcluster.sh needs ip and tc (iproute2)"),
    pytest.mark.skipif(shutil.which("mpiexec", path=str(BIN)) is None,
                       reason="no mpiexec beside the test's python"),
    pytest.mark.timeout(120),
]

#: the tests that start a job: netcluster.sh launches its ranks through MPICH's hydra
#: (-launcher ssh -launcher-exec), which Open MPI's mpiexec does not have (make bench-net
#: is MPICH-only; README)
needs_hydra = pytest.mark.skipif(
    launcher.flavour(str(BIN / "mpiexec")) != "mpich",
    reason="netcluster.sh starts its ranks through MPICH's hydra (-launcher ssh "
           "-launcher-exec); this venv's mpiexec is not MPICH's")

MIB = 1 << 20
RATE_BPS = 100e6                            # --rate 100mbit

# rank 0 and 1 exchange NBYTES each way at once (each link direction carries
# NBYTES: at least NBYTES * 8 / rate seconds), then an Allreduce is checked
PROG = r"""
import json, sys, time
import numpy as np
from mpi4py import MPI
c = MPI.COMM_WORLD
nbytes = int(sys.argv[1])
x = np.full(nbytes // 4, c.rank + 1, np.float32)
y = np.empty_like(x)
other = 1 - c.rank
c.Sendrecv(x[:1024], other, 0, y[:1024], other, 0)   # connect
c.Barrier()
t = time.perf_counter()
c.Sendrecv(x, other, 1, y, other, 1)
t = c.allreduce(time.perf_counter() - t, op=MPI.MAX)
got_peer = bool(np.all(y == other + 1))
s = np.empty_like(x)
c.Allreduce(x, s)
shared = c.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
if c.rank == 0:
    print(json.dumps({"size": c.size, "seconds": t, "peer": got_peer,
                      "sum_ok": bool(np.all(s == c.size * (c.size + 1) / 2)),
                      "shared": shared}), flush=True)
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_CVAR_", "MPICOMP_TEST_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["MPIEXEC"] = str(BIN / "mpiexec")
    env["MPIEXEC_TIMEOUT"] = "60"
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


def _ours(pid: int) -> list[str]:
    """The namespaces of the script run with this pid that still exist."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(f"mpicomp-{pid}-")]


def _start(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(SCRIPT), *args], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _default_signals() -> None:
    """In the child before exec: SIGINT and SIGTERM at their defaults, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _run(args: list[str], timeout: float = 90) -> tuple[subprocess.Popen, str, str]:
    p = _start(args)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"netcluster.sh did not end in {timeout} s:\n{out}\n{err}")
    if p.returncode == 2 and ("kernel" in err or "could not create" in err):
        pytest.skip(f"this machine cannot build the cluster: {err.strip()}")
    return p, out, err


@needs_hydra
def test_shaped_link_and_right_result(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG)
    nbytes = 4 * MIB
    p, out, err = _run(["--hosts", "2", "--ppn", "1", "--rate", "100mbit", "--",
                        "python", str(prog), str(nbytes)])
    assert p.returncode == 0, f"{out}\n{err}"
    assert f"mpicomp-{p.pid}-h0" in err and "100mbit" in err, err  # the start line
    res = json.loads(out.strip().splitlines()[-1])
    assert res["size"] == 2 and res["peer"] and res["sum_ok"], res
    assert res["shared"] == 1, res        # one rank per host: each its own node
    bound = nbytes * 8 / RATE_BPS         # 0.34 s
    assert res["seconds"] >= 0.7 * bound, (res, bound)   # the shaping applies
    assert res["seconds"] < 20 * bound, (res, bound)
    assert _ours(p.pid) == []


@needs_hydra
def test_ranks_of_a_host_are_one_node(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROG.replace("other = 1 - c.rank", "other = c.rank ^ 1"))
    # ranks 0 and 1 share host 0: their exchange does not cross the shaped link
    p, out, err = _run(["--hosts", "2", "--ppn", "2", "--rate", "100mbit", "--",
                        "python", str(prog), str(4 * MIB)])
    assert p.returncode == 0, f"{out}\n{err}"
    res = json.loads(out.strip().splitlines()[-1])
    assert res["size"] == 4 and res["peer"] and res["sum_ok"] and res["shared"] == 2, res
    assert res["seconds"] < 0.5 * 4 * MIB * 8 / RATE_BPS, res
    assert _ours(p.pid) == []


@needs_hydra
def test_failing_command_status_and_cleanup():
    p, out, err = _run(["--hosts", "2", "--rate", "100mbit", "--",
                        "python", "-c", "import sys; sys.exit(3)"])
    assert p.returncode == 3, f"{out}\n{err}"
    assert _ours(p.pid) == []


@needs_hydra
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_cleans_up(sig, status):
    # its own session, so that SIGINT can go to the whole group, as Ctrl-C does; and SIGINT
    # at its default: a test run started in the background (nohup, '&' in a script) inherits
    # SIGINT ignored, and bash cannot trap a signal that was ignored when it started
    p = _start(["--hosts", "2", "--rate", "100mbit", "--", "sleep", "60"],
               start_new_session=True, preexec_fn=_default_signals)
    try:
        deadline = time.monotonic() + 30
        while len(_ours(p.pid)) < 3 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_ours(p.pid)) == 3, "the switch and 2 hosts exist while the job runs"
        time.sleep(1.0)                   # let mpiexec start its ranks
        if sig == signal.SIGINT:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == status, f"{p.returncode}\n{out}\n{err}"
    assert _ours(p.pid) == []
    # nothing of the job survives it
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"mpicomp-{p.pid}-" not in ps


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv to drop root")
def test_refuses_without_root():
    # The unprivileged user may not be able to enter the checkout (a clone in a mode-700
    # directory, root's home): bash reads the script from stdin and runs in "/", so the refusal
    # checked is the script's own and not the file system's.
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "--inh-caps=-all", "bash", "-s", "--", "--", "true"],
                       input=SCRIPT.read_text(), cwd="/", env=_env(), capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "needs root" in p.stderr, p


def test_refuses_bad_options():
    for args in (["--hosts", "0", "--", "true"], ["--ppn", "x", "--", "true"], ["--hosts", "2"]):
        p = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=_env(),
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and p.stderr, (args, p)
    p = subprocess.run(["bash", str(SCRIPT), "--", "true"], cwd=ROOT, env={**_env(), "PIN": "2"},
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "PIN must be 0 or 1, got '2'" in p.stderr, p


AFFINITY = r"""
import json, os
from mpi4py import MPI
cores = MPI.COMM_WORLD.gather(sorted(os.sched_getaffinity(0)), root=0)
if MPI.COMM_WORLD.rank == 0:
    print(json.dumps(cores), flush=True)
"""


@needs_hydra
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to share out")
@pytest.mark.parametrize("pin", [True, False])
def test_each_host_on_cores_of_its_own(tmp_path, pin):
    prog = tmp_path / "affinity.py"
    prog.write_text(AFFINITY)
    mine = sorted(os.sched_getaffinity(0))
    p, out, err = _run(["--hosts", "2", "--ppn", "2", "--rate", "1gbit",
                        *([] if pin else ["--no-pin"]), "--", "python", str(prog)])
    assert p.returncode == 0, f"{out}\n{err}"
    cores = json.loads(out.strip().splitlines()[-1])   # ranks 0, 1 on host 0; 2, 3 on host 1
    if pin:
        assert cores[0] == cores[1] and cores[2] == cores[3], cores
        assert cores[0] and cores[2] and not set(cores[0]) & set(cores[2]), cores
        assert set(cores[0]) | set(cores[2]) <= set(mine), (cores, mine)
    else:
        assert all(c == mine for c in cores), (cores, mine)
    assert _ours(p.pid) == []
