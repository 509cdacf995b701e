"""Importing mpicomp is light and local: no Numba until a codec runs, no environment changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r"""
import json, os, sys
before = dict(os.environ)
import mpicomp
after_import = {"numba": "numba" in sys.modules, "env_same": dict(os.environ) == before}
import numpy as np
c = mpicomp.get_codec("bitplane", rate=8.25)
x = np.linspace(-1, 1, 1 << 17, dtype=np.float32)
c.decode(c.encode(x), out=np.empty_like(x))
import numba
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(json.dumps({**after_import, "changed_after_codec": changed,
                  "layer": numba.threading_layer()}))
"""


def _run(extra_env: dict[str, str], clean: bool = True) -> tuple[dict, str]:
    """The child's report and stderr; ``clean=False``: ``extra_env`` is its whole
    environment, less the OpenMP and thread settings ``clean`` drops too."""
    base = os.environ if clean else extra_env
    env = {k: v for k, v in base.items()
           if k not in ("OMP_WAIT_POLICY", "NUMBA_NUM_THREADS", "MPICOMP_OMP_PASSIVE")}
    if clean:
        env.update(extra_env)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_import_loads_no_numba_and_leaves_the_environment_alone():
    got, stderr = _run({"OMP_DISPLAY_ENV": "TRUE"})  # OpenMP prints the settings it read
    assert got["numba"] is False
    assert got["env_same"] is True
    assert got["changed_after_codec"] == [], got  # the wait policy is set only while OpenMP starts
    if got["layer"] == "omp":
        assert "OMP_WAIT_POLICY = 'PASSIVE'" in stderr, stderr[-2000:]


def test_a_users_wait_policy_is_kept():
    got, stderr = _run({"OMP_WAIT_POLICY": "ACTIVE", "OMP_DISPLAY_ENV": "TRUE"})
    assert got["changed_after_codec"] == [], got
    if got["layer"] == "omp":
        assert "OMP_WAIT_POLICY = 'ACTIVE'" in stderr, stderr[-2000:]



def _child_env_without_a_launcher(**extra: str) -> dict[str, str]:
    from mpicomp import threads

    drop = set(threads.LAUNCHER_VARS) | set(threads.LOCAL_SIZE_VARS) | {
        "GOMP_SPINCOUNT", threads.ENV}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(OMP_DISPLAY_ENV="VERBOSE", **extra)
    return env


def test_a_rank_that_owns_its_cores_gets_a_short_spin_and_an_oversubscribed_one_none():
    from mpicomp import threads

    cores = threads.usable_cores()
    # a singleton (no launcher), and a rank alone on its node by the launcher's word
    for extra in ({}, {"MPI_LOCALNRANKS": "1"}):
        got, stderr = _run(_child_env_without_a_launcher(**extra), clean=False)
        assert got["changed_after_codec"] == [], got
        if got["layer"] == "omp":
            assert f"GOMP_SPINCOUNT = '{threads.SPIN_COUNT}'" in stderr, (extra, stderr[-2000:])
    # more codec threads than cores, and a launcher that does not say how many ranks
    # share the node: the workers sleep at once
    for extra in ({"MPI_LOCALNRANKS": "1", threads.ENV: str(cores + 1)}, {"PMI_RANK": "0"}):
        got, stderr = _run(_child_env_without_a_launcher(**extra), clean=False)
        assert got["changed_after_codec"] == [], got
        if got["layer"] == "omp":
            assert "OMP_WAIT_POLICY = 'PASSIVE'" in stderr, stderr[-2000:]
            assert f"GOMP_SPINCOUNT = '{threads.SPIN_COUNT}'" not in stderr, (extra,
                                                                              stderr[-2000:])


def test_owns_its_cores_counts_every_rank_of_the_node():
    from mpicomp import threads

    cores = threads.usable_cores()
    assert threads.owns_its_cores({}) is True
    assert threads.owns_its_cores({"MPI_LOCALNRANKS": str(cores)}) is True
    assert threads.owns_its_cores({"MPI_LOCALNRANKS": str(cores + 1)}) is False
    assert threads.owns_its_cores({"MPI_LOCALNRANKS": "1", "MPICOMP_THREADS": str(cores + 1)}
                                  ) is False
    assert threads.owns_its_cores({"SLURM_PROCID": "3"}) is False
    assert threads.owns_its_cores({"SLURM_PROCID": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
                                  ) is True

TORCH_CHILD = r"""
import json
import numpy as np
import torch
import mpicomp
torch.set_num_threads(1)
torch.ones(256, 256) @ torch.ones(256, 256)  # PyTorch's threads start (as a model's would)
c = mpicomp.get_codec("bitplane", rate=8.25)
x = np.linspace(-1, 1, 1 << 17, dtype=np.float32)
c.decode(c.encode(x), out=np.empty_like(x))
print(json.dumps({"torch_threads": torch.get_num_threads()}))
"""


def test_pytorchs_thread_count_survives_the_first_codec_call():
    """Numba's OpenMP layer, as it starts, sets the OpenMP thread count that PyTorch reads:
    a program's torch.set_num_threads(1) stays 1 after mpicomp's first kernel ran."""
    import pytest

    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",
                                                            "NUMBA_NUM_THREADS")}
    env["NUMBA_NUM_THREADS"] = "2"  # more than the program's 1, on any machine
    proc = subprocess.run([sys.executable, "-c", TORCH_CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"torch_threads": 1}


PLAIN_CALLS = r"""
import json, sys
import numpy as np
from mpi4py import MPI
import mpicomp

def fresh():  # a communicator's first call of each method (its limits not settled yet)
    return mpicomp.Comm(MPI.COMM_WORLD)  # one rank: collectives plain; p2p under auto plain

x3, y3 = np.arange(3, dtype=np.int8), np.zeros(3, np.int8)
f, g = np.ones(1024, np.float32), np.zeros(1024, np.float32)
req = MPI.COMM_WORLD.Isend(x3, 0, 1)
fresh().Recv(y3, 0, 1)
req.Wait()
req = fresh().Isend(f, 0, 2)
fresh().Probe(0, 2)
fresh().Irecv(g, 0, 2).Wait()
req.Wait()
fresh().Sendrecv(f, 0, 3, g, 0, 3)
fresh().Sendrecv_replace(g, 0, 4, 0, 4)
fresh().Allreduce(f, g)
fresh().Bcast(f)
fresh().Allreduce(np.zeros(0, np.int32), np.zeros(0, np.int32))
assert fresh().Iprobe() is False and y3.tolist() == [0, 1, 2]
print(json.dumps({"numba": "numba" in sys.modules}))
"""


def test_calls_that_go_plain_load_no_numba():
    """A first call that goes plain (every method, any dtype) costs what plain MPI's does:
    nothing on the way asks Numba anything (its import alone takes 0.2 s or more)."""
    proc = subprocess.run([sys.executable, "-c", PLAIN_CALLS], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"numba": False}
