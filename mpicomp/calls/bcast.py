"""Bcast and Ibcast: a chain of compressed pieces from the root where it is not the
slower (:mod:`mpicomp.algorithms.chain`), else the root's stream in one ``MPI_Bcast``
(node-aware on a job whose nodes hold several ranks: compressed between nodes, plain inside
each)."""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import parse
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, buf: Any, root: int, settings: dict[str, Any],
             nonblocking: bool = False) -> Call:
    """``comm.Bcast`` (or, ``nonblocking``, ``comm.Ibcast``)."""
    pol = pipeline.settings.for_call(settings)
    b = parse(buf, "buf")
    local = b.data() if (b.compressible and pipeline.comm.Get_rank() == root) else None

    return Call("Ibcast" if nonblocking else "Bcast", "Bcast", pol, [b], b.nbytes,
                MPI.Intracomm.Bcast, (buf, root), local=local,
                settings=f"Bcast n={b.count} root={root}",
                body=functools.partial(call_bodies.bcast, buf=b, root=root, pol=pol),
                nonblocking=MPI.Intracomm.Ibcast if nonblocking else None)
