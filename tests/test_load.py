"""Load: many outstanding nonblocking compressed operations, many communicators.

At least 64 operations per rank in flight at once (mixed kinds and sizes),
finished in a random order that differs between ranks; 100 communicators
made by ``Split`` and ``Dup``, used compressed and freed. Results are
checked against plain MPI within the codec's bound, and the threads
mpicomp started are gone afterwards.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from launcher import find_mpiexec  # tests/launcher.py
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.codecs import get_codec

pytestmark = pytest.mark.slow  # left out of make test-quick

CODEC = {"id": "bitplane", "rate": 16.25}
C, A = bounds.codec_constants(get_codec(CODEC), np.dtype(np.float32))
SIZES = (256, 1024, 4096, 16384, 65536)  # float32 values: 1 KiB to 256 KiB


def _close(got: np.ndarray, ref: np.ndarray, summands: int) -> bool:
    g = summands * float(np.abs(ref).max() + 1.0)
    limit = (summands + 1) * (C * g + A) * 1.01 + summands * 1.2e-7 * g
    return bool(np.abs(got.astype(np.float64) - ref).max() <= limit)


def _mpicomp_threads() -> int:
    return sum(t.name.startswith("mpicomp") for t in threading.enumerate())


@pytest.fixture
def world(comm):
    """(comm, size, rank) in a job of 2 ranks or more."""
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks or more")
    return comm, comm.Get_size(), comm.Get_rank()


@pytest.mark.mpi
def test_64_outstanding_operations_finished_in_random_order(world):
    comm, p, r = world
    mc = mpicomp.Comm(comm.Dup(), codec=CODEC, threshold=0)
    plain = comm.Dup()
    rng = np.random.default_rng(1234)  # the same plan on every rank
    kinds = rng.choice(["Iallreduce", "Iallgather", "Ialltoall", "Ibcast", "p2p"], 72)
    sizes = rng.choice(SIZES, 72)
    ops = []  # (request(s), check)
    for i, (kind, n) in enumerate(zip(kinds, sizes)):
        n = int(n) // p * p
        x = np.random.default_rng(10_000 * r + i).standard_normal(n).astype(np.float32)
        if kind == "Iallreduce":
            y, ref = np.empty_like(x), np.empty_like(x)
            reqs = [mc.Iallreduce(x, y)]
            plain.Allreduce(x, ref)
            ops.append((reqs, (y, ref, p)))
        elif kind == "Iallgather":
            y, ref = np.empty(n * p, np.float32), np.empty(n * p, np.float32)
            reqs = [mc.Iallgather(x, y)]
            plain.Allgather(x, ref)
            ops.append((reqs, (y, ref, 1)))
        elif kind == "Ialltoall":
            y, ref = np.empty_like(x), np.empty_like(x)
            reqs = [mc.Ialltoall(x, y)]
            plain.Alltoall(x, ref)
            ops.append((reqs, (y, ref, 1)))
        elif kind == "Ibcast":
            root = i % p
            y = x.copy()
            ref = x.copy()
            reqs = [mc.Ibcast(y, root=root)]
            plain.Bcast(ref, root=root)
            ops.append((reqs, (y, ref, 1)))
        else:
            y = np.empty_like(x)
            reqs = [mc.Irecv(y, (r - 1) % p, tag=i), mc.Isend(x, (r + 1) % p, tag=i)]
            ref = np.random.default_rng(10_000 * ((r - 1) % p) + i).standard_normal(n)
            ops.append((reqs, (y, ref.astype(np.float32), 1)))
    assert len(ops) >= 64
    assert _mpicomp_threads() >= 1
    order = np.random.default_rng(99 + r).permutation(len(ops))  # differs between ranks
    for k in order:
        reqs, _ = ops[k]
        for req in reqs:
            req.Wait()
    for k, (_, (y, ref, summands)) in enumerate(ops):
        assert _close(y, ref, summands), (k, kinds[k], sizes[k])
    inner = mc
    mc.Free()
    plain.Free()
    assert inner._privates.executor is None


@pytest.mark.mpi
def test_100_communicators_made_used_and_freed(world):
    comm, p, r = world
    base = mpicomp.Comm(comm.Dup(), codec=CODEC, threshold=0)
    threads_before = _mpicomp_threads()
    x = np.random.default_rng(r).standard_normal(4096).astype(np.float32)
    made = 0
    for i in range(50):
        for sub in (base.Split(color=r % 2 if p > 2 else 0, key=r), base.Dup()):
            made += 1
            assert isinstance(sub, mpicomp.Comm)
            y, ref = np.empty_like(x), np.empty_like(x)
            sub.Allreduce(x, y)
            MPI.Intracomm.Allreduce(sub, x, ref)  # plain, on the same communicator
            assert _close(y, ref, sub.Get_size())
            if i % 10 == 0:  # some use the worker thread too
                sub.Iallreduce(x, y).Wait()
            sub.Free()
    assert made == 100
    base.Free()
    assert _mpicomp_threads() <= threads_before


def test_soak_short():
    """The short soak (CI): 300 mixed operations on 4 ranks, results, memory and threads checked.
    The long one is ``mpiexec -n 4 python -m mpicomp.bench soak --ops 10000``."""
    import subprocess
    import sys

    mpiexec = find_mpiexec() or "mpiexec"
    proc = subprocess.run([mpiexec, "-n", "4", sys.executable, "-m", "mpicomp.bench", "soak",
                           "--ops", "300", "--max-mib", "1", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "# soak: OK" in proc.stdout
