"""Nonblocking collectives: completion in any order, Test polling, errors surface at Wait."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp


def values(rank: int, n: int, salt: int = 0) -> np.ndarray:
    return np.random.default_rng(100 * salt + rank).standard_normal(n).astype(np.float32)


@pytest.mark.mpi
@pytest.mark.parametrize("waiter", ["mpi-waitall", "mpicomp-waitall", "test-loop", "reverse"])
def test_outstanding_collectives_finish_in_any_order(comm, waiter):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0)
    n = 5000
    x = values(r, n)
    outs = [np.empty(n, np.float32), np.empty(p * n, np.float32), np.empty(p * n, np.float32),
            values(r, n, salt=1), np.empty(n, np.float32)]
    xa = values(r, p * n, salt=2)
    reqs = [mc.Iallreduce(x, outs[0]), mc.Iallgather(x, outs[1]), mc.Ialltoall(xa, outs[2]),
            mc.Ibcast(outs[3], root=p - 1), mc.Iallreduce(x, outs[4], algorithm="ring")]
    if waiter == "mpi-waitall":
        MPI.Request.Waitall(reqs)
    elif waiter == "mpicomp-waitall":
        mpicomp.Request.Waitall(reqs)
    elif waiter == "test-loop":
        while not all(q.Test() for q in reqs):
            pass
    else:
        for q in reversed(reqs):
            q.Wait()
    # the same calls, blocking, as the reference
    refs = [np.empty(n, np.float32), np.empty(p * n, np.float32), np.empty(p * n, np.float32),
            values(r, n, salt=1), np.empty(n, np.float32)]
    mc.Allreduce(x, refs[0])
    mc.Allgather(x, refs[1])
    mc.Alltoall(xa, refs[2])
    mc.Bcast(refs[3], root=p - 1)
    mc.Allreduce(x, refs[4], algorithm="ring")
    stats = mc.stats()
    for got, ref in zip(outs, refs, strict=True):
        np.testing.assert_array_equal(got, ref)
    if p > 1:
        assert stats["Iallreduce"]["compressed"] == 2
        assert stats["Iallgather"]["compressed"] == 1 and stats["Ibcast"]["compressed"] == 1


@pytest.mark.mpi
def test_plain_nonblocking_calls_return_mpi_requests(comm):
    mc = mpicomp.Comm(comm, codec="none")
    x = np.ones(10, np.float32)
    y = np.empty_like(x)
    req = mc.Iallreduce(x, y)
    assert type(req) is MPI.Request
    req.Wait()
    assert np.all(y == comm.Get_size())


@pytest.mark.mpi
def test_background_errors_are_raised_by_wait_on_every_rank(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    if p == 1:
        return
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=0)
    x = np.ones(4000, np.float32)
    req = mc.Iallreduce(x, np.empty_like(x), rate=8.25 if r == 0 else 4.25)
    with pytest.raises(ValueError, match="ranks disagree"):
        req.Wait()
    req2 = mc.Iallreduce(x, np.empty_like(x), rate=8.25 if r == 0 else 4.25)
    with pytest.raises(ValueError, match="ranks disagree"):
        mpicomp.Request.Waitall([req2])


@pytest.mark.mpi(min_size=2)
def test_every_nonblocking_collective_checks_its_arguments_when_called_and_reports_its_path(
        comm):
    """A bad receive buffer raises at the call (nothing is left for the worker); a complete
    request of every nonblocking collective says whether its data went through a codec."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0)
    x = values(r, 1 << 12)
    with pytest.raises(ValueError, match="equal parts"):
        mc.Iallgather(x, np.empty(x.size * p + 1, np.float32))  # not p equal parts
    with pytest.raises(ValueError, match="Alltoall"):
        mc.Ialltoall(np.tile(x, p), np.empty(x.size * p + p, np.float32))  # counts differ
    gathered, swapped = np.empty(x.size * p, np.float32), np.empty(x.size * p, np.float32)
    b, y, z, sent = x.copy(), np.empty_like(x), np.empty_like(x), np.tile(x, p)
    # (every buffer held until the requests complete, as MPI requires)
    reqs = [mc.Iallgather(x, gathered), mc.Ialltoall(sent, swapped), mc.Ibcast(b, root=0),
            mc.Iallreduce(x, y), mc.Iallreduce(x, z, codec="none")]
    mpicomp.Request.Waitall(reqs)
    assert [getattr(q, "compressed", False) for q in reqs] == [True, True, True, True, False]
    st = mc.stats()
    assert all(st[m]["compressed"] == 1 for m in ("Iallgather", "Ialltoall", "Ibcast"))
