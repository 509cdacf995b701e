"""``mpicomp.Comm``: a drop-in ``mpi4py.MPI.Intracomm`` whose buffer methods compress.

``Comm(MPI.COMM_WORLD, codec="bitplane", rate=4)`` shares the wrapped
communicator's handle (as ``mpi4py.util.pkl5`` does): it *is* that
communicator, and every method it does not override behaves exactly as
mpi4py's. The overridden uppercase methods take the same arguments as
mpi4py's plus keyword-only ``codec``, ``rate``, ``threshold``,
``algorithm`` and ``tolerance``, which override the communicator's policy
for one call.

Each call goes one of two ways, and ``stats()`` / ``MPICOMP_DEBUG=1`` say
which and why:

* **plain MPI**, unchanged, when compression is off (codec ``none``), the
  buffer is below the threshold, not a float32/float64 NumPy array, the op
  cannot be honoured by the codec, the communicator has one rank, or (found
  by the agreement step, the same on every rank) some rank's data holds
  NaN/Inf or values whose sum could overflow;
* **compressed**: the codec's streams travel over a private duplicate of
  the communicator (so mpicomp's own messages never meet the caller's).

This class only holds a communicator's state and hands each call on: small
calls of the default policy go to plain MPI at once (the fast path,
:mod:`mpicomp.fastpath`: compiled methods put on this class, which run the
Python method for every call they do not take), every other call to its
module in :mod:`mpicomp.calls`, which describes it for
:class:`mpicomp.pipeline.Pipeline`. Its settings are one
:class:`mpicomp.settings.CommSettings`; the decisions are
:mod:`mpicomp.decision`'s.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from . import frame_format, model
from .calls import (
    allgather,
    allgatherv,
    allreduce,
    alltoall,
    bcast,
    gather,
    point_to_point,
    probe,
    reduce,
    reduce_scatter,
    scatter,
)
from .decision.agreement import Agreement
from .decision.predictor import Predictor
from .decision.screen import Screen
from .fastpath import install
from .fastpath.limits import FastPath
from .mailbox import Mailbox
from .pipeline import Pipeline
from .policy import Policy, Resolved
from .private_comm import PrivateComms
from .ratios import LearnedRatios
from .settings import CommSettings
from .stats import Stats, debug_enabled

__all__ = ["Comm", "reread_environment", "world"]

_MPI_PROBE = MPI.Intracomm.Probe
_MPI_IPROBE = MPI.Intracomm.Iprobe
_BYTE = MPI.BYTE
_MIN_FRAME = frame_format.MIN_FRAME_NBYTES


class Comm(MPI.Intracomm):
    """A compressing intracommunicator (see the module docs).

    Parameters
    ----------
    comm
        The communicator to wrap (its handle is shared, not duplicated).
    codec, rate, threshold, algorithm, tolerance
        This communicator's policy (:class:`mpicomp.policy.Policy`); unset
        settings come from the environment, then from the defaults.
    policy
        A whole :class:`~mpicomp.policy.Policy` instead of the five settings.
    """

    _settings: CommSettings
    _stats: Stats

    #: the compiled fast path's state (mpicomp/fastpath/), set once the default knows
    #: which calls go plain by size; the rest of the attributes live in the __dict__
    __slots__ = ("__dict__", "_shortcut")

    def __new__(
        cls,
        comm: MPI.Intracomm | None = None,
        *,
        codec: Any = None,
        rate: float | None = None,
        threshold: int | None = None,
        algorithm: str | None = None,
        tolerance: Any = None,
        policy: Policy | None = None,
    ) -> Comm:
        if comm is None:
            self = super().__new__(cls)
        else:
            if not isinstance(comm, MPI.Intracomm):
                raise TypeError(
                    f"mpicomp.Comm wraps an MPI.Intracomm, got {type(comm).__name__}"
                )
            self = super().__new__(cls, comm)
        base = policy if policy is not None else getattr(
            getattr(comm, "_settings", None), "policy", Policy())
        if not isinstance(base, Policy):
            raise TypeError(f"policy must be an mpicomp.Policy, got {type(base).__name__}")
        self._setup(base.override(codec=codec, rate=rate, threshold=threshold,
                                  algorithm=algorithm, tolerance=tolerance))
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: D107 - done in __new__
        pass

    def _setup(self, policy: Policy) -> None:
        self._stats = Stats()
        self._fast = FastPath(self, self._stats, debug=debug_enabled())
        self._settings = settings = CommSettings(policy, self, self._fast)
        self._privates = privates = PrivateComms(self)
        ratios = LearnedRatios()
        self._predictor = predictor = Predictor(settings, privates, ratios)
        self._pipeline = Pipeline(self, settings, Screen(settings, privates, predictor),
                                  Agreement(ratios), privates, self._stats,
                                  Mailbox(self._holding))

    def _state_ok(self) -> None:
        if "_settings" not in self.__dict__:  # made by mpi4py without __new__'s arguments
            self._setup(Policy())

    def _ready(self) -> Pipeline:
        """The pipeline the methods hand their calls to (set up here if mpi4py made this
        communicator without ``__new__``)."""
        try:
            return self._pipeline
        except AttributeError:
            self._setup(Policy())
            return self._pipeline

    # -- policy, stats, derived communicators ---------------------------------
    @property
    def policy(self) -> Policy:
        """This communicator's own settings (``None`` = environment or default)."""
        self._state_ok()
        return self._settings.policy

    def resolved_policy(self, **settings: Any) -> Resolved:
        """The settings a call with these keyword overrides would use."""
        self._state_ok()
        return self._settings.resolve(**settings)

    def check_settings(self) -> None:
        """Raise the same :class:`~mpicomp.errors.RankDisagreement` on every rank if the
        ranks' communicator-level settings (``Comm(...)`` arguments over ``MPICOMP_*``)
        differ, naming each differing setting with its values.

        Collective. Runs by itself at the communicator's first collective that
        could compress; until it has run, collectives skip the compiled fast path.
        Per-call settings are the caller's to keep alike (as counts and dtypes are).

        A rank whose settings send a call plain at once (codec ``none``, a higher
        threshold) would otherwise meet a compressing rank's agreement step in
        a different MPI call (MPI's "Message truncated", or a hang).
        """
        self._state_ok()
        self._settings.check(self._privates.main().comm)

    def _holding(self, holding: bool) -> None:
        """A probe made the mailbox non-empty (``holding``) or a receive emptied it: the
        point-to-point fast path goes off or back on, and the lowercase receives look in
        the mailbox first."""
        self._fast.holding(holding)
        if holding:
            self.__dict__.update(probe.lowercase(self._pipeline))
        else:
            for name in probe.LOWERCASE:
                self.__dict__.pop(name, None)

    # -- the performance model ----------------------------------------------------
    @property
    def calibration(self) -> model.Calibration | None:
        """The measured speeds the model uses (None until a call or :meth:`calibrate`
        needed them)."""
        self._state_ok()
        return self._predictor.cal

    def calibrate(self, force: bool = False, **settings: Any) -> model.Calibration:
        """Measure (or load, see ``MPICOMP_CALIBRATION``) this job's MPI and codec speeds.

        Collective. Runs by itself at the first call that needs the model;
        call it first to keep the probe out of a timed region. ``force``
        measures anew. The codec of the policy (with ``settings``) is measured
        on float32 host buffers too.
        """
        self._state_ok()
        return self._predictor.calibrate(self.resolved_policy(**settings), force=force)

    def predict(self, method: str, nbytes: int, dtype: Any = np.float32,
                **settings: Any) -> model.Prediction:
        """The model's prediction for ``method`` on ``nbytes`` raw bytes (``comm.stats()``'s
        count: Allgather one rank's part, Alltoall the whole send buffer).

        Collective the first time it needs a measurement (the calibration,
        a codec's speed); local after that. A variable codec's streams are
        priced at the ratio that blocking calls of this kind learned
        (:mod:`mpicomp.ratios`), else at their upper bound.
        """
        pol = self.resolved_policy(**settings)
        if not pol.enabled:
            raise ValueError("predict: the policy's codec is 'none', nothing to predict")
        dt = np.dtype(dtype)
        predictor = self._predictor
        rho = (predictor.ratios.ratio(predictor.ratios.key(method, int(nbytes), dt, False,
                                                           pol.description))
               if pol.codec.variable else None)
        return predictor.predict(method, pol, int(nbytes), dt, False, rho=rho)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per-method counters of this rank (see :mod:`mpicomp.stats`)."""
        self._state_ok()
        return self._stats.as_dict()

    def reset_stats(self) -> None:
        self._state_ok()
        self._stats.reset()

    def _derived(self, comm: MPI.Comm, settings: dict[str, Any]) -> Any:
        if comm == MPI.COMM_NULL:
            return comm
        return Comm(comm, policy=self.policy.override(**settings))

    def Dup(self, info: MPI.Info | None = None, **settings: Any) -> Comm:  # noqa: N802
        """A duplicate carrying this policy (overridden by ``settings``)."""
        new = MPI.Intracomm.Dup(self, info) if info is not None else MPI.Intracomm.Dup(self)
        return self._derived(MPI.Intracomm(new), settings)

    def Split(self, color: int = 0, key: int = 0, **settings: Any) -> Comm:  # noqa: N802
        return self._derived(MPI.Intracomm.Split(self, color, key), settings)

    def Split_type(self, split_type: int, key: int = 0, info: MPI.Info = MPI.INFO_NULL,
                   **settings: Any) -> Comm:  # noqa: N802
        return self._derived(MPI.Intracomm.Split_type(self, split_type, key, info), settings)

    def Create(self, group: MPI.Group, **settings: Any) -> Comm:  # noqa: N802
        return self._derived(MPI.Intracomm.Create(self, group), settings)

    def __reduce__(self) -> Any:
        """``mpicomp.COMM_WORLD`` unpickles as itself (as ``MPI.COMM_WORLD`` does); other
        communicators as mpi4py decides (wrappers of predefined ones rewrap them)."""
        if self is _WORLD.get("world"):
            return (world, ())
        return super().__reduce__()

    def Free(self) -> None:  # noqa: N802
        """Free the private communicators, the worker thread and this communicator."""
        self._state_ok()
        self._pipeline.free()
        MPI.Intracomm.Free(self)

    # -- the methods: the fast path, else the call's module -----------------------------
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                  **settings: Any) -> None:
        p = self._ready()
        return p.collective(allreduce.describe(p, sendbuf, recvbuf, op, settings))

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                   **settings: Any) -> MPI.Request:
        p = self._ready()
        return p.collective(allreduce.describe(p, sendbuf, recvbuf, op, settings, nonblocking=True))

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0,  # noqa: N802
               **settings: Any) -> None:
        p = self._ready()
        return p.collective(reduce.describe(p, sendbuf, recvbuf, op, root, settings))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                             **settings: Any) -> None:
        p = self._ready()
        return p.collective(reduce_scatter.describe_block(p, sendbuf, recvbuf, op, settings))

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any,  # noqa: N802
                              op: MPI.Op = MPI.SUM, **settings: Any) -> MPI.Request:
        # compressed only when the call names settings (the sharded optimizer's); without,
        # mpi4py's own call, as before this method existed: no shortcut serves it
        if not settings:
            return MPI.Intracomm.Ireduce_scatter_block(self, sendbuf, recvbuf, op)
        p = self._ready()
        return p.collective(reduce_scatter.describe_block(p, sendbuf, recvbuf, op, settings,
                                                      nonblocking=True))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any,  # noqa: N802
                       recvcounts: Sequence[int] | None = None, op: MPI.Op = MPI.SUM,
                       **settings: Any) -> None:
        p = self._ready()
        return p.collective(reduce_scatter.describe(p, sendbuf, recvbuf, recvcounts, op, settings))

    def Allgather(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        p = self._ready()
        return p.collective(allgather.describe(p, sendbuf, recvbuf, settings))

    def Allgatherv(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        p = self._ready()
        return p.collective(allgatherv.describe(p, sendbuf, recvbuf, settings))

    def Alltoall(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        p = self._ready()
        return p.collective(alltoall.describe(p, sendbuf, recvbuf, settings))

    def Bcast(self, buf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        p = self._ready()
        return p.collective(bcast.describe(p, buf, root, settings))

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        p = self._ready()
        return p.collective(gather.describe(p, sendbuf, recvbuf, root, settings))

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        p = self._ready()
        return p.collective(scatter.describe(p, sendbuf, recvbuf, root, settings))

    def Iallgather(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> MPI.Request:  # noqa: N802
        p = self._ready()
        return p.collective(allgather.describe(p, sendbuf, recvbuf, settings, nonblocking=True))

    def Ialltoall(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> MPI.Request:  # noqa: N802
        p = self._ready()
        return p.collective(alltoall.describe(p, sendbuf, recvbuf, settings, nonblocking=True))

    def Ibcast(self, buf: Any, root: int = 0, **settings: Any) -> MPI.Request:  # noqa: N802
        p = self._ready()
        return p.collective(bcast.describe(p, buf, root, settings, nonblocking=True))

    def Send(self, buf: Any, dest: int, tag: int = 0, **settings: Any) -> None:  # noqa: N802
        point_to_point.send(self._ready(), "Send", MPI.Intracomm.Send, buf, dest, tag, settings)

    def Isend(self, buf: Any, dest: int, tag: int = 0, **settings: Any) -> MPI.Request:  # noqa: N802
        return point_to_point.send(self._ready(), "Isend", MPI.Intracomm.Isend, buf, dest, tag,
                                   settings)

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
             status: MPI.Status | None = None, **settings: Any) -> None:
        point_to_point.recv(self._ready(), buf, source, tag, status, settings)

    def _received_frame(self, buf: Any, status: MPI.Status) -> None:
        """The compiled ``Recv`` shortcut's way back (a frame received into ``buf``)."""
        point_to_point.received_frame(self._ready(), buf, status)

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
              **settings: Any) -> MPI.Request:
        return point_to_point.irecv(self._ready(), buf, source, tag, settings)

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0,  # noqa: N802
                         source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG,
                         status: MPI.Status | None = None) -> None:
        return point_to_point.sendrecv_replace(self._ready(), buf, dest, sendtag, source,
                                               recvtag, status)

    def Isendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,  # noqa: N802
                  source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG) -> MPI.Request:
        return point_to_point.isendrecv(self._ready(), sendbuf, dest, sendtag, recvbuf, source,
                                        recvtag)

    def Isendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0,  # noqa: N802
                          source: int = MPI.ANY_SOURCE,
                          recvtag: int = MPI.ANY_TAG) -> MPI.Request:
        return point_to_point.isendrecv(self._ready(), None, dest, sendtag, buf, source, recvtag,
                                        replace=True)

    # -- probes: statuses of the message, not of its compressed frame (calls/probe.py) -----
    def Probe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
              status: MPI.Status | None = None) -> bool:
        # (inline, as Iprobe: nothing held and a message of even length is MPI's answer)
        p = self._ready()
        if not p.mailbox:
            st = status if status is not None else p.probe_status
            _MPI_PROBE(self, source, tag, st)
            n = st.Get_count(_BYTE)
            if not n & 1 or n < _MIN_FRAME:  # (frame_format.is_frame_length, inline)
                return True
            return probe.probed(p, st, status)  # the message MPI found: taken, held
        return probe.probe(p, source, tag, status)

    def Iprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
               status: MPI.Status | None = None) -> bool:
        p = self._ready()
        if not p.mailbox:
            st = status if status is not None else p.probe_status
            if not _MPI_IPROBE(self, source, tag, st):
                return False
            n = st.Get_count(_BYTE)
            if not n & 1 or n < _MIN_FRAME:
                return True
            return probe.probed(p, st, status)
        return probe.iprobe(p, source, tag, status)

    def Mprobe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
               status: MPI.Status | None = None) -> MPI.Message:
        return probe.mprobe(self._ready(), source, tag, status)

    def Improbe(self, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
                status: MPI.Status | None = None) -> MPI.Message | None:
        return probe.improbe(self._ready(), source, tag, status)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,  # noqa: N802
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG,
                 status: MPI.Status | None = None, **settings: Any) -> None:
        point_to_point.sendrecv(self._ready(), sendbuf, dest, sendtag, recvbuf, source, recvtag,
                                status, settings)


#: the communicator ``mpicomp.COMM_WORLD`` is, once made (:func:`world`)
_WORLD: dict[str, Comm] = {}


def world() -> Comm:
    """``mpicomp.COMM_WORLD``: made at the first call (at ``import mpicomp``), the same
    object after (what a pickled ``mpicomp.COMM_WORLD`` becomes)."""
    if "world" not in _WORLD:
        _WORLD["world"] = Comm(MPI.COMM_WORLD)
    return _WORLD["world"]


def reread_environment(comm: Comm) -> None:
    """Give ``comm`` its settings anew from the ``MPICOMP_*`` variables now set (the runner,
    ``python -m mpicomp``, sets them from its options after ``mpicomp`` was imported)."""
    comm._setup(comm.policy)


install.install(Comm)
