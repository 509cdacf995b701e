"""mpicomp.torch.init_process_group: PyTorch's default process group from MPI under mpiexec."""
from __future__ import annotations

import datetime

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import mpicomp.torch as mt  # noqa: E402


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.mpi(min_size=2)
def test_init_process_group_from_mpi(comm, no_torchrun):
    """Rank and world size are MPI's, and gloo's collectives run among the same ranks."""
    mt.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        assert dist.get_rank() == comm.Get_rank()
        assert dist.get_world_size() == comm.Get_size()
        t = torch.full((5,), float(comm.Get_rank() + 1))
        dist.all_reduce(t)
        p = comm.Get_size()
        assert torch.equal(t, torch.full((5,), float(p * (p + 1) // 2)))
        # a refusal is the same on every rank: no rank waits on the store
        with pytest.raises(RuntimeError, match="already initialised"):
            mt.init_process_group("gloo")
    finally:
        dist.destroy_process_group()


@pytest.mark.mpi(min_size=2)
def test_init_process_group_on_a_subcommunicator(comm, no_torchrun):
    """The ranks of a communicator (here: the even or the odd ones) form the group."""
    sub = comm.Split(comm.Get_rank() % 2, comm.Get_rank())
    if sub.Get_size() < 2:
        sub.Free()
        pytest.skip("a group of one rank")
    mt.init_process_group("gloo", comm=sub, timeout=datetime.timedelta(seconds=60))
    try:
        assert (dist.get_rank(), dist.get_world_size()) == (sub.Get_rank(), sub.Get_size())
        t = torch.tensor([float(comm.Get_rank())])
        dist.all_reduce(t)
        ranks = np.arange(comm.Get_size())
        assert t.item() == float(ranks[ranks % 2 == comm.Get_rank() % 2].sum())
    finally:
        dist.destroy_process_group()
        sub.Free()


def test_a_backend_that_is_not_a_str_is_refused(no_torchrun):
    with pytest.raises(TypeError, match="backend must be a str"):
        mt.init_process_group(None)
