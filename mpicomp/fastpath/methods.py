"""The methods that take the plain fast path, described once.

Each :class:`FastMethod` says what kind of call a method makes, which of
its arguments gives the call's size, which other buffer must be host memory
too, and which MPI function the compiled shortcut calls for it once bound.
Where mpi4py's method takes each argument (``op``, ``root``, ``dest``,
``tag``, ...) is read from mpi4py's own signature (:func:`params`), so it is
written nowhere here. From this one table:

* :func:`mpicomp.fastpath.install.install` builds the compiled methods
  (``_shortcut.PlainMethod``: positions, keywords, kind, MPI function), which
  apply the size rule (``_shortcut.c``: a call's size is its sizing
  buffer's bytes, one rank's part of the receive buffer in place for
  :data:`PER_RANK`, a v-spec's largest count);
* the statistics read which counts are collectives', sends' or receives'
  (:data:`COLLECTIVES`, :data:`METHODS`).

:class:`PlainLimits` holds a communicator's sizes below which those calls go
plain, with the reasons; :func:`collective_limit` and :func:`p2p_limit` say
what they are under a default policy.
"""
from __future__ import annotations

import dataclasses
import inspect
import math

from mpi4py import MPI

__all__ = ["COLLECTIVES", "FAST_METHODS", "METHODS", "NO_LIMITS", "PER_RANK", "RECEIVED_PLAIN",
           "RECEIVES", "RECEIVING", "REQUIRED", "SENDS", "FastMethod", "PlainLimits",
           "collective_limit", "p2p_limit", "param_defaults", "params"]

#: the reason the stats give for the plain calls of RECEIVES
RECEIVED_PLAIN = "sender sent plain data"
#: the stats' reason for a call below the threshold (named with its size and the threshold
#: when counted: :func:`mpicomp.stats.below_threshold`)
BELOW_THRESHOLD = "below threshold"

#: the kinds of method (the compiled shortcut's too): a collective, below the state's
#: ``limit``; a send (Send, Isend, Irecv), below ``p2p_limit``; a receive, received as
#: bytes and decoded when the message is a frame; a Sendrecv, a send and a receive; a
#: Sendrecv_replace, its one buffer sent and received (as bytes where a frame can arrive)
KINDS = ("collective", "send", "receive", "sendrecv", "replace")


@dataclasses.dataclass(frozen=True)
class FastMethod:
    """One method of the fast path."""

    name: str
    kind: str
    #: the MPI function the compiled shortcut calls itself once bound (the receiving kinds
    #: and a v-spec collective by their kind; one of ``_shortcut.FUNCTIONS``)
    mpi: str
    #: the parameter whose bytes are the call's size
    sized: str = "sendbuf"
    #: the call's other buffer: host memory too (an array, or None off the root)
    other: str | None = "recvbuf"
    #: the parameter whose v-spec's largest count is the call's size (Allgatherv)
    vspec: str | None = None
    #: in place, the call's size is one rank's part of the receive buffer
    per_rank: bool = False
    #: the keywords a call may pass and still take the shortcut (default: every parameter
    #: of mpi4py's method; the compiled method puts them in their places)
    keywords: tuple[str, ...] | None = None
    #: whether its calls hand this rank's bytes to MPI to send (a receive's do not: the
    #: stats count no wire bytes for it)
    sends: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"FastMethod {self.name}: kind one of {KINDS}, got {self.kind!r}")


def _collective(name: str, mpi: str, **kw: object) -> FastMethod:
    return FastMethod(name, "collective", mpi, **kw)


#: every method of the fast path; a method's index (its counts in a state) is its place
FAST_METHODS: tuple[FastMethod, ...] = (
    _collective("Allreduce", "MPI_Allreduce"),
    _collective("Iallreduce", "MPI_Iallreduce"),
    _collective("Reduce_scatter_block", "MPI_Reduce_scatter_block"),
    _collective("Allgather", "MPI_Allgather", per_rank=True),
    _collective("Alltoall", "MPI_Alltoall"),
    _collective("Bcast", "MPI_Bcast", sized="buf", other=None),
    _collective("Reduce", "MPI_Reduce"),
    _collective("Gather", "MPI_Gather", per_rank=True),
    _collective("Ibcast", "MPI_Ibcast", sized="buf", other=None),
    _collective("Iallgather", "MPI_Iallgather", per_rank=True),
    _collective("Ialltoall", "MPI_Ialltoall"),
    # sized by its receive buffer (the send buffer is the root's)
    _collective("Scatter", "MPI_Scatter", sized="recvbuf", other="sendbuf", per_rank=True),
    _collective("Reduce_scatter", "MPI_Reduce_scatter"),
    # sized by its receive v-spec's largest count: the same on every rank
    _collective("Allgatherv", "MPI_Allgatherv", other=None, vspec="recvbuf"),
    FastMethod("Send", "send", "MPI_Send", sized="buf", other=None),
    FastMethod("Isend", "send", "MPI_Isend", sized="buf", other=None),
    FastMethod("Irecv", "send", "MPI_Irecv", sized="buf", other=None, sends=False),
    FastMethod("Recv", "receive", "MPI_Recv", sized="buf", other=None, sends=False),
    # its send below p2p_limit, its receive (positional, as the receive takes it) counted
    # as a Recv
    FastMethod("Sendrecv", "sendrecv", "MPI_Sendrecv", other=None),
    FastMethod("Sendrecv_replace", "replace", "MPI_Sendrecv_replace", sized="buf", other=None),
)

#: the methods' names, in the table's order
METHODS = tuple(m.name for m in FAST_METHODS)
#: the collectives: plain below the state's ``limit``
COLLECTIVES = tuple(m.name for m in FAST_METHODS if m.kind == "collective")
#: point to point: plain below the state's ``p2p_limit``
SENDS = tuple(m.name for m in FAST_METHODS if m.kind == "send")
#: received as bytes straight into the buffer once the state has a ``p2p_limit``
RECEIVES = tuple(m.name for m in FAST_METHODS if m.kind in ("receive", "sendrecv", "replace"))
#: collectives whose in-place size is one rank's part of the receive buffer
PER_RANK = frozenset(m.name for m in FAST_METHODS if m.per_rank)
#: the receives: their plain calls send nothing
RECEIVING = frozenset(m.name for m in FAST_METHODS if not m.sends)


@dataclasses.dataclass(frozen=True)
class PlainLimits:
    """Below which sizes a communicator's calls without settings go to plain MPI at once,
    and why: one object, which the compiled shortcut's state copies
    (:func:`mpicomp.fastpath.install.update`) and the statistics name the reasons from."""

    #: collectives of fewer bytes (their sizing buffer's) go plain; 0: none
    collective: float = 0.0
    collective_reason: str = ""
    #: sends of fewer bytes go plain, and receives take the fast path, when > 0
    p2p: float = 0.0
    p2p_reason: str = ""


#: no fast path (the default policy not known yet; debug mode)
NO_LIMITS = PlainLimits()


def params(name: str) -> tuple[str, ...]:
    """mpi4py's parameter names of ``MPI.Intracomm.<name>`` after the communicator."""
    return tuple(inspect.signature(getattr(MPI.Intracomm, name)).parameters)[1:]


def keywords(method: FastMethod) -> tuple[str, ...]:
    """The keywords a call may pass and still take the shortcut."""
    if method.keywords is not None:
        return method.keywords
    return params(method.name)


#: the default of a parameter that has none (:func:`param_defaults`)
REQUIRED = object()


def param_defaults(name: str) -> tuple[object, ...]:
    """The defaults of mpi4py's parameters of ``MPI.Intracomm.<name>`` after the
    communicator (:data:`REQUIRED` where there is none): the compiled method fills a
    keyword call's gaps with them."""
    found = tuple(inspect.signature(getattr(MPI.Intracomm, name)).parameters.values())[1:]
    return tuple(REQUIRED if p.default is inspect.Parameter.empty else p.default
                 for p in found)


def collective_limit(enabled: bool, threshold: float, size1: bool) -> tuple[float, str]:
    """The collectives' size limit and reason under a default policy (``enabled``: its
    codec is not ``none``; ``size1``: a communicator of one rank, whose collectives are all
    plain)."""
    if not enabled:
        return math.inf, "codec none"
    return (math.inf, "single rank") if size1 else (threshold, BELOW_THRESHOLD)


def p2p_limit(enabled: bool, auto: bool, threshold: float, auto_reason: str) -> tuple[float, str]:
    """Point-to-point sends' size limit and reason under a default policy (``auto``: the
    codec ``auto``, which leaves point to point plain, for ``auto_reason``)."""
    if not enabled:
        return math.inf, "codec none"
    return (math.inf, auto_reason) if auto else (threshold, BELOW_THRESHOLD)
