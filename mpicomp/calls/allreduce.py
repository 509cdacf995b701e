"""Allreduce and Iallreduce: one of the algorithms of :mod:`mpicomp.algorithms`.

SUM runs the algorithm the policy names, or under ``auto`` the model's
choice (:mod:`mpicomp.model`, made while screening); MAX and MIN of the
``cast`` codec run :func:`cast_order` (one plain MAX/MIN of order-preserving
16-bit keys). The ring screens its data in its encoders (speculative: the
agreement scans nothing) where the codec can.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from .. import algorithms, tolerance
from ..algorithms.common import Ctx, screens_in_encoder
from ..buffers import is_in_place, parse, same_count
from ..decision import op_name
from ..pipeline import Call, Pipeline

if TYPE_CHECKING:
    from ..engine import Engine
    from ..stats import Recorder

__all__ = ["SPECULATIVE", "call", "cast_order"]

#: allreduce algorithms that screen their data speculatively (host buffers, a codec
#: with guarded encodes): their encoders replace the agreement step's scan
SPECULATIVE = frozenset({"ring"})


def call(pipeline: Pipeline, sendbuf: Any, recvbuf: Any, op: MPI.Op, settings: dict[str, Any],
         nonblocking: bool = False) -> Call:
    """``comm.Allreduce`` (or, ``nonblocking``, ``comm.Iallreduce``)."""
    name = "Iallreduce" if nonblocking else "Allreduce"
    pol = pipeline.decision.policy(settings)
    rbuf = parse(recvbuf, "recvbuf")
    sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")
    same_count(sbuf, rbuf, name)
    return Call(name, "Allreduce", pol, [sbuf, rbuf], sbuf.nbytes, MPI.Intracomm.Allreduce,
                (sendbuf, recvbuf, op), op=op, summands=pipeline.comm.Get_size(), plan=_plan,
                nonblocking=MPI.Intracomm.Iallreduce if nonblocking else None)


def _plan(call: Call, rec: Recorder) -> Call:
    """The algorithm (the model's choice under ``auto``, made while screening), what the
    ranks agree on, and whether the encoders screen."""
    sbuf, rbuf = call.bufs
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
    guarded = (algorithm in SPECULATIVE
               and screens_in_encoder(call.pol.codec, on_device))
    rate, op = call.pol.rate, call.op

    def body(ctx: Ctx, engine: Engine) -> str | tuple[str, str]:
        if algorithm == "cast_order":
            cast_order(ctx, x, out, op)
        elif algorithm == "homomorphic":
            fmt = algorithms.homomorphic.allreduce(ctx, x, out, rate)
            return algorithm, f"k={fmt.k} bits, {fmt.bits_per_value:.3g} bits/value"
        elif algorithm == "hierarchical":
            algorithms.hierarchical.allreduce(ctx, x, out, *engine.node_comms(),
                                              engine.rail_comm())
        else:
            getattr(algorithms, algorithm).allreduce(ctx, x, out)
        return algorithm

    encodes = (tolerance.encodes(algorithm, call.summands) if call.pol.tolerance is not None
               else 1)
    return dataclasses.replace(
        call, local=x, guarded=guarded, body=body, encodes=encodes,
        settings=f"Allreduce n={x.size} op={opname} alg={algorithm}")


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
