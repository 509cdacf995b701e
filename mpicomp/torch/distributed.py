"""PyTorch's default process group from an MPI communicator: ``mpiexec`` instead of torchrun.

::

    import mpicomp.torch as mt
    mt.init_process_group("gloo")          # under mpiexec -n 4 python train.py
    model = torch.nn.parallel.DistributedDataParallel(model)

Rank and world size are the communicator's. The rendezvous is a
``torch.distributed.TCPStore`` on the communicator's rank 0: it listens on a
port the operating system picks (no port to choose, none to collide), and
MPI broadcasts the port to the others. Rank 0's address is the loopback
when every rank runs on its host, else its host name (which the other hosts
resolve, as MPI's own launcher does). ``MASTER_ADDR`` and ``MASTER_PORT``,
where both are set (a torchrun-style launch), are used instead.
"""
from __future__ import annotations

import datetime
import os
import socket
from typing import Any

__all__ = ["init_process_group"]


def init_process_group(backend: str = "gloo", comm: Any = None, **kw: Any) -> None:
    """``torch.distributed.init_process_group(backend, ...)`` for the ranks of ``comm``
    (``MPI.COMM_WORLD`` by default; collective over it): rank and world size from MPI, the
    rendezvous agreed through MPI. ``kw`` goes to PyTorch's call (``timeout``, ...)."""
    import torch.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    if not isinstance(backend, str):
        raise TypeError(f"init_process_group: backend must be a str, got {type(backend).__name__}")
    rank, size = comm.Get_rank(), comm.Get_size()
    # every rank learns whether any was refused before any waits on the store
    failure = None if dist.is_available() and not dist.is_initialized() else (
        "torch.distributed is not available in this PyTorch build" if not dist.is_available()
        else "PyTorch's default process group is already initialised")
    failures = comm.allgather(failure)
    if any(failures):
        first = next(f for f in failures if f)
        raise RuntimeError(f"init_process_group: {first} (rank {failures.index(first)})")
    host, port = _rendezvous(comm)
    timeout = kw.get("timeout", datetime.timedelta(minutes=30))
    store = None
    if rank == 0:
        store = dist.TCPStore(host, port, size, is_master=True, timeout=timeout,
                              wait_for_workers=False)  # (the others learn its port below)
        port = store.port
    port = comm.bcast(port, root=0)
    if rank != 0:
        store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size, **kw)


def _rendezvous(comm: Any) -> tuple[str, int]:
    """(rank 0's address, its port: 0 to let the system pick one) on every rank."""
    env_host, env_port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if env_host and env_port:
        return env_host, int(env_port)
    hosts = comm.allgather(socket.gethostname())
    host = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
    return host, 0
