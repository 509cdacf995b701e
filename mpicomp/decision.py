"""The decision of every call: compressed or plain MPI, and why, the same on every rank.

One :class:`Decider` per communicator takes the decision in three steps, in
the order a call meets them:

1. :meth:`~Decider.screen`, before anything is sent: the rank-consistent
   reasons to go plain (codec ``none``, one rank, a buffer the codec cannot
   take, an op it cannot honour, below the threshold) and, under the codec
   ``auto`` or the algorithm ``auto``, the performance model
   (:mod:`mpicomp.model` on this job's :mod:`mpicomp.calibration`, measured
   at the same call on every rank);
2. :meth:`~Decider.agree`, the agreement step (:func:`agree`, below): one
   MAX allreduce finds NaN/Inf or values that could overflow on any rank, and
   settings that differ between ranks;
3. :meth:`~Decider.verdict`, after a speculative call whose encoders
   screened the data themselves.

Each step returns None (go on compressed) or the plain-MPI reason that
``comm.stats()`` and ``MPICOMP_DEBUG`` report.

**The agreement step.** Whether a collective can be compressed depends on
data only one rank sees (a NaN, a value so large that a sum of ``p`` of them
overflows) and on arguments every rank passes for itself (count, dtype, op,
codec, rate). If ranks decided alone, one could take the compressed path
while another took plain MPI, and both would wait forever. So before a
compressed collective the ranks make one MAX allreduce of five float64
numbers: the largest magnitude in this rank's input (+Inf for NaN/Inf), a
48-bit fingerprint of the call's settings and its negation (so that ``max``
and ``-max(-x)`` give the largest and the smallest fingerprint: they differ
exactly when two ranks disagree), a variable codec's stream ratio that
the previous call of this kind measured (:mod:`mpicomp.ratios`; -1: none),
and a veto: this rank's number if its buffer cannot be compressed although
its type signature could (a derived datatype with gaps, where the other
ranks pass a plain array: MPI allows any datatypes with the same type
signature; -1: none). The screen before it decides from the signature's
element type and count, which every rank shares, so every rank reaches
this step or none does.
Every rank gets the same numbers back and therefore takes the same decision
or raises the same error. A speculative algorithm (the ring allreduce with a guarded codec, see
``Ctx.guarded``) passes no input (0): only the settings are agreed on, and
the encoders find unsafe data while it runs.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from . import calibration, model, topology
from .algorithms.common import Ctx
from .backend.device import DeviceMemory
from .backend.host import HostMemory
from .backend.placement import Place
from .buffers import Buf
from .errors import RankDisagreement
from .policy import Resolved
from .ratios import NONE, LearnedRatios
from .stats import Recorder, below_threshold

if TYPE_CHECKING:
    from .comm import Comm
    from .engine import Engine, Engines

__all__ = ["GUARD_TRIPPED", "ONE_NODE", "P2P_AUTO", "Decider", "agree", "fingerprint",
           "local_agreement", "op_name"]

#: why the codec ``auto`` leaves host buffers of a one-node communicator to plain MPI
ONE_NODE = "codec auto: one node (plain MPI through shared memory is faster)"
#: the plain-MPI reason of point-to-point calls under the codec auto
P2P_AUTO = "codec auto: point to point stays plain (name a codec to compress it)"
#: the plain-MPI reason when a speculative encoder flagged a value or partial sum near
#: the dtype's range although every input passed the agreement's overflow rule
GUARD_TRIPPED = "overflow risk (an encoder met a value within the codec's headroom of the range)"

_OP_NAMES = ("SUM", "MAX", "MIN", "PROD", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
             "MAXLOC", "MINLOC", "REPLACE", "NO_OP")

#: how many distinct per-call settings a communicator keeps resolved
RESOLVED_KEPT = 64

#: how many of the model's predictions a communicator keeps
PREDICTIONS_KEPT = 256

#: largest finite value of each cast target
_CAST_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def op_name(op: MPI.Op) -> str:
    """The name of a predefined op (``"SUM"``), else ``"user-defined op"``."""
    for name in _OP_NAMES:
        if op == getattr(MPI, name, None):
            return name
    return "user-defined op"


class Decider:
    """A communicator's decisions, and what they rest on: the calibration and codec speeds.

    Filled at the same collective calls on every rank, so every rank holds
    the same numbers and takes the same decisions. ``comm`` is the
    :class:`mpicomp.Comm` it decides for (its size, default policy, private
    engine and fast path).
    """

    def __init__(self, comm: Comm, engines: Engines) -> None:
        self.comm = comm
        self.engines = engines
        #: per-call settings resolved before (by their items), at most RESOLVED_KEPT
        self._resolved: dict[tuple[tuple[str, Any], ...], Resolved] = {}
        self._cal: model.Calibration | None = None
        #: the model's predictions by (method, bytes, dtype, device, settings): a call of a
        #: size seen before asks the model nothing (cleared with a new calibration)
        self._predictions: dict[tuple[Any, ...], model.Prediction] = {}
        self.speeds: dict[tuple[str, str, bool], tuple[float, float]] = {}
        #: a variable codec's stream ratios, learned by blocking calls (mpicomp.ratios)
        self.ratios = LearnedRatios()
        self.layout: topology.Layout | None = None
        #: the ranks found their communicator-level settings equal (check_settings);
        #: until then no collective takes the fast path
        self.settings_agreed = False

    @property
    def cal(self) -> model.Calibration | None:
        """The calibration the model uses (None until a call or ``calibrate`` needed it)."""
        return self._cal

    @cal.setter
    def cal(self, cal: model.Calibration | None) -> None:
        self._cal = cal
        self._predictions.clear()

    # -- the settings: a call's, and those every rank must share --------------------------
    def policy(self, settings: dict[str, Any]) -> Resolved:
        """The settings a call with these keyword overrides uses (checked; resolved once per
        distinct hashable settings)."""
        if not settings:
            return self.comm._default or self.comm.resolved_policy()
        try:
            key = tuple(sorted(settings.items()))
            pol = self._resolved.get(key)
        except TypeError:  # an unhashable setting (a codec given as a dict)
            return self.comm.resolved_policy(**settings)
        if pol is None:
            pol = self.comm.resolved_policy(**settings)
            if len(self._resolved) < RESOLVED_KEPT:
                self._resolved[key] = pol
        return pol

    def check_settings(self) -> None:
        """See :meth:`mpicomp.Comm.check_settings`."""
        comm = self.comm
        pol = comm.resolved_policy()
        if comm.Get_size() > 1:
            private = self.engines.main().comm
            settings = pol.settings()
            fp = fingerprint(sorted(settings.items()))
            vec = np.array([fp, -fp], np.float64)
            out = np.empty_like(vec)
            private.Allreduce(vec, out, op=MPI.MAX)
            if out[0] != -out[1]:
                raise RankDisagreement(_settings_difference(private.allgather(settings)))
        self.settings_agreed = True
        comm._settings_agreed()

    # -- step 1: before anything is sent --------------------------------------------------
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
        if collective and not self.settings_agreed:
            self.check_settings()
        if not pol.enabled:
            return "codec none"
        if collective and self.comm.Get_size() == 1:
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
            return self._consult(method, pol, nbytes, dt, bufs[0].on_device, rec, blocking)
        return None

    def _consult(self, method: str, pol: Resolved, nbytes: int, dtype: np.dtype,
                 on_device: bool, rec: Recorder | None, blocking: bool = True) -> str | None:
        """Ask the model (collective the first time); the plain-MPI reason or None."""
        if pol.auto and not on_device and self._one_node(pol):
            return ONE_NODE
        # Before the agreement step, ranks may hold different per-call settings (an error
        # the agreement reports): so the codec speed used here is that of the
        # communicator's own codec, which every rank measured at the same call (a
        # per-call codec enters through its compression ratio).
        rho = (self.ratios.ratio(LearnedRatios.key(method, nbytes, dtype, on_device,
                                                   pol.description))
               if blocking and pol.codec.variable else None)
        key = (method, nbytes, dtype.name, on_device, pol.description, rho)
        pred = self._predictions.get(key)
        if pred is None:
            pred = self.predict(method, self.policy({}), nbytes, dtype, on_device,
                                codec=pol.codec, algorithm=pol.algorithm, rho=rho)
            if len(self._predictions) >= PREDICTIONS_KEPT:
                self._predictions.clear()
            self._predictions[key] = pred
        if rec is not None:
            rec.predicted(pred)
        if pol.auto and not pred.compress:
            return "model: plain MPI predicted faster"
        return None

    def _one_node(self, pol: Resolved) -> bool:
        """Whether the communicator lies on one node (collective the first time): shared
        memory moves bytes faster than a CPU codec encodes them, so the codec ``auto``
        sends every host collective plain, without a probe (the default policy's fast
        path then takes them all)."""
        if self.layout is None:
            self.layout = topology.layout(self.engines.main().comm)
        if self.layout.spans_nodes:
            return False
        if pol is self.comm._default:
            self.comm._every_collective_plain(ONE_NODE)
        return True

    # -- the model and what it rests on -----------------------------------------------
    def calibrate(self, pol: Resolved, force: bool = False) -> model.Calibration:
        """See :meth:`mpicomp.Comm.calibrate`."""
        private = self.engines.main().comm
        if force or self.cal is None:
            self.cal = calibration.obtain(private, topology.layout(private), force=force)
            self.speeds.clear()
        if pol.enabled:
            self.codec_speed(pol, np.dtype(np.float32), False)
        return self.cal

    def predict(self, method: str, pol: Resolved, nbytes: int, dtype: np.dtype,
                on_device: bool, codec: Any = None, algorithm: str | None = None,
                rho: float | None = None) -> model.Prediction:
        """The model's prediction with ``pol``'s codec speed (collective if not measured yet);
        ``rho``: a variable codec's stream ratio (None: its upper bound)."""
        if self.cal is None:
            self.calibrate(self.policy({}))
        speed = self.codec_speed(pol, np.dtype(dtype), on_device)
        assert self.cal is not None
        return model.predict(self.cal, method, nbytes, codec or pol.codec, dtype, speed,
                             algorithm or pol.algorithm, on_device=on_device, rho=rho)

    def codec_speed(self, pol: Resolved, dtype: np.dtype, on_device: bool) -> tuple[float, float]:
        """``pol``'s codec's (encode, decode) seconds per byte, measured once per job."""
        key = (json.dumps(pol.codec.get_config(), sort_keys=True), dtype.name, on_device)
        speed = self.speeds.get(key)
        if speed is None:
            engine = self.engines.main()
            assert self.cal is not None
            speed = calibration.codec_speed(engine.comm, self.cal, pol.codec, dtype,
                                            engine.memory(on_device))
            self.speeds[key] = speed
        return speed

    # -- step 2 and 3: the agreement, and the verdict of a speculative call ---------------
    def agree(self, engine: Engine, name: str, pol: Resolved, local: Any, dtype: np.dtype,
              settings: str, summands: int, memory: HostMemory | DeviceMemory) -> str | None:
        """The agreement step: None to go ahead compressed, else the plain-MPI reason."""
        return self.agreement(engine, name, pol, local, dtype, settings, summands, memory)[0]

    def agreement(self, engine: Engine, name: str, pol: Resolved, local: Any, dtype: np.dtype,
                  settings: str, summands: int, memory: HostMemory | DeviceMemory,
                  learning: tuple[Any, ...] | None = None,
                  veto: str = "") -> tuple[str | None, float]:
        """:meth:`agree`'s reason, and the largest magnitude of ``local`` over all ranks;
        ``learning``: the kind of a blocking call whose variable codec's stream ratio the
        ranks agree on here (:mod:`mpicomp.ratios`); ``veto``: why this rank cannot
        compress its buffer (a datatype with gaps, ...): the call goes plain everywhere."""
        local_max = memory.max_abs(local) if local is not None and not veto else 0.0
        pending = self.ratios.pending(learning) if learning is not None else NONE
        max_abs, ratio, vetoed = agree(engine.comm, name, local_max,
                                       f"{settings} {pol.description}", pending, bool(veto))
        if learning is not None:
            self.ratios.agreed(learning, ratio)
        if vetoed >= 0:
            return (veto or f"rank {vetoed}'s buffer cannot be compressed (its datatype, "
                            "layout or memory)"), 0.0
        if not math.isfinite(max_abs):
            return "nonfinite (NaN or Inf on some rank)", max_abs
        return _overflow_risk(pol, dtype, max_abs, summands), max_abs

    def verdict(self, engine: Engine, ctx: Ctx, name: str, pol: Resolved, local: Any,
                dtype: np.dtype, settings: str, summands: int) -> str | None:
        """After a compressed call: None when it stands, else the plain-MPI reason.

        A guarded call (speculative screening) whose encoders found unsafe data on
        some rank left its input intact, to be sent plain; the full agreement, with
        the scan of the input, names the reason the same way on every rank.
        """
        if not ctx.unsafe():
            return None
        return self.agree(engine, name, pol, local, dtype, settings, summands,
                          ctx.memory) or GUARD_TRIPPED


def agree(comm: MPI.Intracomm, op: str, local_max_abs: float, settings: str,
          ratio: float = NONE, veto: bool = False) -> tuple[float, float, int]:
    """The agreement allreduce on ``comm`` (see the module docs): the largest magnitude over
    all ranks (+Inf: some rank holds NaN/Inf), the largest ``ratio`` (a learned stream
    ratio, -1 for none) and the highest rank that vetoed compression (-1: none); the same
    :class:`RankDisagreement` on every rank where their ``settings`` differ."""
    fp = fingerprint(settings)
    vec = np.array([local_max_abs, fp, -fp, ratio, comm.Get_rank() if veto else -1.0],
                   np.float64)
    out = np.empty_like(vec)
    comm.Allreduce(vec, out, op=MPI.MAX)
    if out[1] != -out[2]:
        raise RankDisagreement(
            f"{op}: the ranks disagree on count, dtype, op or compression settings; "
            f"this rank (rank {comm.Get_rank()}) has {settings}"
        )
    return float(out[0]), float(out[3]), int(out[4])


def fingerprint(*parts: object) -> float:
    """A 48-bit hash of ``parts`` as a float64 (exact: below 2**53)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=6).digest()
    return float(int.from_bytes(digest, "little"))


def local_agreement(pol: Resolved, values: Any,
                    memory: HostMemory | DeviceMemory) -> tuple[str | None, float]:
    """A point-to-point message's own agreement (nothing to agree with): the plain-MPI
    reason when its values hold NaN/Inf or could overflow the codec, else None; and their
    largest magnitude."""
    m = memory.max_abs(values) if values.size else 0.0
    if not math.isfinite(m):
        return "nonfinite (NaN or Inf)", m
    return _overflow_risk(pol, values.dtype, m, 1), m


def _overflow_risk(pol: Resolved, dtype: np.dtype, max_abs: float, summands: int) -> str | None:
    """The plain-MPI reason when values of magnitude ``max_abs`` (``summands`` of them added)
    could overflow the codec's range, else None. A cast must hold the sum; the other codecs
    keep a factor of 8 of headroom (their transforms and rounding may grow a value)."""
    if pol.codec.codec_id == "cast":
        limit, factor = _CAST_MAX[pol.codec.get_config()["dtype"]], 1.0 * summands
    else:
        limit, factor = float(np.finfo(dtype).max), 8.0 * summands
    if max_abs * factor > limit:
        return f"overflow risk (max |x| {max_abs:.3g} x {factor:g} > {limit:.3g})"
    return None


def _same_memory(bufs: Sequence[Buf]) -> None:
    """ValueError when a call mixes host and device buffers (they must be all one or other)."""
    kinds = {b.on_device for b in bufs if b.place is not Place.FOREIGN}
    if len(kinds) > 1:
        raise ValueError(
            "the buffers of one call must all be host (NumPy) or all device (CUDA) memory, "
            "got a mix"
        )


def _settings_difference(per_rank: list[dict[str, str]]) -> str:
    """The error message naming each setting on which the ranks differ, and their values."""
    parts = []
    for key in per_rank[0]:
        values: dict[str, list[int]] = {}
        for rank, settings in enumerate(per_rank):
            values.setdefault(settings[key], []).append(rank)
        if len(values) > 1:
            shown = "; ".join(f"{value} on rank(s) {_ranks(ranks)}"
                              for value, ranks in values.items())
            parts.append(f"{key}: {shown}")
    return ("mpicomp: the ranks' compression settings differ (" + " | ".join(parts) + "): "
            "set the MPICOMP_* variables and the Comm(...) settings alike on every rank")


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8
                                            else "")
