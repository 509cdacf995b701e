"""What an MPI datatype in a buffer spec means for compression: its type signature.

MPI lets the ranks of one call describe their buffers with different
datatypes as long as the *type signatures* match: a root may pass
``[x, 1, MPI.DOUBLE.Create_contiguous(n)]`` where the others pass
``[x, n, MPI.DOUBLE]``, or a strided ``Create_vector`` over a larger array.
So a compressed path cannot decide from a rank's datatype alone; it decides
from what every rank agrees on: the signature's element type and count.
:func:`layout` reads that from a datatype (a predefined one, a type
character of mpi4py's, or a derived one, by MPI's own decoding) and says
whether the datatype's memory is a dense run of those elements in signature
order (then the buffer is compressed as a flat array) or not (then this rank
cannot compress its buffer, and the whole call goes plain on every rank: see
:mod:`mpicomp.decision.agreement`, the agreement step's veto).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

__all__ = ["Layout", "layout", "resolve"]

#: combiners whose datatype is its base type's elements one after another, in order
_DENSE_COMBINERS = ("CONTIGUOUS", "DUP")


@dataclasses.dataclass(frozen=True)
class Layout:
    """The type signature of one item of a datatype, and how its memory lies.

    ``element`` is the NumPy dtype of every element of the signature when it
    is one predefined type (None: a signature of several types, or of a type
    NumPy cannot name; ``reason`` then says which); ``per_item`` the number
    of those elements in one item (``Get_size() / element.itemsize``);
    ``dense`` whether an item's elements lie back to back in signature
    order with consecutive items abutting (lower bound 0, extent = size).
    """

    element: np.dtype | None
    per_item: int = 1
    dense: bool = True
    extent: int = 0
    reason: str = ""
    name: str = ""  #: the datatype's name (MPI_DOUBLE), for the reasons the stats give


def resolve(datatype: Any) -> Any:
    """An ``MPI.Datatype`` for mpi4py's type character (``"f"`` is ``MPI.FLOAT``), else
    ``datatype`` itself."""
    if isinstance(datatype, str):
        return MPI._typedict.get(datatype, datatype)
    return datatype


def layout(datatype: MPI.Datatype) -> Layout:
    """The :class:`Layout` of ``datatype`` (predefined or derived, committed or not)."""
    name = datatype.Get_name() or "derived datatype"
    if datatype.is_predefined:
        element = _numpy(datatype)
        if element is None or element.fields is not None or element.subdtype is not None:
            return Layout(None, reason=f"datatype {name} has no single numpy element type",
                          name=name)
        return Layout(element, 1, True, datatype.extent, name=name)
    leaves: set[int] = set()
    named: list[MPI.Datatype] = []
    dense = _walk(datatype, leaves, named)
    if len(named) != 1:
        return Layout(None, reason=f"{name}: its type signature mixes element types", name=name)
    element = _numpy(named[0])
    if element is None or element.fields is not None or element.subdtype is not None:
        return Layout(None, reason=f"{name}: its elements have no single numpy type", name=name)
    size = datatype.size
    per_item = size // element.itemsize if element.itemsize else 0
    dense = dense and datatype.lb == 0 and datatype.extent == size and datatype.true_lb == 0
    return Layout(element, per_item, dense, datatype.extent,
                  "" if dense else f"{name}: its elements do not lie back to back", name)


def _walk(datatype: MPI.Datatype, leaves: set[int], named: list[MPI.Datatype]) -> bool:
    """Collect the predefined types under ``datatype`` (once each, in ``named``); True when
    every combiner on the way keeps its base type's elements back to back, in order."""
    if datatype.is_predefined:
        if datatype.handle not in leaves:
            leaves.add(datatype.handle)
            named.append(datatype)
        return True
    basetype, combiner, info = datatype.decode()
    inner = list(info.get("datatypes", ())) if combiner == "STRUCT" else [basetype]
    try:
        dense = combiner in _DENSE_COMBINERS
        for t in inner:
            dense = _walk(t, leaves, named) and dense
        return dense
    finally:
        for t in {id(t): t for t in [basetype, *inner]}.values():
            if not t.is_predefined:
                t.Free()


def _numpy(datatype: MPI.Datatype) -> np.dtype | None:
    try:
        return np.dtype(dtlib.to_numpy_dtype(datatype))
    except (ValueError, KeyError, TypeError):
        return None
