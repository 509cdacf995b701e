"""``mpicomp.Comm``: a drop-in ``mpi4py.MPI.Intracomm`` whose buffer methods compress.

``Comm(MPI.COMM_WORLD, codec="bitplane", rate=4)`` shares the wrapped
communicator's handle (as ``mpi4py.util.pkl5`` does): it *is* that
communicator, and every method it does not override behaves exactly as
mpi4py's. The overridden uppercase methods take the same arguments as
mpi4py's plus keyword-only ``codec``, ``rate``, ``threshold`` and
``algorithm``, which override the communicator's policy for one call.

Each call goes one of two ways, and ``stats()`` / ``MPICOMP_DEBUG=1`` say
which and why:

* **plain MPI**, unchanged, when compression is off (codec ``none``), the
  buffer is below the threshold, not a float32/float64 NumPy array, the op
  cannot be honoured by the codec, the communicator has one rank, or (found
  by the agreement step, the same on every rank) some rank's data holds
  NaN/Inf or values whose sum could overflow;
* **compressed**: the codec's streams travel over a private duplicate of
  the communicator (so mpicomp's own messages never meet the caller's).
"""
from __future__ import annotations

import concurrent.futures
import json
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from . import algorithms, calibration, collectives, device, model, p2p, shortcut, topology
from . import plain as plain_mpi
from .agreement import RankDisagreement, agree, fingerprint
from .algorithms.common import Ctx
from .buffers import Buf, is_in_place, parse, parse_v
from .cuda_aware import cuda_aware
from .memory import DeviceMemory, DevicePools, HostMemory
from .placement import Place
from .policy import Policy, Resolved, environment_policy, resolve
from .requests import Request
from .scratch import Scratch
from .stats import Recorder, Stats, debug_enabled

__all__ = ["Comm"]

_OP_NAMES = ("SUM", "MAX", "MIN", "PROD", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
             "MAXLOC", "MINLOC", "REPLACE", "NO_OP")

#: largest finite value of each cast target
_CAST_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


#: why the codec ``auto`` leaves host buffers of a one-node communicator to plain MPI
ONE_NODE = "codec auto: one node (plain MPI through shared memory is faster)"
#: the plain-MPI reason of point-to-point calls under the codec auto
P2P_AUTO = "codec auto: point to point stays plain (name a codec to compress it)"
#: allreduce algorithms that screen their data speculatively (host buffers, a codec
#: with guarded encodes): their encoders replace the agreement step's scan
SPECULATIVE = frozenset({"ring"})
#: the plain-MPI reason when a speculative encoder flagged a value or partial sum near
#: the dtype's range although every input passed the agreement's overflow rule
GUARD_TRIPPED = "overflow risk (an encoder met a value within the codec's headroom of the range)"


#: looked up once, for the fast plain path of Allreduce
_NDARRAY = np.ndarray
_MPI_ALLREDUCE = MPI.Intracomm.Allreduce


def _op_name(op: MPI.Op) -> str:
    for name in _OP_NAMES:
        if op == getattr(MPI, name, None):
            return name
    return "user-defined op"


class _Engine:
    """A private duplicate communicator and the scratch buffers used with it (one per thread)."""

    def __init__(self, parent: MPI.Intracomm) -> None:
        # a plain Intracomm: mpi4py's Dup returns the caller's class, and the
        # private communicator must never compress its own (agreement) traffic
        self.comm: MPI.Intracomm = MPI.Intracomm(MPI.Intracomm.Dup(parent))
        self.scratch = Scratch()
        self.pools: DevicePools | None = None
        self._nodes: tuple[MPI.Intracomm, MPI.Intracomm] | None = None
        self._rail: MPI.Intracomm | None = None
        self._layout: topology.Layout | None = None

    def layout(self) -> topology.Layout:
        """Which node each rank is on (collective the first time)."""
        if self._layout is None:
            self._layout = topology.layout(self.comm)
        return self._layout

    def node_comms(self) -> tuple[MPI.Intracomm, MPI.Intracomm]:
        """(this rank's node, the node leaders or COMM_NULL) on the private communicator
        (collective the first time; see :func:`mpicomp.topology.node_comms`)."""
        if self._nodes is None:
            self._nodes = topology.node_comms(self.comm, self.layout())
        return self._nodes

    def rail_comm(self) -> MPI.Intracomm | None:
        """This rank's rail (the ranks of its place on every node) where every node holds
        the same number of ranks, else None (collective the first time; see
        :func:`mpicomp.topology.rail_comm`)."""
        lay = self.layout()
        if self._rail is None and lay.uniform:
            self._rail = topology.rail_comm(self.comm, lay)
        return self._rail

    def local_ranks(self, pol: Resolved, on_device: bool) -> frozenset[int]:
        """The ranks whose blocks a node-aware collective sends plain: this rank's node
        when the algorithm is ``hierarchical``, or ``auto`` and some node holds several
        ranks of a job that spans nodes; else none (host buffers only; collective)."""
        if on_device or pol.algorithm not in ("auto", "hierarchical"):
            return frozenset()
        lay = self.layout()
        if pol.algorithm == "auto" and not (lay.spans_nodes and lay.ppn > 1):
            return frozenset()
        me = lay.node_of[self.comm.Get_rank()]
        return frozenset(i for i, n in enumerate(lay.node_of) if n == me)

    def memory(self, on_device: bool) -> HostMemory | DeviceMemory:
        """Where this call's values and streams live (device: on the current stream)."""
        if not on_device:
            return HostMemory(self.scratch)
        if self.pools is None:
            self.pools = DevicePools()
        return DeviceMemory(self.pools, device.current_stream(), cuda_aware()[0])

    def ctx(self, codec: Any, rec: Recorder, memory: HostMemory | DeviceMemory) -> Ctx:
        rec.where(memory.label)
        return Ctx(self.comm, codec, rec, memory)

    def free(self) -> None:
        for c in (*(self._nodes or ()), self._rail, self.comm):
            if c is not None and c != MPI.COMM_NULL:
                c.Free()
        self._nodes = self._rail = None


class _ModelState:
    """A communicator's calibration and codec speeds (shared with its worker view).

    Filled at the same collective calls on every rank, so every rank holds
    the same numbers and takes the same decisions.
    """

    def __init__(self) -> None:
        self.cal: calibration.Calibration | None = None
        self.speeds: dict[tuple[str, str, bool], tuple[float, float]] = {}
        self.layout: topology.Layout | None = None
        #: (bytes, reason): calls without settings on NumPy arrays of fewer bytes go to
        #: plain MPI at once, without parsing or screening (see Comm._fast_plain)
        self.plain_below: tuple[float, str] | None = None
        #: the ranks found their communicator-level settings equal (Comm.check_settings);
        #: until then no collective takes the fast path
        self.settings_agreed = False


class Comm(MPI.Intracomm):
    """A compressing intracommunicator (see the module docs).

    Parameters
    ----------
    comm
        The communicator to wrap (its handle is shared, not duplicated).
    codec, rate, threshold, algorithm
        This communicator's policy (:class:`mpicomp.policy.Policy`); unset
        settings come from the environment, then from the defaults.
    policy
        A whole :class:`~mpicomp.policy.Policy` instead of the four settings.
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
                                  algorithm=algorithm))
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: D107 - done in __new__
        pass

    def _setup(self, policy: Policy) -> None:
        self._policy = policy
        self._env_policy = environment_policy()
        self._default: Resolved | None = None
        self._model = _ModelState()
        self._debug = debug_enabled()
        self._stats = Stats()
        self._lock = threading.Lock()
        self._engine: _Engine | None = None
        self._worker_engine: _Engine | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def _state_ok(self) -> None:
        if not hasattr(self, "_policy"):  # made by mpi4py without __new__'s arguments
            self._setup(Policy())

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
            if not self._debug and self._model.plain_below is None:
                self._size1 = self.Get_size() == 1
                self._stats.threshold = pol.threshold
                # collectives take the fast path once the ranks agreed on the settings
                if self._size1:
                    self._model.settings_agreed = True  # nothing to compare
                self._set_plain_below(_collective_limit(pol, self._size1)
                                      if self._model.settings_agreed
                                      else (0.0, ""),
                                      p2p=((math.inf, "codec none") if not pol.enabled
                                           else (math.inf, P2P_AUTO) if pol.auto
                                           else (pol.threshold, "below threshold")))
        return self._default

    def check_settings(self) -> None:
        """Raise the same :class:`~mpicomp.agreement.RankDisagreement` on every rank if the
        ranks' communicator-level settings (``Comm(...)`` arguments over ``MPICOMP_*``)
        differ, naming each differing setting with its values.

        Collective. Runs by itself at the communicator's first collective that
        could compress; until it has run, collectives skip the compiled fast path.
        Per-call settings are the caller's to keep alike (as counts and dtypes are).

        A rank whose settings send a call plain at once (codec ``none``, a higher
        threshold) would otherwise meet a compressing rank's agreement step in
        a different MPI call (MPI's "Message truncated", or a hang).
        """
        pol = self.resolved_policy()
        if self.Get_size() > 1:
            comm = self._main_engine().comm
            settings = pol.settings()
            fp = fingerprint(sorted(settings.items()))
            vec = np.array([fp, -fp], np.float64)
            out = np.empty_like(vec)
            comm.Allreduce(vec, out, op=MPI.MAX)
            if out[0] != -out[1]:
                raise RankDisagreement(_settings_difference(comm.allgather(settings)))
        self._model.settings_agreed = True
        if self._model.plain_below is not None and not self._debug:
            self._set_plain_below(_collective_limit(pol, self._size1))

    #: calls without settings on NumPy arrays of fewer bytes take the fast plain path
    #: (class defaults: a Comm that mpi4py made without __new__ has none)
    _fast_below: float = 0.0
    _fast_reason: str = ""
    #: the same for point-to-point sends (and whether receives take their fast path)
    _p2p_below: float = 0.0
    _p2p_reason: str = ""

    def _set_plain_below(self, limit: tuple[float, str],
                         p2p: tuple[float, str] | None = None) -> None:
        """Set the fast path's size limit and reason (see :meth:`_fast_plain`), and those of
        point-to-point sends (``p2p``; None: as they were)."""
        self._model.plain_below = limit
        self._fast_below = limit[0]
        self._fast_reason = limit[1]
        if p2p is not None:
            self._p2p_below, self._p2p_reason = p2p
        self._stats.attach_shortcuts(
            shortcut.update(self, self._fast_below, self._p2p_below), limit[1], self._p2p_reason)

    def _fast_plain(self, name: str, nbytes: int) -> bool:
        """True (and counted) when a call without settings goes to plain MPI by its size alone.

        The test must cost next to nothing, since tiny calls are the ones
        it serves: a cached size limit for the default policy, known once a
        first call resolved it (the threshold; with the codec ``auto``, no
        limit at all once the model found that the communicator is on one
        node). The limit is the same on every rank. ``Allreduce`` inlines
        this test (its tiny calls are the most frequent).
        """
        if nbytes < self._fast_below:
            self._stats.fast_plain(name, nbytes, self._fast_reason)
            return True
        return False

    # -- the performance model ----------------------------------------------------
    @property
    def calibration(self) -> calibration.Calibration | None:
        """The measured speeds the model uses (None until a call or :meth:`calibrate` needed them)."""
        self._state_ok()
        return self._model.cal

    def calibrate(self, force: bool = False, **settings: Any) -> calibration.Calibration:
        """Measure (or load, see ``MPICOMP_CALIBRATION``) this job's MPI and codec speeds.

        Collective. Runs by itself at the first call that needs the model;
        call it first to keep the probe out of a timed region. ``force``
        measures anew. The codec of the policy (with ``settings``) is measured
        on float32 host buffers too.
        """
        self._state_ok()
        engine = self._main_engine()
        if force or self._model.cal is None:
            self._model.cal = calibration.obtain(engine.comm, topology.layout(engine.comm),
                                                 force=force)
            self._model.speeds.clear()
        pol = self.resolved_policy(**settings)
        if pol.enabled:
            self._codec_speed(pol, np.dtype(np.float32), False)
        return self._model.cal

    def predict(self, method: str, nbytes: int, dtype: Any = np.float32,
                **settings: Any) -> model.Prediction:
        """The model's prediction for ``method`` on ``nbytes`` raw bytes (``comm.stats()``'s
        count: Allgather one rank's part, Alltoall the whole send buffer).

        Collective the first time it needs a measurement (the calibration,
        a codec's speed); local after that.
        """
        pol = self.resolved_policy(**settings)
        if not pol.enabled:
            raise ValueError("predict: the policy's codec is 'none', nothing to predict")
        return self._predict(self._main_engine(), method, pol, int(nbytes), np.dtype(dtype),
                             False)

    def _predict(self, engine: _Engine, method: str, pol: Resolved, nbytes: int,
                 dtype: np.dtype, on_device: bool, codec: Any = None,
                 algorithm: str | None = None) -> model.Prediction:
        """The model's prediction with ``pol``'s codec speed (collective if not measured yet)."""
        if self._model.cal is None:
            self.calibrate()
        speed = self._codec_speed(pol, np.dtype(dtype), on_device, engine)
        assert self._model.cal is not None
        return model.predict(self._model.cal, method, nbytes, codec or pol.codec, dtype, speed,
                             algorithm or pol.algorithm, on_device=on_device)

    def _codec_speed(self, pol: Resolved, dtype: np.dtype, on_device: bool,
                     engine: _Engine | None = None) -> tuple[float, float]:
        key = (json.dumps(pol.codec.get_config(), sort_keys=True), dtype.name, on_device)
        speed = self._model.speeds.get(key)
        if speed is None:
            engine = engine or self._main_engine()
            assert self._model.cal is not None
            speed = calibration.codec_speed(engine.comm, self._model.cal, pol.codec, dtype,
                                            engine.memory(on_device))
            self._model.speeds[key] = speed
        return speed

    def _consult(self, method: str, pol: Resolved, nbytes: int, dtype: np.dtype,
                 on_device: bool, rec: Recorder | None) -> str | None:
        """Ask the model (collective the first time); the plain-MPI reason or None."""
        if pol.auto and not on_device:
            if self._model.layout is None:
                self._model.layout = topology.layout(self._main_engine().comm)
            if not self._model.layout.spans_nodes:
                # shared memory moves bytes faster than a CPU codec encodes them: no probe
                if self._model.plain_below is not None and pol is self._default:
                    self._set_plain_below((math.inf, ONE_NODE))
                return ONE_NODE
        # Before the agreement step, ranks may hold different per-call settings (an error
        # the agreement reports): so the codec speed used here is that of the
        # communicator's own codec, which every rank measured at the same call (a
        # per-call codec enters through its compression ratio).
        pred = self._predict(self._main_engine(), method, self.resolved_policy(), nbytes, dtype,
                             on_device, codec=pol.codec, algorithm=pol.algorithm)
        if rec is not None:
            rec.predicted(pred)
        if pol.auto and not pred.compress:
            return "model: plain MPI predicted faster"
        return None

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
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        for engine in (self._engine, self._worker_engine):
            if engine is not None:
                engine.free()
        self._engine = self._worker_engine = None
        MPI.Intracomm.Free(self)

    # -- machinery ------------------------------------------------------------
    def _main_engine(self) -> _Engine:
        if self._engine is None:
            self._engine = _Engine(self)
        return self._engine

    def _async(self) -> tuple[_Engine, concurrent.futures.Executor]:
        with self._lock:
            if self._worker_engine is None:
                engine = _Engine(self)
                # its layout here, in the caller's program order (collective), so that
                # the worker thread does not find it while this thread runs collectives
                engine.layout()
                self._worker_engine = engine
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="mpicomp-worker"
                )
            assert self._executor is not None
            return self._worker_engine, self._executor

    def _call(self, name: str, raw_bytes: int) -> Recorder:
        self._state_ok()
        return Recorder(self._stats, name, self.Get_rank(), raw_bytes)

    def _screen(
        self, pol: Resolved, bufs: Sequence[Buf], nbytes: int, op: MPI.Op | None = None,
        collective: bool = True, method: str | None = None, rec: Recorder | None = None,
    ) -> str | None:
        """Why this call must go to plain MPI (rank-consistent reasons), or None.

        ``method`` names a collective the model can predict: with the codec
        ``auto`` it decides whether to compress, and for an allreduce with the
        algorithm ``auto`` it picks the algorithm (kept in ``rec``).
        Point-to-point calls (not ``collective``) never compress under ``auto``:
        a receive may be posted before the sender's side calibrated.
        """
        _same_memory(bufs)
        if collective and not self._model.settings_agreed:
            self.check_settings()
        if not pol.enabled:
            return "codec none"
        if collective and self.Get_size() == 1:
            return "single rank"
        for b in bufs:
            if not b.compressible:
                return b.reason
        dtypes = {b.dtype for b in bufs}
        if len(dtypes) > 1:
            raise TypeError(f"send and receive buffers must have the same dtype, got {dtypes}")
        dt = bufs[0].dtype
        if dt not in pol.codec.dtypes:
            return f"codec {pol.codec.codec_id} does not take {dt}"
        if op is not None:
            name = _op_name(op)
            if name != "SUM" and not (name in ("MAX", "MIN") and pol.codec.codec_id == "cast"):
                return f"op {name} cannot be computed on {pol.codec.codec_id} streams"
        if pol.auto and not collective:
            return P2P_AUTO
        if nbytes < pol.threshold:
            return f"below threshold ({nbytes} B < {pol.threshold} B)"
        if method is not None and (pol.auto or (method == "Allreduce"
                                                and pol.algorithm == "auto")):
            return self._consult(method, pol, nbytes, dt, bufs[0].on_device, rec)
        return None

    def _agree(self, engine: _Engine, name: str, pol: Resolved, local: Any,
               dtype: np.dtype, settings: str, summands: int,
               memory: HostMemory | DeviceMemory) -> str | None:
        """The agreement step: None to go ahead compressed, else the plain-MPI reason."""
        local_max = memory.max_abs(local) if local is not None else 0.0
        ag = agree(engine.comm, name, local_max, f"{settings} {pol.describe()}")
        if not math.isfinite(ag.max_abs):
            return "nonfinite (NaN or Inf on some rank)"
        return _overflow_risk(pol, dtype, ag.max_abs, summands)

    def _verdict(self, engine: _Engine, ctx: Ctx, name: str, pol: Resolved, local: Any,
                 dtype: np.dtype, settings: str, summands: int) -> str | None:
        """After a compressed call: None when it stands, else the plain-MPI reason.

        A guarded call (speculative screening) whose encoders found unsafe data on
        some rank left its input intact, to be sent plain; the full agreement, with
        the scan of the input, names the reason the same way on every rank.
        """
        if not ctx.unsafe():
            return None
        return self._agree(engine, name, pol, local, dtype, settings, summands,
                           ctx.memory) or GUARD_TRIPPED

    def _plain(self, rec: Recorder, reason: str, fn: Callable[..., Any], *args: Any,
               sent: int | None = None, bufs: Sequence[Buf] = ()) -> Any:
        result = _plain_on(self, rec, reason, fn, args, bufs)
        rec.sent(rec.raw_bytes if sent is None else sent)
        rec.commit()
        return result

    # -- Allreduce and Reduce -------------------------------------------------
    def _allreduce_body(self, engine: _Engine, rec: Recorder, pol: Resolved, x: Any,
                        out: Any, op: MPI.Op, sendbuf: Any, recvbuf: Any,
                        on_device: bool) -> None:
        p = self.Get_size()
        opname = _op_name(op)
        algorithm = "cast_order" if opname != "SUM" else pol.algorithm
        if algorithm == "auto":
            # the model's choice, made in _screen on the caller's thread, else the size rule
            pred = rec.prediction
            algorithm = pred.algorithm if pred is not None else algorithms.choose(x.nbytes, p)
        if algorithm == "hierarchical" and on_device:
            # its plain node Reduce and Bcast take host buffers; a rank whose buffer is on
            # the host runs hierarchical, and the agreement below reports the mismatch
            algorithm = "ring"
        settings = f"Allreduce n={x.size} {x.dtype} op={opname} alg={algorithm}"
        memory = engine.memory(on_device)
        # Speculative screening: the ring's encoders find unsafe data while it runs, so the
        # agreement checks only the settings (no scan of the input first)
        guarded = (algorithm in SPECULATIVE
                   and model.screens_in_encoder(pol.codec, on_device))
        reason = self._agree(engine, "Allreduce", pol, None if guarded else x, x.dtype,
                             settings, p, memory)
        detail = ""
        if reason is None:
            ctx = engine.ctx(pol.codec, rec, memory)
            ctx.guarded, ctx.protect = guarded, x
            if algorithm == "cast_order":
                _cast_order_allreduce(ctx, x, out, op)
            elif algorithm == "homomorphic":
                fmt = algorithms.homomorphic.allreduce(ctx, x, out, pol.rate)
                detail = f"k={fmt.k} bits, {fmt.bits_per_value:.3g} bits/value"
            elif algorithm == "hierarchical":
                algorithms.hierarchical.allreduce(ctx, x, out, *engine.node_comms(),
                                                  engine.rail_comm())
            else:
                getattr(algorithms, algorithm).allreduce(ctx, x, out)
            reason = self._verdict(engine, ctx, "Allreduce", pol, x, x.dtype, settings, p)
        if reason is not None:
            _plain_on(engine.comm, rec, reason, MPI.Intracomm.Allreduce, (sendbuf, recvbuf, op))
            rec.sent(rec.raw_bytes)
            return
        rec.compressed(algorithm, detail or pol.codec.codec_id)

    def _allreduce_call(
        self, name: str, sendbuf: Any, recvbuf: Any, op: MPI.Op, settings: dict[str, Any]
    ) -> tuple[Resolved, Buf, Buf, Recorder, str | None]:
        """Parse and screen an (I)allreduce: (policy, send, recv, recorder, plain reason)."""
        pol = self.resolved_policy(**settings)
        rbuf = parse(recvbuf, "recvbuf")
        sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")
        _same_count(sbuf, rbuf, name)
        rec = self._call(name, sbuf.nbytes)
        return pol, sbuf, rbuf, rec, self._screen(pol, [sbuf, rbuf], sbuf.nbytes, op,
                                                  method="Allreduce", rec=rec)

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                  **settings: Any) -> None:
        if type(sendbuf) is _NDARRAY and sendbuf.nbytes < self._fast_below and not settings:
            self._stats.fast_plain("Allreduce", sendbuf.nbytes, self._fast_reason)
            return _MPI_ALLREDUCE(self, sendbuf, recvbuf, op)
        if not settings and _fast_size(self, "Allreduce", sendbuf, recvbuf):
            return _MPI_ALLREDUCE(self, sendbuf, recvbuf, op)
        pol, sbuf, rbuf, rec, reason = self._allreduce_call(
            "Allreduce", sendbuf, recvbuf, op, settings)
        if reason is not None:
            return self._plain(rec, reason, MPI.Intracomm.Allreduce, sendbuf, recvbuf, op,
                               bufs=(sbuf, rbuf))
        x, out = sbuf.data(), rbuf.data()
        self._allreduce_body(self._main_engine(), rec, pol, x, out, op, sendbuf, recvbuf,
                             sbuf.on_device)
        rec.commit()

    def Iallreduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                   **settings: Any) -> MPI.Request:
        if not settings and _fast_size(self, "Iallreduce", sendbuf, recvbuf):
            return MPI.Intracomm.Iallreduce(self, sendbuf, recvbuf, op)
        pol, sbuf, rbuf, rec, reason = self._allreduce_call(
            "Iallreduce", sendbuf, recvbuf, op, settings)
        if reason is not None:
            return self._plain(rec, reason, MPI.Intracomm.Iallreduce, sendbuf, recvbuf, op,
                               bufs=(sbuf, rbuf))
        engine, executor = self._async()
        x, out = sbuf.data(), rbuf.data()
        where = device.capture() if sbuf.on_device else (None, None)

        def work() -> None:
            with device.using_stream(*where):
                self._allreduce_body(engine, rec, pol, x, out, op, sendbuf, recvbuf,
                                     sbuf.on_device)
            rec.commit()

        req = Request.start(work, executor)
        req.record = rec  # read only once the request is complete
        return req

    def Reduce(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM, root: int = 0,  # noqa: N802
               **settings: Any) -> None:
        if not settings and _fast_size(self, "Reduce", sendbuf, recvbuf):
            return MPI.Intracomm.Reduce(self, sendbuf, recvbuf, op, root)
        pol = self.resolved_policy(**settings)
        is_root = self.Get_rank() == root
        rbuf = parse(recvbuf, "recvbuf") if is_root else None
        if is_in_place(sendbuf):
            if not is_root or rbuf is None:
                raise ValueError("Reduce: MPI.IN_PLACE is only valid as the root's sendbuf")
            sbuf = rbuf
        else:
            sbuf = parse(sendbuf, "sendbuf")
        if rbuf is not None:
            _same_count(sbuf, rbuf, "Reduce")
        rec = self._call("Reduce", sbuf.nbytes)
        reason = self._screen(pol, [sbuf] + ([rbuf] if rbuf else []), sbuf.nbytes, op,
                              method="Reduce", rec=rec)
        if reason is None and _op_name(op) != "SUM":
            reason = f"op {_op_name(op)}: Reduce compresses only SUM"
        if reason is not None:
            return self._plain(rec, reason, MPI.Intracomm.Reduce, sendbuf, recvbuf, op, root,
                               bufs=[sbuf] + ([rbuf] if rbuf else []))
        engine = self._main_engine()
        x = sbuf.data()
        p = self.Get_size()
        settings_s = f"Reduce n={x.size} {x.dtype} root={root}"
        memory = engine.memory(sbuf.on_device)
        reason = self._agree(engine, "Reduce", pol, x, x.dtype, settings_s, p, memory)
        if reason is not None:
            return self._plain(rec, reason, MPI.Intracomm.Reduce, sendbuf, recvbuf, op, root)
        ctx = engine.ctx(pol.codec, rec, memory)
        out = rbuf.data() if rbuf is not None else None
        algorithms.ring.reduce(ctx, x, out, root)
        rec.compressed("ring", pol.codec.codec_id)
        rec.commit()

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: MPI.Op = MPI.SUM,  # noqa: N802
                             **settings: Any) -> None:
        if not settings and _fast_size(self, "Reduce_scatter_block", sendbuf, recvbuf):
            return MPI.Intracomm.Reduce_scatter_block(self, sendbuf, recvbuf, op)
        p = self.Get_size()
        rbuf = parse(recvbuf, "recvbuf")
        if is_in_place(sendbuf):
            sbuf = parse(recvbuf, "recvbuf")
            rcount = sbuf.count // p if sbuf.compressible else 0
        else:
            sbuf = parse(sendbuf, "sendbuf")
            rcount = rbuf.count
        self._reduce_scatter("Reduce_scatter_block", sendbuf, recvbuf, [rcount] * p, op,
                             sbuf, rbuf, settings, MPI.Intracomm.Reduce_scatter_block,
                             (sendbuf, recvbuf, op))

    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any,  # noqa: N802
                       recvcounts: Sequence[int] | None = None, op: MPI.Op = MPI.SUM,
                       **settings: Any) -> None:
        if not settings and _fast_size(self, "Reduce_scatter", sendbuf, recvbuf):
            return MPI.Intracomm.Reduce_scatter(self, sendbuf, recvbuf, recvcounts, op)
        p = self.Get_size()
        rbuf = parse(recvbuf, "recvbuf")
        sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf")
        if recvcounts is None:
            counts = self.allgather(rbuf.count)  # what mpi4py does too
        else:
            counts = [int(c) for c in recvcounts]
            if len(counts) != p:
                raise ValueError(f"Reduce_scatter: recvcounts needs {p} entries, got {len(counts)}")
        self._reduce_scatter("Reduce_scatter", sendbuf, recvbuf, counts, op, sbuf, rbuf,
                             settings, MPI.Intracomm.Reduce_scatter,
                             (sendbuf, recvbuf, recvcounts, op))

    def _reduce_scatter(self, name: str, sendbuf: Any, recvbuf: Any, counts: list[int],
                        op: MPI.Op, sbuf: Buf, rbuf: Buf, settings: dict[str, Any],
                        plain: Callable[..., Any], args: tuple[Any, ...]) -> None:
        pol = self.resolved_policy(**settings)
        r = self.Get_rank()
        rec = self._call(name, sbuf.nbytes)
        reason = self._screen(pol, [sbuf, rbuf], sbuf.nbytes, op, method=name, rec=rec)
        if reason is None and _op_name(op) != "SUM":
            reason = f"op {_op_name(op)}: {name} compresses only SUM"
        if reason is not None:
            return self._plain(rec, reason, plain, *args, bufs=(sbuf, rbuf))
        total = sum(counts)
        if sbuf.count < total:
            raise ValueError(f"{name}: sendbuf holds {sbuf.count} values, counts need {total}")
        if rbuf.count < counts[r]:
            raise ValueError(f"{name}: recvbuf holds {rbuf.count} values, needs {counts[r]}")
        engine = self._main_engine()
        x = sbuf.data(0, total)
        memory = engine.memory(sbuf.on_device)
        reason = self._agree(engine, name, pol, x, x.dtype, f"{name} counts={counts} {x.dtype}",
                             self.Get_size(), memory)
        if reason is not None:
            return self._plain(rec, reason, plain, *args)
        collectives.reduce_scatter(engine.ctx(pol.codec, rec, memory), x, rbuf.data(), counts)
        rec.compressed("ring", pol.codec.codec_id)
        rec.commit()

    # -- data movement ----------------------------------------------------------
    def _gatherlike(self, name: str, plain: Callable[..., Any], args: tuple[Any, ...],
                    pol: Resolved, bufs: list[Buf], local: np.ndarray | None, nbytes: int,
                    settings_s: str, body: Callable[[Ctx], str | None],
                    engine: _Engine | None = None) -> Recorder | None:
        """Screen, agree, run ``body`` compressed or ``plain``; returns the recorder.
        ``body`` may return the name of the algorithm it ran (the stats' key)."""
        rec = self._call(name, nbytes)
        reason = self._screen(pol, bufs, nbytes, method=name, rec=rec)
        if reason is not None:
            self._plain(rec, reason, plain, *args, bufs=bufs)
            return None
        engine = engine or self._main_engine()
        dtype = next(b.dtype for b in bufs if b.dtype is not None)
        memory = engine.memory(bufs[0].on_device)
        settings_s = f"{settings_s} {dtype}"
        # speculative screening (see _allreduce_body): the encoders check what they send
        guarded = model.screens_in_encoder(pol.codec, bufs[0].on_device)
        reason = self._agree(engine, name, pol, None if guarded else local, dtype, settings_s,
                             1, memory)
        if reason is None:
            ctx = engine.ctx(pol.codec, rec, memory)
            ctx.guarded, ctx.protect = guarded, local
            ran = body(ctx)
            reason = self._verdict(engine, ctx, name, pol, local, dtype, settings_s, 1)
            if reason is None:
                rec.compressed(ran or name.lower(), pol.codec.codec_id)
        if reason is not None:
            _plain_on(engine.comm, rec, reason, plain, args)
            rec.sent(rec.raw_bytes)
        rec.commit()
        return rec

    def Allgather(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Allgather", sendbuf, recvbuf, per_rank=True):
            return MPI.Intracomm.Allgather(self, sendbuf, recvbuf)
        pol = self.resolved_policy(**settings)
        p, r = self.Get_size(), self.Get_rank()
        rbuf = parse(recvbuf, "recvbuf", blocks=p)
        n = rbuf.count
        if is_in_place(sendbuf):
            sbuf = rbuf
            x = rbuf.array[r * n : (r + 1) * n] if rbuf.compressible else None
        else:
            sbuf = parse(sendbuf, "sendbuf")
            x = sbuf.data() if sbuf.compressible else None
            if sbuf.compressible and rbuf.compressible and sbuf.count != n:
                raise ValueError(
                    f"Allgather: sendbuf has {sbuf.count} values, recvbuf {n} per rank"
                )
        counts, displs = [n] * p, [i * n for i in range(p)]

        def body(ctx: Ctx) -> str | None:
            assert x is not None
            engine = self._main_engine()
            if engine.local_ranks(pol, sbuf.on_device):
                collectives.allgather_nodes(ctx, x, rbuf.array, engine.layout().node_of,
                                            *engine.node_comms())
                return "allgather-hierarchical"
            collectives.allgatherv(ctx, x, rbuf.array, counts, displs)
            return None

        self._gatherlike("Allgather", MPI.Intracomm.Allgather, (sendbuf, recvbuf), pol,
                         [sbuf, rbuf], x, n * rbuf.itemsize,
                         f"Allgather n={n}", body)

    def Allgatherv(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        # its size is the largest count, which a rank cannot see without parsing the
        # v-spec: the fast path only where every size goes plain (one node under auto)
        if (not settings and self._fast_below == math.inf and type(sendbuf) is _NDARRAY
                and type(recvbuf) in (list, tuple) and recvbuf
                and type(recvbuf[0]) is _NDARRAY):  # host memory only, as every fast path
            # (counted by this rank's own bytes: the largest count would need the v-spec)
            self._stats.fast_plain("Allgatherv", sendbuf.nbytes, self._fast_reason)
            return MPI.Intracomm.Allgatherv(self, sendbuf, recvbuf)
        if not settings and self._fast_below > 0 and type(sendbuf) is _NDARRAY:
            largest = _largest_count(recvbuf)  # the same on every rank: the call's size
            if largest is not None and largest < self._fast_below:
                self._stats.fast_plain("Allgatherv", largest, self._fast_reason)
                return MPI.Intracomm.Allgatherv(self, sendbuf, recvbuf)
        pol = self.resolved_policy(**settings)
        p, r = self.Get_size(), self.Get_rank()
        rbuf = parse_v(recvbuf, p, "recvbuf")
        counts, displs = list(rbuf.counts or ()), list(rbuf.displs or ())
        if is_in_place(sendbuf):
            sbuf = rbuf
            x = None
        else:
            sbuf = parse(sendbuf, "sendbuf")
            x = sbuf.data() if sbuf.compressible else None
            if x is not None and rbuf.compressible and x.size != counts[r]:
                raise ValueError(
                    f"Allgatherv: sendbuf has {x.size} values, counts[{r}] is {counts[r]}"
                )
        local = x if x is not None or not rbuf.compressible else (
            rbuf.array[displs[r] : displs[r] + counts[r]])

        def body(ctx: Ctx) -> None:
            collectives.allgatherv(ctx, local, rbuf.array, counts, displs)

        itemsize = rbuf.itemsize
        self._gatherlike("Allgatherv", MPI.Intracomm.Allgatherv, (sendbuf, recvbuf), pol,
                         [sbuf, rbuf], local, max(counts, default=0) * itemsize,
                         f"Allgatherv counts={counts}", body)

    def Alltoall(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Alltoall", sendbuf, recvbuf):
            return MPI.Intracomm.Alltoall(self, sendbuf, recvbuf)
        pol = self.resolved_policy(**settings)
        p = self.Get_size()
        rbuf = parse(recvbuf, "recvbuf", blocks=p)
        sbuf = rbuf if is_in_place(sendbuf) else parse(sendbuf, "sendbuf", blocks=p)
        _same_count(sbuf, rbuf, "Alltoall")
        n = rbuf.count
        x = sbuf.data(0, n * p) if sbuf.compressible else None

        def body(ctx: Ctx) -> str | None:
            assert x is not None
            local = self._main_engine().local_ranks(pol, sbuf.on_device)
            collectives.alltoall(ctx, x, rbuf.array, n, local)
            return "alltoall-hierarchical" if local else None

        self._gatherlike("Alltoall", MPI.Intracomm.Alltoall, (sendbuf, recvbuf), pol,
                         [sbuf, rbuf], x, n * p * sbuf.itemsize,
                         f"Alltoall n={n}", body)

    def Bcast(self, buf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Bcast", buf, buf):
            return MPI.Intracomm.Bcast(self, buf, root)
        pol = self.resolved_policy(**settings)
        b = parse(buf, "buf")
        local = b.data() if (b.compressible and self.Get_rank() == root) else None

        def body(ctx: Ctx) -> str | None:
            engine = self._main_engine()
            if engine.local_ranks(pol, b.on_device):
                collectives.bcast_nodes(ctx, b.data(), root, engine.layout().node_of,
                                        *engine.node_comms())
                return "bcast-hierarchical"
            collectives.bcast(ctx, b.data(), root)
            return None

        self._gatherlike("Bcast", MPI.Intracomm.Bcast, (buf, root), pol, [b], local, b.nbytes,
                         f"Bcast n={b.count} root={root}", body)

    def Gather(self, sendbuf: Any, recvbuf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        if not settings and _fast_size(self, "Gather", sendbuf, recvbuf, per_rank=True):
            return MPI.Intracomm.Gather(self, sendbuf, recvbuf, root)
        pol = self.resolved_policy(**settings)
        p, r = self.Get_size(), self.Get_rank()
        rbuf = parse(recvbuf, "recvbuf", blocks=p) if r == root else None
        if is_in_place(sendbuf):
            if rbuf is None:
                raise ValueError("Gather: MPI.IN_PLACE is only valid as the root's sendbuf")
            n = rbuf.count
            sbuf = rbuf
            x = rbuf.array[r * n : (r + 1) * n] if rbuf.compressible else None
        else:
            sbuf = parse(sendbuf, "sendbuf")
            x = sbuf.data() if sbuf.compressible else None
            n = sbuf.count
        if rbuf is not None and rbuf.compressible and sbuf.compressible and rbuf.count != n:
            raise ValueError(f"Gather: sendbuf has {n} values, recvbuf {rbuf.count} per rank")
        bufs = [sbuf] + ([rbuf] if rbuf is not None else [])
        self._gatherlike("Gather", MPI.Intracomm.Gather, (sendbuf, recvbuf, root), pol, bufs, x,
                         sbuf.nbytes, f"Gather n={n} root={root}",
                         lambda ctx: collectives.gather(
                             ctx, x, rbuf.array if rbuf is not None else None, root))

    def Scatter(self, sendbuf: Any, recvbuf: Any, root: int = 0, **settings: Any) -> None:  # noqa: N802
        # the size is one rank's block: the receive buffer (the root's send buffer / p in place)
        if not settings and _fast_size(self, "Scatter", recvbuf, sendbuf, per_rank=True):
            return MPI.Intracomm.Scatter(self, sendbuf, recvbuf, root)
        pol = self.resolved_policy(**settings)
        p, r = self.Get_size(), self.Get_rank()
        in_place = is_in_place(recvbuf)
        if in_place and r != root:
            raise ValueError("Scatter: MPI.IN_PLACE is only valid as the root's recvbuf")
        sbuf = parse(sendbuf, "sendbuf", blocks=p) if r == root else None
        # the root in place keeps its own block untouched; it still takes part compressed
        rbuf = sbuf if in_place else parse(recvbuf, "recvbuf")
        assert rbuf is not None
        both = sbuf is not None and sbuf.compressible and rbuf.compressible
        if both and not in_place and sbuf.count != rbuf.count:
            raise ValueError(
                f"Scatter: sendbuf has {sbuf.count} values per rank, recvbuf {rbuf.count}"
            )
        x = sbuf.data(0, rbuf.count * p) if (sbuf is not None and sbuf.compressible) else None
        out = None if in_place else rbuf.data() if rbuf.compressible else None
        bufs = [rbuf] + ([sbuf] if sbuf is not None else [])
        self._gatherlike("Scatter", MPI.Intracomm.Scatter, (sendbuf, recvbuf, root), pol, bufs,
                         x, rbuf.nbytes, f"Scatter n={rbuf.count} root={root}",
                         lambda ctx: collectives.scatter(ctx, x, out, rbuf.count, root))

    def Iallgather(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> MPI.Request:  # noqa: N802
        if not settings and _fast_size(self, "Iallgather", sendbuf, recvbuf, per_rank=True):
            return MPI.Intracomm.Iallgather(self, sendbuf, recvbuf)
        return self._nonblocking("Iallgather", self.Allgather, MPI.Intracomm.Iallgather,
                                 (sendbuf, recvbuf), settings, parse(recvbuf, "recvbuf"))

    def Ialltoall(self, sendbuf: Any, recvbuf: Any, **settings: Any) -> MPI.Request:  # noqa: N802
        if not settings and _fast_size(self, "Ialltoall", sendbuf, recvbuf):
            return MPI.Intracomm.Ialltoall(self, sendbuf, recvbuf)
        return self._nonblocking("Ialltoall", self.Alltoall, MPI.Intracomm.Ialltoall,
                                 (sendbuf, recvbuf), settings, parse(recvbuf, "recvbuf"))

    def Ibcast(self, buf: Any, root: int = 0, **settings: Any) -> MPI.Request:  # noqa: N802
        if not settings and _fast_size(self, "Ibcast", buf, buf):
            return MPI.Intracomm.Ibcast(self, buf, root)
        return self._nonblocking("Ibcast", self.Bcast, MPI.Intracomm.Ibcast, (buf, root),
                                 settings, parse(buf, "buf"))

    def _nonblocking(self, name: str, blocking: Callable[..., None], plain: Callable[..., Any],
                     args: tuple[Any, ...], settings: dict[str, Any], main: Buf) -> MPI.Request:
        """Run a blocking method on the worker thread's private communicator.

        Calls that would go to plain MPI anyway (by the rank-consistent
        reasons) go to MPI's own nonblocking function at once.
        """
        pol = self.resolved_policy(**settings)
        method = name[1].upper() + name[2:]  # Iallgather -> Allgather
        nbytes = main.nbytes // self.Get_size() if method == "Allgather" else main.nbytes
        reason = self._screen(pol, [main], nbytes, method=method)
        if reason is not None:
            return self._plain(self._call(name, main.nbytes), reason, plain, *args,
                               bufs=(main,))
        engine, executor = self._async()
        worker_comm = _WorkerView(self, engine)
        where = device.capture() if main.on_device else (None, None)

        def work() -> None:
            with device.using_stream(*where):
                blocking.__func__(worker_comm, *args, **settings)

        return Request.start(work, executor)

    # -- point to point -----------------------------------------------------------
    def _p2p_memory(self, on_device: bool, own_pools: bool = False) -> HostMemory | DeviceMemory:
        """Memory for a point-to-point call (device: the current stream; ``own_pools`` for
        work finished on another thread)."""
        if not on_device:
            return HostMemory(Scratch())
        if own_pools:
            pools = DevicePools()
        else:
            if getattr(self, "_p2p_pools", None) is None:
                self._p2p_pools = DevicePools()
            pools = self._p2p_pools
        return DeviceMemory(pools, device.current_stream(), cuda_aware()[0])

    def _frame_for(self, name: str, buf: Any, settings: dict[str, Any]) -> tuple[Any, Recorder]:
        """The message to send: a compressed frame, or ``buf`` itself (plain)."""
        pol = self.resolved_policy(**settings)
        b = parse(buf, "buf")
        rec = self._call(name, b.nbytes)
        reason = self._screen(pol, [b], b.nbytes, collective=False)
        memory = self._p2p_memory(b.on_device)
        if reason is None:
            m = memory.max_abs(b.data()) if b.count else 0.0
            if not math.isfinite(m):
                reason = "nonfinite (NaN or Inf)"
            else:
                reason = _overflow_risk(pol, b.dtype, m, 1)
        if reason is None and p2p.frame_nbytes(pol.codec, b.data()) >= b.nbytes:
            # never longer than the plain message: receivers size their landing buffers by it
            reason = "no gain (compressed frame not smaller than the data)"
        if reason is not None:
            rec.plain(reason)
            rec.sent(b.nbytes)
            return buf, rec
        with rec.codec():
            frame = p2p.build(pol.codec, b.data(), memory)
        memory.synchronize()  # MPI reads the frame next
        rec.where(memory.label)
        rec.compressed("frame", pol.codec.codec_id)
        rec.sent(frame.nbytes)
        return frame, rec

    def _send_on(self, fn: Callable[..., Any], rec: Recorder, args: tuple[Any, ...]) -> Any:
        with rec.mpi():
            result, where = plain_mpi.call(fn, self, args)
        if rec.path == "plain":
            rec.where(where)
        return result

    def _fast_send(self, name: str, buf: Any, settings: dict[str, Any]) -> bool:
        """True (and counted) when a point-to-point call goes to plain MPI by its size alone
        (the Python side of the compiled shortcut, :mod:`mpicomp.shortcut`)."""
        if not settings and type(buf) is _NDARRAY and buf.nbytes < self._p2p_below:
            self._stats.fast_plain(name, buf.nbytes, self._p2p_reason)
            return True
        return False

    def Send(self, buf: Any, dest: int, tag: int = 0, **settings: Any) -> None:  # noqa: N802
        if self._fast_send("Send", buf, settings):
            return MPI.Intracomm.Send(self, buf, dest, tag)
        msg, rec = self._frame_for("Send", buf, settings)
        self._send_on(MPI.Intracomm.Send, rec, (msg, dest, tag))
        rec.commit()

    def Isend(self, buf: Any, dest: int, tag: int = 0, **settings: Any) -> MPI.Request:  # noqa: N802
        if self._fast_send("Isend", buf, settings):
            return MPI.Intracomm.Isend(self, buf, dest, tag)
        msg, rec = self._frame_for("Isend", buf, settings)
        req = self._send_on(MPI.Intracomm.Isend, rec, (msg, dest, tag))
        rec.commit()
        return req

    def Recv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
             status: MPI.Status | None = None, **settings: Any) -> None:
        self.resolved_policy(**settings)  # validates the settings; the sender's codec decides
        b = parse(buf, "buf")
        rec = self._call("Recv", b.nbytes)
        if not b.compressible:
            return self._plain(rec, b.reason, MPI.Intracomm.Recv, buf, source, tag, status,
                               bufs=(b,),
                               sent=0)
        # A float buffer may receive a frame, whatever this side's policy: the message
        # length says whether the sender framed it.
        st = status if status is not None else MPI.Status()
        memory = self._p2p_memory(b.on_device)
        if not b.on_device:
            # host memory: received as bytes straight into the buffer (a frame is never
            # longer than the plain message), a frame then decoded from a copy
            with rec.mpi():
                MPI.Intracomm.Recv(self, [b.data().view(np.uint8), MPI.BYTE], source, tag, st)
            return self._take_received(b, rec, st, memory)
        with rec.mpi():
            msg = MPI.Intracomm.Mprobe(self, source, tag, st)
        nbytes = st.Get_count(MPI.BYTE)

        def receive(_comm: Any, into: Any, st_: MPI.Status) -> None:
            msg.Recv(into, st_)

        if not p2p.is_frame_length(nbytes):
            rec.plain("sender sent plain data")
            with rec.mpi():
                _, where = plain_mpi.call(receive, None, (buf, st), written=lambda i: i == 0)
            rec.where(where)
        else:
            frame = _landing(memory, nbytes)
            with rec.mpi():
                plain_mpi.call(receive, None, ([frame, MPI.BYTE], st))
            _unframe(frame, b, rec, st, memory)
        rec.commit()

    def _received_frame(self, buf: Any, status: MPI.Status) -> None:
        """Decode the frame that the compiled ``Recv`` shortcut received as bytes into
        ``buf`` (a NumPy array; a message of odd length)."""
        b = parse(buf, "buf")
        rec = self._call("Recv", b.nbytes)
        self._take_received(b, rec, status, self._p2p_memory(False))

    def _take_received(self, b: Buf, rec: Recorder, status: MPI.Status,
                       memory: HostMemory | DeviceMemory) -> None:
        """A message received as bytes into host buffer ``b``: decode it there if it is a
        frame (odd length), else count it as plain data."""
        nbytes = status.Get_count(MPI.BYTE)
        if b.compressible and p2p.is_frame_length(nbytes):
            _unframe(b.data().view(np.uint8)[:nbytes].copy(), b, rec, status, memory)
        else:
            rec.plain(shortcut.RECEIVED_PLAIN)
            rec.where("host")
        rec.commit()

    def Irecv(self, buf: Any, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG,  # noqa: N802
              **settings: Any) -> MPI.Request:
        if self._fast_send("Irecv", buf, settings):
            return MPI.Intracomm.Irecv(self, buf, source, tag)
        pol = self.resolved_policy(**settings)
        b = parse(buf, "buf")
        rec = self._call("Irecv", b.nbytes)
        if not (pol.enabled and b.compressible) or b.nbytes < pol.threshold or pol.auto:
            why = "codec none" if not pol.enabled else (
                b.reason or (f"below threshold ({b.nbytes} B < {pol.threshold} B)"
                             if b.nbytes < pol.threshold else
                             P2P_AUTO))
            return self._plain(rec, why, MPI.Intracomm.Irecv, buf, source, tag, sent=0,
                               bufs=(b,))
        # The receive is posted now (MPI keeps its matching order); a frame is
        # never longer than the plain message, so the plain size is enough.
        memory = self._p2p_memory(b.on_device, own_pools=True)
        landing = _landing(memory, b.nbytes)
        status = MPI.Status()
        with rec.mpi():
            inner, _ = plain_mpi.call(MPI.Intracomm.Irecv, self, ([landing, MPI.BYTE], source, tag))
        where = device.capture() if b.on_device else (None, None)

        def work() -> None:
            inner.Wait(status)
            nbytes = status.Get_count(MPI.BYTE)
            with device.using_stream(*where):
                if p2p.is_frame_length(nbytes):
                    _unframe(landing[:nbytes], b, rec, status, memory)
                else:
                    rec.plain("sender sent plain data")
                    rec.where(memory.label)
                    target = b.array.view(np.uint8)[:nbytes]
                    if b.on_device:
                        device.copy_to_device(target, landing[:nbytes], memory.stream)
                    else:
                        target[...] = landing[:nbytes]
                # complete only when the data is in place (and before this request's
                # landing and stage buffers go back to the pool)
                memory.synchronize()
            rec.commit()

        return Request.start(work)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None,  # noqa: N802
                 source: int = MPI.ANY_SOURCE, recvtag: int = MPI.ANY_TAG,
                 status: MPI.Status | None = None, **settings: Any) -> None:
        if type(recvbuf) is _NDARRAY and self._fast_send("Sendrecv", sendbuf, settings):
            # as the Recv shortcut: received as bytes, a frame (odd length) decoded in place
            st = status if status is not None else MPI.Status()
            MPI.Intracomm.Sendrecv(self, sendbuf, dest, sendtag, (recvbuf, MPI.BYTE), source,
                                   recvtag, st)
            if p2p.is_frame_length(st.Get_count(MPI.BYTE)):
                return self._received_frame(recvbuf, st)
            return self._stats.fast_plain("Recv", recvbuf.nbytes, shortcut.RECEIVED_PLAIN)
        # a receive buffer that Recv refuses is refused before anything is sent, as
        # mpi4py's Sendrecv refuses it (a send posted first would never be matched)
        parse(recvbuf, "recvbuf")
        msg, rec = self._frame_for("Sendrecv", sendbuf, settings)
        req = self._send_on(MPI.Intracomm.Isend, rec, (msg, dest, sendtag))
        rec.commit()
        self.Recv(recvbuf, source, recvtag, status, **settings)
        req.Wait()


def _fast_size(comm: Comm, name: str, sendbuf: Any, recvbuf: Any, per_rank: bool = False) -> bool:
    """The fast plain path for bare NumPy buffers (see ``Comm._fast_plain``).

    ``per_rank``: the call's size is one rank's part of ``recvbuf`` when
    ``sendbuf`` is ``MPI.IN_PLACE`` (Allgather, Gather; Scatter passes its
    receive buffer as ``sendbuf`` and its send buffer as ``recvbuf``).
    """
    if sendbuf is MPI.IN_PLACE:
        if type(recvbuf) is not np.ndarray:
            return False
        nbytes = recvbuf.nbytes // comm.Get_size() if per_rank else recvbuf.nbytes
    elif type(sendbuf) is np.ndarray and (recvbuf is None or type(recvbuf) is np.ndarray):
        nbytes = sendbuf.nbytes  # (both in host memory, or the other one absent)
    else:
        return False
    return comm._fast_plain(name, nbytes)


def _largest_count(spec: Any) -> int | None:
    """The bytes of the largest count of a v-spec's host array, read without parsing it:
    ``[array, counts]``, ``[array, (counts, displs)]``, ``[array, counts, datatype]``,
    ``[array, (counts, displs), datatype]`` or ``[array, counts, displs, datatype]``
    (counts a list of ints, a list or tuple in a pair; the datatype an ``MPI.Datatype``
    or a type character, the counts' unit; else the array's items), as the compiled
    shortcut reads it; None for any other form (device memory, counts in an array)."""
    if (type(spec) not in (list, tuple) or not 2 <= len(spec) <= 4
            or type(spec[0]) is not _NDARRAY):
        return None
    unit = spec[0].itemsize
    if len(spec) > 2:
        datatype = spec[-1]
        if type(datatype) is str:
            datatype = MPI._typedict.get(datatype)
        if not isinstance(datatype, MPI.Datatype):
            return None
        unit = datatype.size
    counts = spec[1]
    if (len(spec) <= 3 and type(counts) is tuple and len(counts) == 2
            and type(counts[0]) in (list, tuple)):
        counts = counts[0]  # (counts, displs)
    elif type(counts) is not list:
        return None  # (a tuple of two ints reads as (count, displacement) to mpi4py)
    if not counts or not all(type(c) is int and c >= 0 for c in counts):
        return None
    return max(counts) * unit


def _landing(memory: HostMemory | DeviceMemory, nbytes: int) -> Any:
    """A new buffer a message lands in: on the device for a CUDA-aware MPI, else host."""
    if memory.wire_on_device:
        return device.as_device(device.empty(nbytes, np.uint8), "landing", sync=False)
    return np.empty(nbytes, dtype=np.uint8)


def _unframe(frame: Any, b: Buf, rec: Recorder, status: MPI.Status,
             memory: HostMemory | DeviceMemory) -> None:
    """Decode a received frame into ``b``; the status then counts values, not frame bytes."""
    codec, count, dtype, stream = p2p.parse(frame)
    if dtype != b.dtype:
        raise TypeError(f"received {dtype} values into a {b.dtype} buffer")
    if count > b.count:
        raise ValueError(f"message of {count} values does not fit the receive buffer of {b.count}")
    with rec.codec():
        memory.decode(codec, stream, b.array[:count])
    status.Set_elements(dtlib.from_numpy_dtype(dtype), count)
    rec.where(memory.label)
    rec.compressed("frame", codec.codec_id)


def _same_count(sbuf: Buf, rbuf: Buf, name: str) -> None:
    if sbuf.compressible and rbuf.compressible and sbuf.count != rbuf.count:
        raise ValueError(
            f"{name}: sendbuf has {sbuf.count} values, recvbuf {rbuf.count}; they must match"
        )


shortcut.install(Comm)


class _WorkerView(Comm):
    """The communicator as the worker thread sees it: the worker's engine for everything.

    Its calls are recorded as the nonblocking method (``Allgather`` as
    ``Iallgather``) and its plain-MPI fallbacks run on the worker's private
    communicator, never on the caller's from this thread.
    """

    def __new__(cls, owner: Comm, engine: _Engine) -> _WorkerView:
        self = super().__new__(cls, owner, policy=owner.policy)
        self._stats = owner._stats
        self._engine = engine
        # the owner's model: its screen ran (and measured what was missing) before this
        self._env_policy = owner._env_policy
        self._model = owner._model
        return self

    def _call(self, name: str, raw_bytes: int) -> Recorder:
        return super()._call("I" + name.lower(), raw_bytes)

    def _fast_plain(self, name: str, nbytes: int) -> bool:
        return False  # plain calls of the worker run on its private communicator

    def _set_plain_below(self, limit: tuple[float, str],
                         p2p: tuple[float, str] | None = None) -> None:
        self._model.plain_below = limit  # shared with the owner; no fast path here

    def _plain(self, rec: Recorder, reason: str, fn: Callable[..., Any], *args: Any,
               sent: int | None = None, bufs: Sequence[Buf] = ()) -> Any:
        assert self._engine is not None
        result = _plain_on(self._engine.comm, rec, reason, fn, args, bufs)
        rec.sent(rec.raw_bytes if sent is None else sent)
        rec.commit()
        return result


def _collective_limit(pol: Resolved, size1: bool) -> tuple[float, str]:
    """The fast path's size limit and reason for collectives under the default ``pol``
    (``size1``: a communicator of one rank, whose collectives are all plain)."""
    if not pol.enabled:
        return math.inf, "codec none"
    return (math.inf, "single rank") if size1 else (pol.threshold, "below threshold")


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


def _comm_world() -> Comm:
    """``mpicomp.COMM_WORLD`` (what a pickled ``mpicomp.COMM_WORLD`` becomes)."""
    import mpicomp

    return mpicomp.COMM_WORLD


def _plain_on(comm: Any, rec: Recorder, reason: str, fn: Callable[..., Any],
              args: tuple[Any, ...], bufs: Sequence[Buf] = ()) -> Any:
    """Record and run ``fn(comm, *args)`` as plain MPI (device buffers: see mpicomp.plain);
    ``bufs``: the call's parsed buffers, whose placement is known already."""
    rec.plain(reason)
    places = {id(plain_mpi.spec_object(b.spec)): b.place for b in bufs} if bufs else None
    with rec.mpi():
        result, where = plain_mpi.call(fn, comm, args, places=places)
    rec.where(where)
    return result


def _same_memory(bufs: Sequence[Buf]) -> None:
    """ValueError when a call mixes host and device buffers (they must be all one or other)."""
    kinds = {b.on_device for b in bufs if b.place is not Place.FOREIGN}
    if len(kinds) > 1:
        raise ValueError(
            "the buffers of one call must all be host (NumPy) or all device (CUDA) memory, "
            "got a mix"
        )


def _cast_order_allreduce(ctx: Ctx, x: Any, out: Any, op: MPI.Op) -> None:
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
