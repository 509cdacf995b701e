"""The plain-MPI shortcut: small calls of the default policy at about mpi4py's own cost.

Once a communicator's default policy knows that calls below some size go to
plain MPI (below the threshold; with the codec ``auto`` on one node, every
collective on host memory; with ``auto`` or ``none``, every point-to-point
message), a call there should cost what mpi4py's method costs.
The Python method of a subclass cannot: its call, its tests and its stats
count added 0.6 to 0.8 us to a 3 us Allreduce of 4 bytes. So
:func:`install` makes each method of :data:`mpicomp.fastpath.methods.FAST_METHODS`
(the one description of each: kind, sizing argument, MPI function; mpi4py's
signature gives the positions) on the class a compiled
:class:`PlainMethod` (``_shortcut.c``), a method descriptor like
mpi4py's own methods, and :func:`update` gives a communicator a
:class:`ShortcutState` (its size limit and its counts) in the class's
``_shortcut`` slot. A call without keyword arguments (but mpi4py's own
parameters, which it puts in their places, mpi4py's defaults in the gaps) whose
first buffer is
exactly a ``numpy.ndarray`` of fewer bytes than the limit (and whose other
buffer, if any, is one too or None) is counted by size and handed to
mpi4py's method; every other call, and every call on a communicator without
a state, runs the Python method, which decides as before. A subclass that
overrides one of these methods keeps its override.
``Recv`` cannot know whether its sender compressed: it receives the message
as bytes straight into the buffer and hands a message of odd length (a
compressed frame, :mod:`mpicomp.frame_format`; no shorter than ``frame_format.MIN_FRAME_NBYTES``) to
``Comm._received_frame``, which decodes it in place.
Where mpi4py runs on MPICH (MPI handles are C ints), :func:`bind_mpi` lets the
receiving methods call ``MPI_Recv``/``MPI_Sendrecv`` and ``MPI_Get_count`` of the
library mpi4py loaded themselves, on a positional call with contiguous arrays,
so that learning the length costs nothing over mpi4py's own ``Recv``; and
the blocking collectives and sends call MPI themselves (each its MPI function,
``mpi`` in :data:`mpicomp.fastpath.methods.FAST_METHODS`) on
contiguous arrays of one dtype whose counts match (with a predefined op; a
``Reduce_scatter`` without ``recvcounts`` gathers them first, as mpi4py does), so
that the shortcut's own test and count are paid for by skipping mpi4py's
argument parsing. The nonblocking ones (``Isend``, ``Irecv``, ``Iallreduce``,
``Ibcast``, ``Iallgather``, ``Ialltoall``) do too where mpi4py's ``Request``
has the layout of mpi4py 4's public header (checked at bind time on a request
of mpi4py's own): they return an ``MPI.Request`` that keeps the buffers alive
until it completes, as mpi4py's own calls do.
``comm.stats()`` folds the counts in (:meth:`mpicomp.stats.Stats.attach_shortcuts`).

Without a C compiler at install time the extension is missing, ``COMPILED``
is False and nothing is installed: every call runs its Python method,
correct but slower on tiny calls.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import frame_format
from ..backend import mpi_library
from .methods import (
    FAST_METHODS,
    METHODS,
    RECEIVED_PLAIN,
    REQUIRED,
    PlainLimits,
    keywords,
    param_defaults,
    params,
)

try:
    from . import _shortcut
    from ._shortcut import PlainMethod, ShortcutState
except ImportError:  # built without a C compiler (setup.py marks the extension optional)
    _shortcut = PlainMethod = ShortcutState = None

__all__ = ["COMPILED", "METHODS", "RECEIVED_PLAIN", "PlainMethod", "ShortcutState", "bind_mpi",
           "install", "update"]

#: whether the compiled shortcut is there
COMPILED = PlainMethod is not None

#: the ops those collectives take to MPI directly (SUM first: mpi4py's default); any other
#: op goes through mpi4py's method
PREDEFINED_OPS = (MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN, MPI.LAND, MPI.LOR, MPI.LXOR, MPI.BAND,
                  MPI.BOR, MPI.BXOR)


def install(cls: type) -> None:
    """Make :data:`METHODS` of ``cls`` (which has a ``_shortcut`` slot) compiled shortcuts."""
    if not COMPILED:
        return
    receive = {"frame": cls._received_frame, "status_type": MPI.Status, "byte": MPI.BYTE,
               "defaults": (MPI.ANY_SOURCE, MPI.ANY_TAG), "recv_index": METHODS.index("Recv"),
               "min_frame": frame_format.MIN_FRAME_NBYTES}
    for index, m in enumerate(FAST_METHODS):
        names = params(m.name)

        def at(param: str | None, names: tuple[str, ...] = names) -> int:
            return names.index(param) + 1 if param else 0

        receiving = {}
        if m.kind in ("receive", "sendrecv"):
            receiving = receive
        elif m.kind == "replace":  # (dest, sendtag) before its source and tag
            receiving = {**receive, "defaults": (None, 0, *receive["defaults"])}
        setattr(cls, m.name, PlainMethod(
            getattr(MPI.Intracomm, m.name), cls.__dict__[m.name], np.ndarray,
            cls.__dict__["_shortcut"], index, names, keywords(m), kind=m.kind, mpi=m.mpi,
            sized=at(m.sized), other=at(m.other), vspec=at(m.vspec), per_rank=m.per_rank,
            param_defaults=param_defaults(m.name), required=REQUIRED, **receiving))
    bind_mpi()


def bind_mpi(on: bool = True) -> bool:
    """Let the compiled methods call their MPI functions themselves
    (``on``), or go through mpi4py's methods again.

    Binds only where that is safe to do from C without MPI's headers: the
    extension is there, the MPI is MPICH (its handles are C ints, checked by
    mpi4py's own handle sizes) and its library is already loaded by mpi4py
    (found in the process's memory map and opened without loading anything).
    Returns whether those calls now call MPI themselves.
    """
    if not COMPILED:
        return False
    if not on:
        return bool(_shortcut.bind(None))
    path = mpi_library.path()
    if (path is None or not MPI.Get_library_version().startswith("MPICH")
            or MPI._sizeof(MPI.Comm) != 4 or MPI._sizeof(MPI.Datatype) != 4):
        return False
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        addresses = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                     for name in _shortcut.FUNCTIONS}
    except (OSError, AttributeError):
        return False
    types = {letter: datatype.handle for letter, datatype in MPI._typedict.items()
             if len(letter) == 1 and datatype.handle}
    ops = tuple(op.handle for op in PREDEFINED_OPS)
    capi = MPI.__pyx_capi__
    if not _shortcut.bind(addresses, capi["PyMPIComm_Get"], capi["PyMPIStatus_Get"],
                          capi["PyMPIOp_Get"], MPI.BYTE.handle, types, ops, MPI.Op,
                          MPI.Exception, int(MPI.IN_PLACE)):
        return False
    # a nonblocking call's Request must keep its buffers alive, as mpi4py's own do: the
    # extension fills in mpi4py's Request as mpi4py's public header lays it out, once a
    # pending request of mpi4py's own (a receive from PROC_NULL) shows that layout
    probe = MPI.COMM_SELF.Irecv(np.empty(1, np.uint8), MPI.PROC_NULL)
    _shortcut.bind_requests(capi["PyMPIRequest_New"], capi["PyMPIRequest_Get"],
                            MPI.REQUEST_NULL.handle, MPI.Request, probe)
    return True


def update(comm: Any, limits: PlainLimits) -> Any:
    """Give ``comm``'s shortcut state ``limits`` (made on first use); returns the state
    (None without the extension)."""
    if not COMPILED:
        return None
    try:
        state = comm._shortcut
    except AttributeError:
        if limits.collective <= 0 and limits.p2p <= 0:
            return None
        state = comm._shortcut = ShortcutState(len(METHODS))
        state.size = comm.Get_size()  # (in-place calls sized per rank)
    state.limit = max(limits.collective, 0.0)
    state.p2p_limit = max(limits.p2p, 0.0)
    return state
