"""``python -m mpicomp warmup`` leaves nothing for a job to compile.

With an empty ``NUMBA_CACHE_DIR`` the warmup compiles every CPU kernel for
float32 (float64 takes the same paths, at twice the test's time); a 2-rank
job then runs every codec through every compressed collective and a gradient
reducer's error feedback, and must add no file to the cache (a kernel or
argument type the warmup missed would be compiled, and cached, there).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launcher import find_mpiexec  # tests/launcher.py

JOB = r"""
import numpy as np
from mpi4py import MPI
import mpicomp
p = MPI.COMM_WORLD.Get_size()
cases = [dict(codec="bitplane", rate=8.25), dict(codec="zfp", rate=8), dict(codec="zfp", rate=4),
         dict(codec={"id": "zfp", "dims": 3, "rate": 8}), dict(codec="cast", rate=16),
         dict(codec={"id": "cast", "dtype": "bfloat16"})]
n = 1 << 14
x = np.linspace(-1, 1, n).astype(np.float32)
y = np.empty_like(x)
for c in cases:
    mc = mpicomp.Comm(MPI.COMM_WORLD, threshold=0, **c)
    for alg in ("ring", "allgather", "recursive_doubling"):
        mc.Allreduce(x, y, algorithm=alg)
        z = x.copy()
        mc.Allreduce(MPI.IN_PLACE, z, algorithm=alg)
    g = np.empty(n * p, np.float32)
    mc.Allgather(x, g)
    mc.Alltoall(np.tile(x, p), g)
    mc.Bcast(x.copy(), root=0)
    mc.Gather(x, g if mc.rank == 0 else None, root=0)
    mc.Scatter(np.tile(x, p) if mc.rank == 0 else None, y, root=0)
    mc.Reduce_scatter_block(x, np.empty(n // p, np.float32))
    mc.Reduce(x, y if mc.rank == 0 else None, root=0)
    if mc.rank < 2:
        mc.Sendrecv(x, 1 - mc.rank, recvbuf=y, source=1 - mc.rank)
    mc.Iallreduce(x, y).Wait()
    assert mc.stats()["Allgather"]["compressed"] == 1
mc = mpicomp.Comm(MPI.COMM_WORLD, threshold=0, algorithm="homomorphic", rate=16.25)
mc.Allreduce(x, y)
assert mc.stats()["Allreduce"]["compressed"] == 1
from mpicomp.training import GradientReducer
for c in (dict(codec="bitplane", rate=4.25), dict(codec="cast")):  # (error feedback's passes)
    red = GradientReducer(MPI.COMM_WORLD, error_feedback="loco", threshold=0, **c)
    for _ in range(2):
        red.reduce({"w": x.copy()})
"""


pytestmark = pytest.mark.slow  # left out of make test-quick


def _files(root: Path) -> set[str]:
    return {str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()}


def test_after_warmup_a_job_compiles_nothing(comm, tmp_path):
    if comm.Get_size() > 1:
        pytest.skip("starts processes of its own")
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter or on PATH")
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPICOMP_", "PMI_", "MPI_"))}
    env.update(NUMBA_CACHE_DIR=str(cache), MPIEXEC_TIMEOUT="600")
    proc = subprocess.run([sys.executable, "-m", "mpicomp", "warmup", "--dtypes", "float32"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "zfp 1D rate 4 (table)" in proc.stdout and "total" in proc.stdout, proc.stdout
    warmed = _files(cache)
    assert any(name.endswith(".nbc") for name in warmed), warmed
    proc = subprocess.run([str(mpiexec), "-n", "2", sys.executable, "-c", JOB], env=env,
                          capture_output=True, text=True, timeout=660)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _files(cache) == warmed, sorted(_files(cache) - warmed)



_PROBE = r"""
import fcntl, os
from mpicomp.kernels.launch import lock_path
fd = os.open(lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("held")
else:
    print("free")
"""


def test_compile_lock_is_one_per_cache_folder(tmp_path, monkeypatch):
    """Processes compiling into one cache wait for each other's first compile; processes with
    caches of their own (NUMBA_CACHE_DIR) do not."""
    import tempfile

    import numba

    from mpicomp.kernels.launch import compile_lock

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the lock files of this test alone
    monkeypatch.setattr(tempfile, "tempdir", None)  # (gettempdir keeps its first answer)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "a"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPICOMP_")}

    def probe(**cache):
        return subprocess.run([sys.executable, "-c", _PROBE], env=dict(env, **cache),
                              capture_output=True, text=True, timeout=120).stdout.strip()

    with compile_lock():
        assert probe(NUMBA_CACHE_DIR=str(tmp_path / "a")) == "held"
        assert probe(NUMBA_CACHE_DIR=str(tmp_path / "b")) == "free"
        assert probe() == "free"  # Numba's default cache, beside each kernel file
    assert probe(NUMBA_CACHE_DIR=str(tmp_path / "a")) == "free"
