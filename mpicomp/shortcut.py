"""The plain-MPI shortcut: small calls of the default policy at about mpi4py's own cost.

Once a communicator's default policy knows that calls below some size go to
plain MPI (below the threshold; with the codec ``auto`` on one node, every
collective on host memory; with ``auto`` or ``none``, every point-to-point
message), a call there should cost what mpi4py's method costs.
The Python method of a subclass cannot: its call, its tests and its stats
count added 0.6 to 0.8 us to a 3 us Allreduce of 4 bytes. So
:func:`install` makes each of :data:`METHODS` on the class a compiled
:class:`PlainMethod` (``mpicomp/_shortcut.c``), a method descriptor like
mpi4py's own methods, and :func:`update` gives a communicator a
:class:`ShortcutState` (its size limit and its counts) in the class's
``_shortcut`` slot. A call without keyword arguments (but mpi4py's own:
``op``, ``root``, ``dest``, ``source``, ``tag``, ...) whose first buffer is
exactly a ``numpy.ndarray`` of fewer bytes than the limit (and whose other
buffer, if any, is one too or None) is counted by size and handed to
mpi4py's method; every other call, and every call on a communicator without
a state, runs the Python method, which decides as before. A subclass that
overrides one of these methods keeps its override.
``Recv`` cannot know whether its sender compressed: it receives the message
as bytes straight into the buffer and hands a message of odd length (a
compressed frame, :mod:`mpicomp.p2p`) to ``Comm._received_frame``, which
decodes it in place.
Where mpi4py runs on MPICH (MPI handles are C ints), :func:`bind_mpi` lets the
receiving methods call ``MPI_Recv``/``MPI_Sendrecv`` and ``MPI_Get_count`` of the
library mpi4py loaded themselves, on a positional call with contiguous arrays,
so that learning the length costs nothing over mpi4py's own ``Recv``; and
the blocking collectives and sends of :data:`DIRECT` call MPI themselves on
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
is False and nothing is installed: the Python methods take their own fast
path, correct but slower on tiny calls.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np
from mpi4py import MPI

from .backend import mpi_library

try:
    from mpicomp import _shortcut
    from mpicomp._shortcut import PlainMethod, ShortcutState
except ImportError:  # built without a C compiler (setup.py marks the extension optional)
    _shortcut = PlainMethod = ShortcutState = None

__all__ = ["COLLECTIVES", "COMPILED", "METHODS", "RECEIVES", "SENDS", "PlainMethod",
           "ShortcutState", "bind_mpi", "install", "largest_count", "update"]

#: whether the compiled shortcut is there
COMPILED = PlainMethod is not None

#: the collectives whose first buffer (a bare NumPy array; Scatter: its receive buffer)
#: gives the call's size, as in the Python methods' own fast path (comm._fast_size):
#: plain below the state's ``limit``
COLLECTIVES = ("Allreduce", "Iallreduce", "Reduce_scatter_block", "Allgather", "Alltoall",
               "Bcast", "Reduce", "Gather", "Ibcast", "Iallgather", "Ialltoall", "Scatter",
               "Reduce_scatter", "Allgatherv")
#: collectives sized by the largest count of a v-spec (its argument), read as
#: largest_count reads it: the same size on every rank
VSPEC = {"Allgatherv": 2}
#: collectives of a single buffer
ONE_BUFFER = ("Bcast", "Ibcast")
#: point to point: plain below the state's ``p2p_limit`` (the default policy never
#: compresses them under the codec ``auto`` or ``none``)
SENDS = ("Send", "Isend", "Irecv")
#: received as bytes straight into the buffer once the state has a ``p2p_limit``; a
#: message of odd length (a compressed frame) goes to the class's ``_received_frame``
#: (Sendrecv: its send below ``p2p_limit``, its receive counted as a Recv)
RECEIVES = ("Recv", "Sendrecv")
#: every method of the shortcut; a method's index (its counts in a state) is its place here
METHODS = COLLECTIVES + SENDS + RECEIVES
#: the reason the stats give for the plain calls of RECEIVES
RECEIVED_PLAIN = "sender sent plain data"

#: the keyword arguments of mpi4py's methods that a shortcut call may pass on
KEYWORDS = {"Allreduce": ("op",), "Iallreduce": ("op",), "Reduce_scatter_block": ("op",),
            "Bcast": ("root",), "Reduce": ("op", "root"), "Gather": ("root",),
            "Scatter": ("root",), "Reduce_scatter": ("recvcounts", "op"),
            "Ibcast": ("root",), "Send": ("dest", "tag"), "Isend": ("dest", "tag"),
            "Irecv": ("source", "tag"), "Recv": ("source", "tag", "status"),
            "Sendrecv": ("status",)}


#: the MPI functions the shortcut calls itself once bound (bind_mpi)
MPI_FUNCTIONS = ("MPI_Recv", "MPI_Sendrecv", "MPI_Get_count", "MPI_Allreduce", "MPI_Bcast",
                 "MPI_Reduce", "MPI_Comm_rank", "MPI_Comm_size", "MPI_Allgather",
                 "MPI_Alltoall", "MPI_Gather", "MPI_Scatter", "MPI_Send", "MPI_Isend",
                 "MPI_Irecv", "MPI_Iallreduce", "MPI_Ibcast", "MPI_Iallgather", "MPI_Ialltoall",
                 "MPI_Allgatherv", "MPI_Reduce_scatter_block", "MPI_Reduce_scatter")
#: the ops those collectives take to MPI directly (SUM first: mpi4py's default); any other
#: op goes through mpi4py's method
PREDEFINED_OPS = (MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN, MPI.LAND, MPI.LOR, MPI.LXOR, MPI.BAND,
                  MPI.BOR, MPI.BXOR)
#: the methods that call MPI themselves once bound: their code in the extension (the
#: nonblocking ones once bind_mpi has also checked mpi4py's Request layout)
DIRECT = {"Allreduce": 1, "Bcast": 2, "Reduce": 3, "Allgather": 4, "Alltoall": 5, "Gather": 6,
          "Scatter": 7, "Send": 8, "Isend": 9, "Irecv": 10, "Iallreduce": 11, "Ibcast": 12,
          "Iallgather": 13, "Ialltoall": 14, "Reduce_scatter_block": 15, "Reduce_scatter": 16}


def install(cls: type) -> None:
    """Make :data:`METHODS` of ``cls`` (which has a ``_shortcut`` slot) compiled shortcuts."""
    if not COMPILED:
        return
    for index, name in enumerate(METHODS):
        python = cls.__dict__[name]
        extra: dict[str, Any] = {}
        if name == "Scatter":  # sized by its receive buffer (the send buffer is the root's)
            extra = {"sized": 2, "other": 1}
        elif name in VSPEC:
            extra = {"vspec": VSPEC[name]}
        elif name in COLLECTIVES and name not in ONE_BUFFER:
            extra = {"other": 2}  # the receive buffer: host memory too (or None off the root)
        elif name in SENDS:
            extra = {"kind": 1}
        elif name in RECEIVES:
            extra = {"kind": 2 if name == "Recv" else 3, "frame": cls._received_frame,
                     "status_type": MPI.Status, "byte": MPI.BYTE,
                     "defaults": (MPI.ANY_SOURCE, MPI.ANY_TAG),
                     "recv_index": METHODS.index("Recv")}
        if name in DIRECT:
            extra["direct"] = DIRECT[name]
        setattr(cls, name, PlainMethod(getattr(MPI.Intracomm, name), python, np.ndarray,
                                       cls.__dict__["_shortcut"], index, KEYWORDS.get(name, ()),
                                       **extra))
    bind_mpi()


def bind_mpi(on: bool = True) -> bool:
    """Let the compiled receives and the :data:`DIRECT` methods call MPI themselves
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
                     for name in MPI_FUNCTIONS}
    except (OSError, AttributeError):
        return False
    types = {letter: datatype.handle for letter, datatype in MPI._typedict.items()
             if len(letter) == 1 and datatype.handle}
    ops = tuple(op.handle for op in PREDEFINED_OPS)
    capi = MPI.__pyx_capi__
    if not _shortcut.bind(addresses, capi["PyMPIComm_Get"], capi["PyMPIStatus_Get"],
                          capi["PyMPIOp_Get"], MPI.BYTE.handle, types, ops, MPI.Op,
                          MPI.Exception):
        return False
    # a nonblocking call's Request must keep its buffers alive, as mpi4py's own do: the
    # extension fills in mpi4py's Request as mpi4py's public header lays it out, once a
    # pending request of mpi4py's own (a receive from PROC_NULL) shows that layout
    probe = MPI.COMM_SELF.Irecv(np.empty(1, np.uint8), MPI.PROC_NULL)
    _shortcut.bind_requests(capi["PyMPIRequest_New"], capi["PyMPIRequest_Get"],
                            MPI.REQUEST_NULL.handle, MPI.Request, probe)
    return True


def update(comm: Any, limit: float, p2p_limit: float) -> Any:
    """Set ``comm``'s shortcut limits (0: none), giving it a state on first use; returns
    the state (None without the extension)."""
    if not COMPILED:
        return None
    try:
        state = comm._shortcut
    except AttributeError:
        if limit <= 0 and p2p_limit <= 0:
            return None
        state = comm._shortcut = ShortcutState()
    state.limit = max(limit, 0.0)
    state.p2p_limit = max(p2p_limit, 0.0)
    return state


def largest_count(spec: Any) -> int | None:
    """The bytes of the largest count of a v-spec's host array, read without parsing it:
    ``[array, counts]``, ``[array, (counts, displs)]``, ``[array, counts, datatype]``,
    ``[array, (counts, displs), datatype]`` or ``[array, counts, displs, datatype]``
    (counts a list of ints, a list or tuple in a pair; the datatype an ``MPI.Datatype``
    or a type character, the counts' unit; else the array's items), as the compiled
    shortcut reads it; None for any other form (device memory, counts in an array)."""
    if (type(spec) not in (list, tuple) or not 2 <= len(spec) <= 4
            or type(spec[0]) is not np.ndarray):
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
