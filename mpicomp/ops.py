"""MPI reduction ops by name: the stats', the screen's and the plans' one reading of them."""
from __future__ import annotations

from mpi4py import MPI

__all__ = ["op_name"]

_OP_NAMES = ("SUM", "MAX", "MIN", "PROD", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR",
             "MAXLOC", "MINLOC", "REPLACE", "NO_OP")


def op_name(op: MPI.Op) -> str:
    """The name of a predefined op (``"SUM"``), else ``"user-defined op"``."""
    for name in _OP_NAMES:
        if op == getattr(MPI, name, None):
            return name
    return "user-defined op"
