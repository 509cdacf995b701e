"""Ranks whose settings differ get one clear error on every rank, not MPI's "Message truncated".

A communicator's settings (``Comm(...)`` arguments over ``MPICOMP_*``) are
compared once, at its first screened collective (``Comm.check_settings``):
a rank whose settings send a call plain at once would otherwise meet a
compressing rank's agreement step in a different MPI call.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from launcher import find_mpiexec  # tests/launcher.py

import mpicomp
from mpicomp.errors import RankDisagreement
from mpicomp.fastpath import install as shortcut


@pytest.mark.mpi(min_size=2)
def test_codec_differing_by_rank_is_named_on_every_rank(comm):
    mc = mpicomp.Comm(comm, codec="none" if comm.Get_rank() == 0 else "bitplane", threshold=0)
    x = np.ones(1 << 16, np.float32)
    with pytest.raises(RankDisagreement) as err:
        mc.Allreduce(x, np.empty_like(x))
    msg = str(err.value)
    assert 'codec: {"id": "none"} on rank(s) 0;' in msg, msg
    assert '"id": "bitplane"' in msg and "threshold" not in msg, msg


@pytest.mark.mpi(min_size=2)
def test_threshold_differing_by_rank_is_named_after_point_to_point_calls(comm):
    rank, p = comm.Get_rank(), comm.Get_size()
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=1024 if rank == p - 1 else 1 << 20)
    # point-to-point first: not collective, so it cannot check; the collective below does
    ring = np.full(10, rank, np.float32)
    got = np.empty_like(ring)
    mc.Sendrecv(ring, dest=(rank + 1) % p, recvbuf=got, source=(rank - 1) % p)
    assert np.all(got == (rank - 1) % p)
    x = np.ones(1 << 15, np.float32)  # 128 KiB: compressed on the last rank only
    with pytest.raises(RankDisagreement, match=r"threshold: 1048576 on rank\(s\) 0"):
        mc.Bcast(x)


@pytest.mark.mpi(min_size=2)
def test_equal_settings_pass_and_open_the_fast_path(comm):
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25, threshold=4096)
    tiny = np.ones(8, np.float32)
    mc.Allreduce(tiny, np.empty_like(tiny))  # the check runs here, once
    assert mc._settings.agreed
    if shortcut.COMPILED:
        assert mc._shortcut.limit == 4096
    out = np.empty(1 << 12, np.float32)
    mc.Allreduce(np.ones_like(out), out)
    assert np.all(out == comm.Get_size())


CHILD = """
import sys, numpy as np, mpicomp
x = np.ones(1 << 16, np.float32)
try:
    mpicomp.COMM_WORLD.Allreduce(x, np.empty_like(x))
    said = "no error"
except ValueError as e:
    said = f"{type(e).__name__} {e}"
with open(f"{sys.argv[1]}/{mpicomp.COMM_WORLD.Get_rank()}.txt", "w") as f:
    f.write(said)
"""


def test_a_per_rank_environment_is_named(comm, tmp_path):
    if comm.Get_size() > 1:
        pytest.skip("starts its own 2-rank job")
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPICOMP_", "PMI_", "MPI_"))}
    env.update(MPIEXEC_TIMEOUT="120", MPICOMP_ABORT_ON_ERROR="0")
    rank = [sys.executable, "-c", CHILD, str(tmp_path)]
    # each rank's own setting through env(1), not mpiexec's per-program option (MPICH's
    # -env, Open MPI's -x): one command line for both MPIs
    cmd = [mpiexec, "-n", "1", "env", "MPICOMP_CODEC=zfp", *rank, ":",
           "-n", "1", "env", "MPICOMP_CODEC=bitplane", *rank]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in (0, 1):
        line = (tmp_path / f"{r}.txt").read_text()
        assert line.startswith("RankDisagreement"), line
        assert 'codec: {"dims": 1, "id": "zfp", "rate": 16.0} on rank(s) 0;' in line, line
