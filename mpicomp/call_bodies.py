"""What each compressed collective runs once it is screened and agreed: its body and plan.

A module of :mod:`mpicomp.calls` describes a call (a
:class:`mpicomp.pipeline.Call`) and binds one of these functions to the
call's buffers with :func:`functools.partial`; the pipeline then calls it
on the private communicator, so the call flows down from the pipeline to
here and on to :mod:`mpicomp.algorithms` and :mod:`mpicomp.collectives`,
never back up to :mod:`mpicomp.calls`.

* a **body**, ``body(ctx, private)``, runs the compressed algorithm in
  ``ctx`` on ``private`` (a :class:`mpicomp.private_comm.PrivateComm`, whose
  layout decides the node-aware forms) and returns the stats' algorithm
  name, or None for the method's own;
* a **plan**, ``plan(call, rec)``, completes a call whose algorithm or
  arguments matter only when it compresses, after the screen: it returns
  the call with its body (``dataclasses.replace``), or the plain-MPI reason.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from . import algorithms, collectives, tolerance
from .algorithms import ring
from .algorithms.common import Ctx, screens_in_encoder
from .ops import op_name

if TYPE_CHECKING:
    from .buffers import Buf
    from .policy import Resolved
    from .private_comm import PrivateComm
    from .stats import Recorder

__all__ = ["SPECULATIVE", "allgather", "allgatherv", "alltoall", "bcast", "cast_order", "gather",
           "plan_allreduce", "plan_reduce", "plan_reduce_scatter", "scatter"]

#: allreduce algorithms that screen their data speculatively (host buffers, a codec
#: with guarded encodes): their encoders replace the agreement step's scan
SPECULATIVE = frozenset({"ring", "direct"})


# -- bodies ------------------------------------------------------------------------------
def allgather(ctx: Ctx, private: PrivateComm, x: np.ndarray, out: np.ndarray,
              counts: list[int], displs: list[int], pol: Resolved,
              on_device: bool) -> str | None:
    """Allgather: node-aware where nodes hold several ranks, else the direct allgather (few
    ranks, small blocks) or the ring's (``algorithm="ring"`` or ``"direct"`` chooses)."""
    if private.local_ranks(pol, on_device):
        collectives.allgather_nodes(ctx, x, out, private.layout().node_of,
                                    *private.node_comms())
        return "allgather-hierarchical"
    ran = collectives.allgatherv(ctx, x, out, counts, displs, _allgather_algorithm(pol))
    return f"allgather-{ran}"


def allgatherv(ctx: Ctx, private: PrivateComm, x: np.ndarray | None, out: np.ndarray,
               counts: list[int], displs: list[int], pol: Resolved) -> None:
    collectives.allgatherv(ctx, x, out, counts, displs, _allgather_algorithm(pol))


def _allgather_algorithm(pol: Resolved) -> str:
    """A data-movement allgather's ``algorithm`` setting: ``"ring"``, ``"direct"`` or (any
    other) ``"auto"``."""
    return pol.algorithm if pol.algorithm in ("ring", "direct") else "auto"


def alltoall(ctx: Ctx, private: PrivateComm, x: np.ndarray, out: np.ndarray, n: int,
             pol: Resolved, on_device: bool) -> str | None:
    local = private.local_ranks(pol, on_device)
    collectives.alltoall(ctx, x, out, n, local)
    return "alltoall-hierarchical" if local else None


def bcast(ctx: Ctx, private: PrivateComm, buf: Buf, root: int, pol: Resolved) -> str | None:
    """Bcast: node-aware where nodes hold several ranks, else down the chain of pieces."""
    if private.local_ranks(pol, buf.on_device):
        collectives.bcast_nodes(ctx, buf.data(), root, private.layout().node_of,
                                *private.node_comms())
        return "bcast-hierarchical"
    collectives.bcast(ctx, buf.data(), root)
    return None


def gather(ctx: Ctx, private: PrivateComm, x: np.ndarray, out: np.ndarray | None,
           root: int) -> None:
    collectives.gather(ctx, x, out, root)


def scatter(ctx: Ctx, private: PrivateComm, x: np.ndarray | None, out: np.ndarray | None,
            n: int, root: int) -> None:
    collectives.scatter(ctx, x, out, n, root)


def _allreduce(ctx: Ctx, private: PrivateComm, algorithm: str, x: Any, out: Any, op: MPI.Op,
               rate: float) -> str | tuple[str, str]:
    if algorithm == "cast_order":
        cast_order(ctx, x, out, op)
    elif algorithm == "homomorphic":
        fmt = algorithms.homomorphic.allreduce(ctx, x, out, rate)
        return algorithm, f"k={fmt.k} bits, {fmt.bits_per_value:.3g} bits/value"
    elif algorithm == "hierarchical":
        algorithms.hierarchical.allreduce(ctx, x, out, *private.node_comms(),
                                          private.rail_comm())
    else:
        algorithms.BY_NAME[algorithm].allreduce(ctx, x, out)
    return algorithm


def _reduce(ctx: Ctx, private: PrivateComm, x: Any, out: Any, root: int) -> str:
    ring.reduce(ctx, x, out, root)
    return "ring"


def _reduce_scatter(ctx: Ctx, private: PrivateComm, x: Any, out: Any, counts: list[int],
                    direct: bool) -> str:
    if direct:
        collectives.reduce_scatter_direct(ctx, x, out, counts)
        return "direct"
    collectives.reduce_scatter(ctx, x, out, counts)
    return "ring"


def cast_order(ctx: Ctx, x: Any, out: Any, op: MPI.Op) -> None:
    """MAX/MIN of cast values: 16-bit codes mapped to order-preserving int16, one MPI MAX/MIN.

    ``cast`` is monotonic, so the max of the casts is the cast of the max:
    the result is exactly ``decode(encode(max over ranks))``, the same bits
    on every rank.
    """
    keys = ctx.encode(x, "send").view(np.int16)
    ctx.memory.order_keys(keys)
    result = ctx.wire("recv", keys.nbytes).view(np.int16)
    with ctx.rec.mpi():
        ctx.comm.Allreduce(keys, result, op=op)
    ctx.rec.sent(keys.nbytes)
    ctx.memory.order_keys(result)  # the map is its own inverse
    ctx.decode(result.view(np.uint8), out)


# -- plans -------------------------------------------------------------------------------
def plan_allreduce(call: Any, rec: Recorder, *, sbuf: Buf, rbuf: Buf) -> Any:
    """Allreduce's algorithm (the model's choice under ``auto``, made while screening),
    what the ranks agree on, and whether the encoders screen. SUM runs the algorithm
    the policy names; MAX and MIN of the ``cast`` codec run :func:`cast_order`."""
    x, out = sbuf.data(), rbuf.data()
    opname = op_name(call.op)
    on_device = sbuf.on_device
    algorithm = "cast_order" if opname != "SUM" else call.pol.algorithm
    if algorithm == "auto":
        pred = rec.prediction
        algorithm = (pred.algorithm if pred is not None
                     else algorithms.choose(x.nbytes, call.summands))
    if algorithm == "hierarchical" and on_device:
        # its plain node Reduce and Bcast take host buffers; a rank whose buffer is on
        # the host runs hierarchical, and the agreement reports the mismatch
        algorithm = "ring"
    guarded = algorithm in SPECULATIVE and screens_in_encoder(call.pol.codec, on_device)
    encodes = (tolerance.encodes(algorithm, call.summands) if call.pol.tolerance is not None
               else 1)
    body = functools.partial(_allreduce, algorithm=algorithm, x=x, out=out, op=call.op,
                             rate=call.pol.rate)
    return dataclasses.replace(
        call, local=x, guarded=guarded, body=body, encodes=encodes,
        settings=f"Allreduce n={x.size} op={opname} alg={algorithm}")


def plan_reduce(call: Any, rec: Recorder, *, sbuf: Buf, rbuf: Buf | None, root: int) -> Any:
    """Reduce: SUM only, by the ring's reduce."""
    if op_name(call.op) != "SUM":
        return f"op {op_name(call.op)}: Reduce compresses only SUM"
    x = sbuf.data()
    out = rbuf.data() if rbuf is not None else None
    return dataclasses.replace(call, local=x, encodes=call.summands,
                               body=functools.partial(_reduce, x=x, out=out, root=root),
                               settings=f"Reduce n={x.size} root={root}")


def plan_reduce_scatter(call: Any, rec: Recorder, *, counts: list[int], rank: int, sbuf: Buf,
                        rbuf: Buf) -> Any:
    """Reduce_scatter(_block): SUM only; the ring's reduce-scatter, or with the algorithm
    ``allgather`` or ``direct`` the direct one (each rank's own block exact)."""
    name = call.collective
    if op_name(call.op) != "SUM":
        return f"op {op_name(call.op)}: {name} compresses only SUM"
    total = sum(counts)
    if sbuf.count < total:
        raise ValueError(f"{name}: sendbuf holds {sbuf.count} values, counts need {total}")
    if rbuf.count < counts[rank]:
        raise ValueError(f"{name}: recvbuf holds {rbuf.count} values, needs {counts[rank]}")
    x = sbuf.data(0, total)
    body = functools.partial(_reduce_scatter, x=x, out=rbuf.data(), counts=counts,
                             direct=call.pol.algorithm in ("allgather", "direct"))
    return dataclasses.replace(call, local=x, body=body, encodes=max(call.summands - 1, 1),
                               settings=f"{name} counts={counts}")
