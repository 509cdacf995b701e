"""The plain-MPI shortcut: small calls of the default policy at about mpi4py's own cost.

Once a communicator's default policy knows that calls below some size go to
plain MPI (below the threshold; with the codec ``auto`` on one node, every
call on host memory), a call there should cost what mpi4py's method costs.
The Python method of a subclass cannot: its call, its tests and its stats
count added 0.6 to 0.8 us to a 3 us Allreduce of 4 bytes. So
:func:`install` makes each of :data:`METHODS` on the class a compiled
:class:`PlainMethod` (``mpicomp/_shortcut.c``), a method descriptor like
mpi4py's own methods, and :func:`update` gives a communicator a
:class:`ShortcutState` (its size limit and its counts) in the class's
``_shortcut`` slot. A call without keyword arguments (but mpi4py's own:
``op``, ``root``) whose first buffer is exactly a ``numpy.ndarray`` of
fewer bytes than the limit is counted by size and handed to mpi4py's method; every other call, and every call on
a communicator without a state, runs the Python method, which decides as
before. A subclass that overrides one of these methods keeps its override.
``comm.stats()`` folds the counts in (:meth:`mpicomp.stats.Stats.attach_shortcuts`).

Without a C compiler at install time the extension is missing, ``COMPILED``
is False and nothing is installed: the Python methods take their own fast
path, correct but slower on tiny calls.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

try:
    from mpicomp._shortcut import PlainMethod, ShortcutState
except ImportError:  # built without a C compiler (setup.py marks the extension optional)
    PlainMethod = ShortcutState = None

__all__ = ["COMPILED", "METHODS", "PlainMethod", "ShortcutState", "install", "update"]

#: whether the compiled shortcut is there
COMPILED = PlainMethod is not None

#: the methods whose first buffer (a bare NumPy array) gives the call's size, as in the
#: Python methods' own fast path (comm._fast_size); a method's index is its place here
METHODS = ("Allreduce", "Iallreduce", "Reduce_scatter_block", "Allgather", "Alltoall", "Bcast")

#: the keyword arguments of mpi4py's methods that a shortcut call may pass on
KEYWORDS = {"Allreduce": ("op",), "Iallreduce": ("op",), "Reduce_scatter_block": ("op",),
            "Bcast": ("root",)}


def install(cls: type) -> None:
    """Make :data:`METHODS` of ``cls`` (which has a ``_shortcut`` slot) compiled shortcuts."""
    if not COMPILED:
        return
    for index, name in enumerate(METHODS):
        python = cls.__dict__[name]
        setattr(cls, name, PlainMethod(getattr(MPI.Intracomm, name), python, np.ndarray,
                                       cls.__dict__["_shortcut"], index, KEYWORDS.get(name, ())))


def update(comm: Any, limit: float) -> Any:
    """Set ``comm``'s shortcut limit (0: none), giving it a state on first use; returns
    the state (None without the extension)."""
    if not COMPILED:
        return None
    try:
        state = comm._shortcut
    except AttributeError:
        if limit <= 0:
            return None
        state = comm._shortcut = ShortcutState()
    state.limit = max(limit, 0.0)
    return state
