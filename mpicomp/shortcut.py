"""The plain-MPI shortcut: small calls of the default policy at mpi4py's own cost.

Once a communicator's default policy knows that calls below some size go to
plain MPI (below the threshold; with the codec ``auto`` on one node, every
call on host memory), a call there should cost what mpi4py's method costs.
The Python method of a subclass cannot: its call, its tests and its stats
count add 0.6 to 0.8 us to a 3.4 us Allreduce of 4 bytes. So :func:`update`
puts a compiled :class:`PlainShortcut` (``mpicomp/_shortcut.c``) in the
communicator's ``__dict__`` under each method's name. A call without
keyword arguments whose first argument is exactly a ``numpy.ndarray`` of
fewer bytes than the limit is counted by size and handed to mpi4py's
method; every other call goes on to the class's method, which decides as
before. ``comm.stats()`` folds the shortcut's counts in (see
:meth:`mpicomp.stats.Stats.attach_shortcuts`).

Without a C compiler at install time the extension is missing, ``COMPILED``
is False and nothing is installed: the class's methods then take their
Python fast path, correct but slower on tiny calls.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

try:
    from mpicomp._shortcut import PlainShortcut
except ImportError:  # built without a C compiler (setup.py marks the extension optional)
    PlainShortcut = None

__all__ = ["COMPILED", "METHODS", "PlainShortcut", "update"]

#: whether the compiled shortcut is there
COMPILED = PlainShortcut is not None

#: the methods whose first argument (a bare NumPy array) gives the call's size, as in the
#: class's Python fast path (comm._fast_size)
METHODS = ("Allreduce", "Iallreduce", "Reduce_scatter_block", "Allgather", "Alltoall", "Bcast")


def update(comm: Any, base: type, limit: float) -> dict[str, Any]:
    """Set the limit of ``comm``'s shortcuts, installing them on first use; returns them.

    ``base`` is the class whose methods the shortcuts stand for (``mpicomp.Comm``):
    a method that a subclass of it overrides gets no shortcut, so the override runs.
    A limit of 0 leaves every call to the class's methods.
    """
    shortcuts: dict[str, Any] = comm.__dict__.setdefault("_shortcuts", {})
    if not COMPILED or (limit <= 0 and not shortcuts):
        return shortcuts
    cls = type(comm)
    for name in METHODS:
        if name in shortcuts or getattr(cls, name) is not getattr(base, name):
            continue
        slow = getattr(cls, name).__get__(comm, cls)
        shortcuts[name] = PlainShortcut(comm, getattr(MPI.Intracomm, name), slow, np.ndarray)
        comm.__dict__[name] = shortcuts[name]
    for sc in shortcuts.values():
        sc.limit = max(limit, 0.0)
    return shortcuts
