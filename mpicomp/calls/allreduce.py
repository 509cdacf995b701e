"""Allreduce and Iallreduce: one of the algorithms of :mod:`mpicomp.algorithms`.

SUM runs the algorithm the policy names, or under ``auto`` the model's
choice (:mod:`mpicomp.model`, made while screening); MAX and MIN of the
``cast`` codec run :func:`mpicomp.call_bodies.cast_order` (one plain MAX/MIN
of order-preserving 16-bit keys). The ring screens its data in its encoders
(speculative: the agreement scans nothing) where the codec can. The plan,
once the call is screened: :func:`mpicomp.call_bodies.plan_allreduce`.
"""
from __future__ import annotations

import functools
from typing import Any

from mpi4py import MPI

from .. import call_bodies
from ..buffers import is_in_place, parse, same_count
from ..pipeline import Call, Pipeline

__all__ = ["describe"]


def describe(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, op: MPI.Op, settings: dict[str, Any],
             nonblocking: bool = False) -> Call:
    """``comm.Allreduce`` (or, ``nonblocking``, ``comm.Iallreduce``)."""
    name = "Iallreduce" if nonblocking else "Allreduce"
    pol = pipeline.settings.for_call(settings)
    rbuf = parse(recvbuf, "recvbuf")
    sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")
    same_count(sbuf, rbuf, name)
    return Call(name, "Allreduce", pol, [sbuf, rbuf], sbuf.nbytes, MPI.Intracomm.Allreduce,
                (sendbuf, recvbuf, op), op=op, summands=pipeline.comm.Get_size(),
                plan=functools.partial(call_bodies.plan_allreduce, sbuf=sbuf, rbuf=rbuf),
                nonblocking=MPI.Intracomm.Iallreduce if nonblocking else None)
