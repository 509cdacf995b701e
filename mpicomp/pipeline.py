"""The one sequence every compressed call runs: screen, agree, run, verdict, fallback, commit.

A method of :class:`mpicomp.Comm` parses mpi4py's arguments and describes
its call as a :class:`Call` (its module in :mod:`mpicomp.calls` says how);
:class:`Pipeline` then runs it the same way for every collective, blocking
or not:

1. **screen** (:meth:`mpicomp.decision.screen.Screen.screen`, on the caller's
   thread, in its program order): a rank-consistent reason to go plain, or
   on; then the call's ``plan`` (an algorithm chosen, arguments checked that
   matter only when compressing);
2. **plain**: mpi4py's own method on the caller's communicator, now (the
   nonblocking method for a nonblocking call);
3. **agree** (:meth:`mpicomp.decision.agreement.Agreement.agreement`) on the private
   communicator of an :class:`~mpicomp.private_comm.PrivateComm`: the caller's thread's
   private, or the worker thread's for a nonblocking call (which returns an
   :class:`mpicomp.requests.Request` at once);
4. **run** the call's ``body`` (a compressed algorithm) in a
   :class:`~mpicomp.algorithms.common.Ctx`;
5. **verdict** (speculative calls whose encoders found unsafe data), and the
   **fallback** to plain MPI on the private communicator, on every rank alike;
6. **commit** the call's :class:`~mpicomp.stats.Recorder` to ``comm.stats()``.

Point-to-point messages have no agreement (nothing to agree with): they
screen here too, then frame their data (:mod:`mpicomp.calls.point_to_point`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from . import cuda_runtime as cuda
from . import tolerance
from .algorithms.common import Ctx, screens_in_encoder
from .backend import plain as plain_mpi
from .backend.mpi_buffers import spec_object
from .buffers import Buf
from .mailbox import Mailbox
from .requests import Request
from .stats import Recorder, Stats

if TYPE_CHECKING:
    from .decision.agreement import Agreement
    from .decision.screen import Screen
    from .policy import Resolved
    from .private_comm import PrivateComm, PrivateComms
    from .settings import CommSettings

__all__ = ["Body", "Call", "Pipeline", "plain_on"]

#: a compressed algorithm run in ``ctx`` on ``private``; returns None, the algorithm's
#: name (the stats' key; None: the method's name) or (name, detail)
Body = Callable[[Ctx, "PrivateComm"], "str | tuple[str, str] | None"]


@dataclasses.dataclass
class Call:
    """One call of a collective, as its :mod:`mpicomp.calls` module describes it."""

    #: the method (the stats' key: ``"Iallreduce"``)
    name: str
    #: its blocking collective (``"Allreduce"``): the model's and the agreement's name
    collective: str
    pol: Resolved
    #: the parsed buffers (screened; the first says host or device)
    bufs: Sequence[Buf]
    #: the raw bytes the stats, the threshold and the model count
    nbytes: int
    #: mpi4py's method and its arguments after the communicator: the plain call
    plain: Callable[..., Any]
    args: tuple[Any, ...]
    op: MPI.Op | None = None
    #: the values this rank's agreement scans (None: none)
    local: Any = None
    #: how many ranks' values a result adds (the overflow rule)
    summands: int = 1
    #: what every rank must pass alike (the dtype is added)
    settings: str = ""
    #: the compressed algorithm: a function of :mod:`mpicomp.call_bodies` bound to the
    #: call's buffers (so the pipeline calls down, never back into :mod:`mpicomp.calls`)
    body: Body | None = None
    #: speculative screening (the encoders check what they send, the agreement scans
    #: nothing); None: where the codec screens in its encoder
    guarded: bool | None = None
    #: after screening, before agreeing: the call completed (an algorithm chosen,
    #: arguments checked), or the plain-MPI reason (a plan of :mod:`mpicomp.call_bodies`)
    plan: Callable[[Call, Recorder], Call | str] | None = None
    #: mpi4py's nonblocking method for a nonblocking call (its plain case): the call then
    #: runs on the worker thread and returns a request
    nonblocking: Callable[..., Any] | None = None
    #: how many encodes' errors reach one value of the result (a tolerance divides among
    #: them: :mod:`mpicomp.tolerance`)
    encodes: int = 1


class Pipeline:
    """Runs :class:`Call` s for one communicator (see the module docs)."""

    def __init__(self, comm: MPI.Intracomm, settings: CommSettings, screen: Screen,
                 agreement: Agreement, privates: PrivateComms, stats: Stats,
                 mailbox: Mailbox) -> None:
        #: the caller's communicator (its plain calls; its rank)
        self.comm = comm
        self.settings = settings
        self.screen = screen
        self.agreement = agreement
        self.privates = privates
        self.stats = stats
        #: the private of calls on the caller's thread, once made
        self.main: PrivateComm | None = None
        #: device pools of point-to-point calls on the caller's thread (made on first use)
        self.p2p_pools: Any = None
        #: messages a probe took out of MPI's queue, for the receives to take first
        self.mailbox = mailbox
        #: the status a probe reads a message's length from when its caller passed none
        self.probe_status = MPI.Status()

    def recorder(self, name: str, raw_bytes: int) -> Recorder:
        """The record of one call, for ``comm.stats()``."""
        return Recorder(self.stats, name, self.comm.Get_rank(), raw_bytes)

    def collective(self, call: Call) -> Any:
        """Run ``call``: blocking, or (``call.nonblocking``) on the worker thread, returning
        a request."""
        rec = self.recorder(call.name, call.nbytes)
        reason = self.screen.screen(call.pol, call.bufs, call.nbytes, call.op,
                                    method=call.collective, rec=rec,
                                    blocking=call.nonblocking is None)
        if reason is None and call.plan is not None:
            planned = call.plan(call, rec)
            if isinstance(planned, str):
                reason = planned
            else:
                call = planned
        if reason is not None:
            return self.plain(rec, reason, call.nonblocking or call.plain, call.args, call.bufs)
        if call.nonblocking is None:
            self.run(self.main or self._main(), call, rec)
            return None
        private, executor = self.privates.worker()
        where = cuda.capture() if call.bufs[0].on_device else (None, None)

        def work() -> None:
            with cuda.using_stream(*where):
                self.run(private, call, rec)

        req = Request.start(work, executor)
        req.record = rec  # read only once the request is complete
        return req

    def _main(self) -> PrivateComm:
        self.main = self.privates.main()
        return self.main

    def free(self) -> None:
        """Stop the worker and free the private communicators (``comm.Free``)."""
        self.main = None
        self.privates.free()

    def run(self, private: PrivateComm, call: Call, rec: Recorder) -> None:
        """Steps 3 to 6 (see the module docs) on ``private``."""
        agreement, pol = self.agreement, call.pol
        dtype = next(b.dtype for b in call.bufs if b.dtype is not None)
        on_device = call.bufs[0].on_device
        # (host memory is the private communicator's own object: no call into
        # private_comm.py on the host path)
        memory = private.memory(True) if on_device else private.host
        settings = f"{call.settings} {dtype}"
        guarded = (screens_in_encoder(pol.codec, on_device) if call.guarded is None
                   else call.guarded)
        # a blocking call's kind learns a variable codec's stream ratio (mpicomp.ratios)
        learning = (agreement.ratios.key(call.collective, call.nbytes, dtype, on_device,
                                       pol.description)
                    if pol.codec.variable and call.nonblocking is None else None)
        veto = next((b.veto for b in call.bufs if b.veto), "")
        # (errbound's shape="auto": the field this rank's coded values form, from the
        # array of its first buffer; a rank that codes none proposes none)
        fields = pol.codec.takes_field
        field = (pol.codec.field_of(call.bufs[0].shape, call.local.size)
                 if fields and call.local is not None else None)
        reason, max_abs, dims, device = agreement.agreement(private, call.collective, pol,
                                                    None if guarded else call.local, dtype,
                                                    settings, call.summands, memory, learning,
                                                    veto, field)
        if reason is None:
            rec.where(memory.label)
            codec, bound = pol.codec, ""
            if pol.tolerance is not None:  # (errbound: never guarded, so max_abs is known)
                codec, rec.error_bound, bound = tolerance.codec_for(pol, max_abs, call.encodes)
            if fields:
                codec = codec.for_field(dims)
            ctx = Ctx(private.comm, codec, rec, memory, guarded=guarded, protect=call.local,
                      device_pieces=device)
            assert call.body is not None
            ran = call.body(ctx, private)
            # (a speculative call whose encoders found unsafe data: the verdict)
            reason = (agreement.verdict(private, ctx, call.collective, pol, call.local, dtype,
                                        settings, call.summands) if ctx.unsafe() else None)
            if reason is None:
                if learning is not None:
                    agreement.ratios.measured(learning, rec.encoded_raw, rec.encoded_used)
                algorithm, detail = ran if isinstance(ran, tuple) else (ran, "")
                rec.compressed(algorithm or call.collective.lower(),
                               detail or bound or pol.codec.codec_id)
        if reason is not None:
            plain_on(private.comm, rec, reason, call.plain, call.args)
            rec.sent(rec.raw_bytes)
        rec.commit()

    def plain(self, rec: Recorder, reason: str, fn: Callable[..., Any], args: tuple[Any, ...],
              bufs: Sequence[Buf] = (), sent: int | None = None) -> Any:
        """Record and run the plain call ``fn(comm, *args)`` on the caller's communicator."""
        result = plain_on(self.comm, rec, reason, fn, args, bufs)
        rec.sent(rec.raw_bytes if sent is None else sent)
        rec.commit()
        return result


def plain_on(comm: Any, rec: Recorder, reason: str, fn: Callable[..., Any],
             args: tuple[Any, ...], bufs: Sequence[Buf] = ()) -> Any:
    """Record and run ``fn(comm, *args)`` as plain MPI (device buffers: see mpicomp.backend.plain);
    ``bufs``: the call's parsed buffers, whose placement is known already."""
    rec.plain(reason)
    places = {id(spec_object(b.spec)): b.place for b in bufs} if bufs else None
    with rec.mpi():
        result, where = plain_mpi.run(fn, comm, args, places=places)
    rec.where(where)
    return result
