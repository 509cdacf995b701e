"""The screen: before anything is sent, the rank-consistent reasons for a call to go plain.

The first of a call's three decisions (the others: the agreement step and
the verdict, :mod:`mpicomp.decision.agreement`). :meth:`Screen.screen`
returns None (go on compressed) or the plain-MPI reason that
``comm.stats()`` and ``MPICOMP_DEBUG`` report: codec ``none``, one rank, a
buffer the codec cannot take, an op it cannot honour, below the threshold,
and, under the codec ``auto`` or the algorithm ``auto``, the performance
model's verdict (:class:`mpicomp.decision.predictor.Predictor`). Each
reason rests on what every rank knows alike (the settings, the type
signature, the count), so every rank screens a collective the same way.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mpi4py import MPI

from .. import topology
from ..backend.placement import Place
from ..buffers import Buf
from ..ops import op_name
from ..policy import Resolved
from ..settings import P2P_AUTO, CommSettings
from ..stats import Recorder, below_threshold
from .predictor import Predictor

if TYPE_CHECKING:
    from ..private_comm import PrivateComms

__all__ = ["ONE_NODE", "P2P_AUTO", "Screen", "op_name"]

#: why the codec ``auto`` leaves host buffers of a one-node communicator to plain MPI
ONE_NODE = "codec auto: one node (plain MPI through shared memory is faster)"

class Screen:
    """A communicator's screen (see the module docs): its ``settings``, its private
    ``privates`` (the layout, the settings check) and the model's ``predictor``."""

    def __init__(self, settings: CommSettings, privates: PrivateComms,
                 predictor: Predictor) -> None:
        self.settings = settings
        self.privates = privates
        self.predictor = predictor
        self.layout: topology.Layout | None = None

    def screen(
        self, pol: Resolved, bufs: Sequence[Buf], nbytes: int, op: MPI.Op | None = None,
        collective: bool = True, method: str | None = None, rec: Recorder | None = None,
        blocking: bool = True,
    ) -> str | None:
        """Why this call must go to plain MPI (rank-consistent reasons), or None.

        ``method`` names a collective the model can predict: with the codec
        ``auto`` it decides whether to compress, and for an allreduce with the
        algorithm ``auto`` it picks the algorithm (kept in ``rec``).
        Point-to-point calls (not ``collective``) never compress under ``auto``:
        a receive may be posted before the sender's side calibrated. A
        ``blocking`` call prices a variable codec's streams at the ratio its
        kind of call learned (:mod:`mpicomp.ratios`).
        """
        _same_memory(bufs)
        if collective and not self.settings.agreed:
            self.settings.check(self.privates.main().comm)
        if not pol.enabled:
            return "codec none"
        if collective and self.settings.comm.Get_size() == 1:
            return "single rank"
        if (pol.auto and method is not None and not any(b.on_device for b in bufs)
                and self._one_node(pol)):
            # before the buffers' and the op's own reasons: on one node every host call
            # of the codec auto goes plain, so the first such call opens the fast path
            return ONE_NODE
        for b in bufs:
            if not b.compressible and not b.veto:
                return b.reason
        # (a vetoed buffer screens by its type signature, as every other rank's does; its
        # veto sends the call plain at the agreement, on every rank alike)
        dtypes = {b.dtype for b in bufs}
        if len(dtypes) > 1:
            raise TypeError(f"send and receive buffers must have the same dtype, got {dtypes}")
        dt = bufs[0].dtype
        if dt not in pol.codec.dtypes:
            return f"codec {pol.codec.codec_id} does not take {dt}"
        if op is not None:
            name = op_name(op)
            if name != "SUM" and not (name in ("MAX", "MIN") and pol.codec.codec_id == "cast"):
                return f"op {name} cannot be computed on {pol.codec.codec_id} streams"
        if pol.auto and not collective:
            return P2P_AUTO
        if nbytes < pol.threshold:
            return below_threshold(nbytes, pol.threshold)
        if method is not None and (pol.auto or (method == "Allreduce"
                                                and pol.algorithm == "auto")):
            if pol.auto and not bufs[0].on_device and self._one_node(pol):
                return ONE_NODE
            return self.predictor.consult(method, pol, nbytes, dt, bufs[0].on_device, rec,
                                          blocking)
        return None

    def _one_node(self, pol: Resolved) -> bool:
        """Whether the communicator lies on one node (collective the first time): shared
        memory moves bytes faster than a CPU codec encodes them, so the codec ``auto``
        sends every host collective plain, without a probe (the default policy's fast
        path then takes them all)."""
        if self.layout is None:
            self.layout = topology.layout(self.privates.main().comm)
        if self.layout.spans_nodes:
            return False
        if pol is self.settings.default:
            self.settings.fast.every_collective_plain(ONE_NODE)
        return True


def _same_memory(bufs: Sequence[Buf]) -> None:
    """ValueError when a call mixes host and device buffers (they must be all one or other)."""
    kinds = {b.on_device for b in bufs if b.place is not Place.FOREIGN}
    if len(kinds) > 1:
        raise ValueError(
            "the buffers of one call must all be host (NumPy) or all device (CUDA) memory, "
            "got a mix"
        )
