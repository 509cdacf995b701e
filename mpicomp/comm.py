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
calls of the default policy to plain MPI at once (the fast path, compiled in
:mod:`mpicomp.shortcut`), every other call to its module in
:mod:`mpicomp.calls`, which describes it for :class:`mpicomp.pipeline.Pipeline`;
the decisions are :class:`mpicomp.decision.Decider`'s.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from . import fast_methods, model, p2p, shortcut
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
from .decision import P2P_AUTO, Decider
from .engine import Engines
from .fast_methods import NO_LIMITS, PlainLimits
from .pipeline import Pipeline
from .policy import Policy, Resolved, environment_policy, resolve
from .stats import BELOW_THRESHOLD, Stats, debug_enabled

__all__ = ["Comm"]

#: looked up once, for the fast plain path of Allreduce
_NDARRAY = np.ndarray
_MPI_ALLREDUCE = MPI.Intracomm.Allreduce
_MPI_PROBE = MPI.Intracomm.Probe
_MPI_IPROBE = MPI.Intracomm.Iprobe
_MPI_SENDRECV_REPLACE = MPI.Intracomm.Sendrecv_replace
_BYTE = MPI.BYTE
_MIN_FRAME = p2p.MIN_FRAME_NBYTES


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

    _policy: Policy
    _stats: Stats

    #: the compiled shortcut's state (mpicomp/shortcut.py), set once the default knows
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
        base = policy if policy is not None else getattr(comm, "_policy", Policy())
        if not isinstance(base, Policy):
            raise TypeError(f"policy must be an mpicomp.Policy, got {type(base).__name__}")
        self._setup(base.override(codec=codec, rate=rate, threshold=threshold,
                                  algorithm=algorithm, tolerance=tolerance))
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: D107 - done in __new__
        pass

    def _setup(self, policy: Policy) -> None:
        self._policy = policy
        self._env_policy = environment_policy()
        self._default: Resolved | None = None
        self._debug = debug_enabled()
        self._stats = Stats()
        self._engines = Engines(self)
        self._decision = Decider(self, self._engines)
        self._pipeline = Pipeline(self, self._decision, self._engines, self._stats)
        #: calls without settings on NumPy arrays below these sizes go to plain MPI at
        #: once, without parsing or screening (see _fast_plain); NO_LIMITS until the
        #: default policy is known (and in debug mode)
        self._limits = self._wanted = NO_LIMITS

    def _state_ok(self) -> None:
        if not hasattr(self, "_policy"):  # made by mpi4py without __new__'s arguments
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
        return self._policy

    def resolved_policy(self, **settings: Any) -> Resolved:
        """The settings a call with these keyword overrides would use."""
        self._state_ok()
        if settings:
            return resolve(Policy(**settings), self._policy, env=self._env_policy)
        if self._default is None:
            pol = self._default = resolve(Policy(), self._policy, env=self._env_policy)
            if not self._debug and self._limits is NO_LIMITS:
                self._size1 = self.Get_size() == 1
                self._stats.threshold = pol.threshold
                # collectives take the fast path once the ranks agreed on the settings
                if self._size1:
                    self._decision.settings_agreed = True  # nothing to compare
                self._set_limits(_collective_limit(pol, self._size1)
                                      if self._decision.settings_agreed
                                      else (0.0, ""),
                                      p2p=((math.inf, "codec none") if not pol.enabled
                                           else (math.inf, P2P_AUTO) if pol.auto
                                           else (pol.threshold, BELOW_THRESHOLD)))
        return self._default

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
        self._decision.check_settings()

    def _settings_agreed(self) -> None:
        """The ranks agreed on the settings: collectives may take the fast path."""
        if self._limits is not NO_LIMITS and not self._debug:
            self._set_limits(_collective_limit(self.resolved_policy(), self._size1))

    def _every_collective_plain(self, reason: str) -> None:
        """The default policy sends every collective on host memory plain (``reason``)."""
        if self._limits is not NO_LIMITS:
            self._set_limits((math.inf, reason))

    #: (class default: a Comm that mpi4py made without __new__ has no fast path)
    _limits: PlainLimits = NO_LIMITS

    #: the limits the policy asks for; ``_limits`` holds them, but for point to point
    #: while a probe holds messages (:meth:`_holding`)
    _wanted: PlainLimits = NO_LIMITS

    def _set_limits(self, collective: tuple[float, str],
                    p2p: tuple[float, str] | None = None) -> None:
        """Set the fast path's size limit and reason for collectives (see
        :meth:`_fast_plain`), and those of point-to-point sends (``p2p``; None: as they
        were), for the Python methods, the compiled shortcut and the statistics."""
        old = self._wanted
        self._wanted = PlainLimits(
            *collective, *(p2p if p2p is not None else (old.p2p, old.p2p_reason)))
        self._apply_limits()

    def _apply_limits(self) -> None:
        limits = self._wanted
        if self._pipeline.mailbox:  # every receive must look there first: no shortcut
            limits = PlainLimits(limits.collective, limits.collective_reason)
        self._limits = limits
        self._stats.attach_shortcuts(shortcut.update(self, limits), limits)

    def _holding(self, holding: bool) -> None:
        """A probe made the mailbox non-empty (``holding``) or a receive emptied it: the
        point-to-point shortcut goes off or back on."""
        if self._wanted is not NO_LIMITS:
            self._apply_limits()
        if holding:
            self.__dict__.update(probe.lowercase(self._pipeline))
        else:
            for name in probe.LOWERCASE:
                self.__dict__.pop(name, None)

    def _fast_plain(self, name: str, nbytes: int) -> bool:
        """True (and counted) when a call without settings goes to plain MPI by its size alone.

        The test must cost next to nothing, since tiny calls are the ones
        it serves: a cached size limit for the default policy, known once a
        first call resolved it (the threshold; with the codec ``auto``, no
        limit at all once the model found that the communicator is on one
        node). The limit is the same on every rank. ``Allreduce`` inlines
        this test (its tiny calls are the most frequent).
        """
        limits = self._limits
        if nbytes < limits.collective:
            self._stats.fast_plain(name, nbytes, limits.collective_reason)
            return True
        return False

    def _fast_send(self, name: str, buf: Any, settings: dict[str, Any]) -> bool:
        """True (and counted) when a point-to-point call goes to plain MPI by its size alone
        (the Python side of the compiled shortcut, :mod:`mpicomp.shortcut`)."""
        limits = self._limits
        if not settings and type(buf) is _NDARRAY and buf.nbytes < limits.p2p:
            self._stats.fast_plain(name, buf.nbytes, limits.p2p_reason)
            return True
        return False

    # -- the performance model ----------------------------------------------------
    @property
    def calibration(self) -> model.Calibration | None:
        """The measured speeds the model uses (None until a call or :meth:`calibrate`
        needed them)."""
        self._state_ok()
        return self._decision.cal

    def calibrate(self, force: bool = False, **settings: Any) -> model.Calibration:
        """Measure (or load, see ``MPICOMP_CALIBRATION``) this job's MPI and codec speeds.

        Collective. Runs by itself at the first call that needs the model;
        call it first to keep the probe out of a timed region. ``force``
        measures anew. The codec of the policy (with ``settings``) is measured
        on float32 host buffers too.
        """
        self._state_ok()
        return self._decision.calibrate(self.resolved_policy(**settings), force=force)

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
        decision = self._decision
        rho = (decision.ratios.ratio(decision.ratios.key(method, int(nbytes), dt, False,
                                                         pol.description))
               if pol.codec.variable else None)
        return decision.predict(method, pol, int(nbytes), dt, False, rho=rho)

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
        import mpicomp

        if self is mpicomp.COMM_WORLD:
            return (_comm_world, ())
        return super().__reduce__()

    def Free(self) -> None:  # noqa: N802
        """Free the private communicators, the worker thread and this communicator."""
        self._state_ok()
        self._pipeline.free()
        MPI.Intracomm.Free(self)

    # -- the methods: the fast path, else the call's module -----------------------------
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                  **settings: Any) -> None:
        if (type(sendbuf) is _NDARRAY and sendbuf.nbytes < self._limits.collective
                and not settings):
            self._stats.fast_plain("Allreduce", sendbuf.nbytes, self._limits.collective_reason)
            return _MPI_ALLREDUCE(self, sendbuf, recvbuf, op)
        if not settings and _fast_size(self, "Allreduce", sendbuf, recvbuf):
            return _MPI_ALLREDUCE(self, sendbuf, recvbuf, op)
        p = self._ready()
        return p.collective(allreduce.call(p, sendbuf, recvbuf, op, settings))

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                   **settings: Any) -> MPI.Request:
        if not settings and _fast_size(self, "Iallreduce", sendbuf, recvbuf):
            return MPI.Intracomm.Iallreduce(self, sendbuf, recvbuf, op)
        p = self._ready()
        return p.collective(allreduce.call(p, sendbuf, recvbuf, op, settings, nonblocking=True))

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0,  # noqa: N802
               **settings: Any) -> None:
        if not settings and _fast_size(self, "Reduce", sendbuf, recvbuf):
            return MPI.Intracomm.Reduce(self, sendbuf, recvbuf, op, root)
        p = self._ready()
        return p.collective(reduce.call(p, sendbuf, recvbuf, op, root, settings))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                             **settings: Any) -> None:
        if not settings and _fast_size(self, "Reduce_scatter_block", sendbuf, recvbuf):
            return MPI.Intracomm.Reduce_scatter_block(self, sendbuf, recvbuf, op)
        p = self._ready()
        return p.collective(reduce_scatter.call_block(p, sendbuf, recvbuf, op, settings))

    def Ireduce_scatter_block(self, sendbuf: Any, recvbuf: Any,  # noqa: N802
                              op: MPI.Op = MPI.SUM, **settings: Any) -> MPI.Request:
        # compressed only when the call names settings (the sharded optimizer's); without,
        # mpi4py's own call, as before this method existed: no shortcut serves it
        if not settings:
            return MPI.Intracomm.Ireduce_scatter_block(self, sendbuf, recvbuf, op)
        p = self._ready()
        return p.collective(reduce_scatter.call_block(p, sendbuf, recvbuf, op, settings,
                                                      nonblocking=True))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any,  # noqa: N802
                       recvcounts: Sequence[int] | None = None, op: MPI.Op = MPI.SUM,
                       **settings: Any) -> None:
        if not settings and _fast_size(self, "Reduce_scatter", sendbuf, recvbuf):
            return MPI.Intracomm.Reduce_scatter(self, sendbuf, recvbuf, recvcounts, op)
        p = self._ready()
        return p.collective(reduce_scatter.call(p, sendbuf, recvbuf, recvcounts, op, settings))

    def Allgather(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Allgather", sendbuf, recvbuf):
            return MPI.Intracomm.Allgather(self, sendbuf, recvbuf)
        p = self._ready()
        return p.collective(allgather.call(p, sendbuf, recvbuf, settings))

    def Allgatherv(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        # its size is the largest count, which a rank cannot see without parsing the
        # v-spec: the fast path only where every size goes plain (one node under auto)
        limits = self._limits
        if (not settings and limits.collective == math.inf and type(sendbuf) is _NDARRAY
                and type(recvbuf) in (list, tuple) and recvbuf
                and type(recvbuf[0]) is _NDARRAY):  # host memory only, as every fast path
            # (counted by this rank's own bytes: the largest count would need the v-spec)
            self._stats.fast_plain("Allgatherv", sendbuf.nbytes, limits.collective_reason)
            return MPI.Intracomm.Allgatherv(self, sendbuf, recvbuf)
        if not settings and limits.collective > 0 and type(sendbuf) is _NDARRAY:
            largest = shortcut.largest_count(recvbuf)  # the same on every rank: the call's size
            if largest is not None and largest < limits.collective:
                self._stats.fast_plain("Allgatherv", largest, limits.collective_reason)
                return MPI.Intracomm.Allgatherv(self, sendbuf, recvbuf)
        p = self._ready()
        return p.collective(allgatherv.call(p, sendbuf, recvbuf, settings))

    def Alltoall(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Alltoall", sendbuf, recvbuf):
            return MPI.Intracomm.Alltoall(self, sendbuf, recvbuf)
        p = self._ready()
        return p.collective(alltoall.call(p, sendbuf, recvbuf, settings))

    def Bcast(self, buf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Bcast", buf, buf):
            return MPI.Intracomm.Bcast(self, buf, root)
        p = self._ready()
        return p.collective(bcast.call(p, buf, root, settings))

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Gather", sendbuf, recvbuf):
            return MPI.Intracomm.Gather(self, sendbuf, recvbuf, root)
        p = self._ready()
        return p.collective(gather.call(p, sendbuf, recvbuf, root, settings))

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        # the size is one rank's block: the receive buffer (the root's send buffer / p in place)
        if not settings and _fast_size(self, "Scatter", recvbuf, sendbuf):
            return MPI.Intracomm.Scatter(self, sendbuf, recvbuf, root)
        p = self._ready()
        return p.collective(scatter.call(p, sendbuf, recvbuf, root, settings))

    def Iallgather(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> MPI.Request:  # noqa: N802
        if not settings and _fast_size(self, "Iallgather", sendbuf, recvbuf):
            return MPI.Intracomm.Iallgather(self, sendbuf, recvbuf)
        p = self._ready()
        return p.collective(allgather.call(p, sendbuf, recvbuf, settings, nonblocking=True))

    def Ialltoall(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> MPI.Request:  # noqa: N802
        if not settings and _fast_size(self, "Ialltoall", sendbuf, recvbuf):
            return MPI.Intracomm.Ialltoall(self, sendbuf, recvbuf)
        p = self._ready()
        return p.collective(alltoall.call(p, sendbuf, recvbuf, settings, nonblocking=True))

    def Ibcast(self, buf: Any, root: int = 0, **settings: Any) -> MPI.Request:  # noqa: N802
        if not settings and _fast_size(self, "Ibcast", buf, buf):
            return MPI.Intracomm.Ibcast(self, buf, root)
        p = self._ready()
        return p.collective(bcast.call(p, buf, root, settings, nonblocking=True))

    def Send(self, buf: Any, dest: int, tag: int = 0, **settings: Any) -> None:  # noqa: N802
        if self._fast_send("Send", buf, settings):
            return MPI.Intracomm.Send(self, buf, dest, tag)
        point_to_point.send(self._ready(), "Send", MPI.Intracomm.Send, buf, dest, tag, settings)

    def Isend(self, buf: Any, dest: int, tag: int = 0, **settings: Any) -> MPI.Request:  # noqa: N802
        if self._fast_send("Isend", buf, settings):
            return MPI.Intracomm.Isend(self, buf, dest, tag)
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
        if self._fast_send("Irecv", buf, settings):
            return MPI.Intracomm.Irecv(self, buf, source, tag)
        self._state_ok()
        return point_to_point.irecv(self._ready(), buf, source, tag, settings)

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0,  # noqa: N802
                         source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG,
                         status: MPI.Status | None = None) -> None:
        limits = self._limits
        if type(buf) is _NDARRAY and buf.nbytes < limits.p2p and buf.flags.c_contiguous:
            # (inline: its send plain by size, MPI's own Sendrecv_replace; a float buffer
            # receives bytes, a frame then decoded in place; no p2p limit while a probe
            # holds messages, so none is held here)
            self._stats.fast_plain("Sendrecv_replace", buf.nbytes, limits.p2p_reason)
            if buf.dtype.char not in "fd":
                return _MPI_SENDRECV_REPLACE(self, buf, dest, sendtag, source, recvtag, status)
            st = status if status is not None else self._pipeline.probe_status
            _MPI_SENDRECV_REPLACE(self, [buf, _BYTE], dest, sendtag, source, recvtag, st)
            n = st.Get_count(_BYTE)
            if n & 1 and n >= _MIN_FRAME:
                self._received_frame(buf, st)
            return None
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
            if not n & 1 or n < _MIN_FRAME:  # (p2p.is_frame_length, inline)
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
        if type(recvbuf) is _NDARRAY and self._fast_send("Sendrecv", sendbuf, settings):
            return point_to_point.sendrecv_received(self._ready(), sendbuf, dest, sendtag, recvbuf,
                                                    source, recvtag, status)
        point_to_point.sendrecv(self._ready(), sendbuf, dest, sendtag, recvbuf, source, recvtag,
                                status, settings)


def _fast_size(comm: Comm, name: str, sendbuf: Any, recvbuf: Any) -> bool:
    """The fast plain path for bare NumPy buffers (see ``Comm._fast_plain``): ``sendbuf``
    the method's sizing buffer, ``recvbuf`` its other (:mod:`mpicomp.fast_methods`'s
    ``sized`` and ``other``; Scatter passes its receive buffer, then its send buffer).

    In place, the call's size is one rank's part of ``recvbuf`` for the collectives of
    :data:`~mpicomp.fast_methods.PER_RANK` (Allgather, Gather, Scatter), else all of it.
    """
    if sendbuf is MPI.IN_PLACE:
        if type(recvbuf) is not np.ndarray:
            return False
        nbytes = (recvbuf.nbytes // comm.Get_size() if name in fast_methods.PER_RANK
                  else recvbuf.nbytes)
    elif type(sendbuf) is np.ndarray and (recvbuf is None or type(recvbuf) is np.ndarray):
        nbytes = sendbuf.nbytes  # (both in host memory, or the other one absent)
    else:
        return False
    return comm._fast_plain(name, nbytes)


def _collective_limit(pol: Resolved, size1: bool) -> tuple[float, str]:
    """The fast path's size limit and reason for collectives under the default ``pol``
    (``size1``: a communicator of one rank, whose collectives are all plain)."""
    if not pol.enabled:
        return math.inf, "codec none"
    return (math.inf, "single rank") if size1 else (pol.threshold, BELOW_THRESHOLD)


def _comm_world() -> Comm:
    """``mpicomp.COMM_WORLD`` (what a pickled ``mpicomp.COMM_WORLD`` becomes)."""
    import mpicomp

    return mpicomp.COMM_WORLD


shortcut.install(Comm)
