"""mpi4py buffer specifications, parsed into what a compressed path needs.

mpi4py accepts a bare buffer, ``[buf, datatype]``, ``[buf, count, datatype]``,
``[buf, (count, displ), datatype]`` and, for the v-variants,
``[buf, counts, displs, datatype]``, ``[buf, (counts, displs), datatype]``,
``[buf, counts, datatype]`` or ``[buf, counts]`` (counts and displacements in
elements). :func:`parse` turns such a spec into a :class:`Buf`: a flat NumPy
view of the memory plus the element count (or counts) in use. Buffers the
codecs can compress are contiguous float32/float64 NumPy arrays and
C-contiguous float32/float64 CUDA buffers (anything with
``__cuda_array_interface__`` or a CUDA ``__dlpack__``: CuPy, PyTorch,
Numba), which become flat Numba device arrays over the same memory;
anything else is marked so that the call goes to plain MPI unchanged.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from . import device

__all__ = ["COMPRESSIBLE_DTYPES", "Buf", "is_in_place", "parse", "parse_v"]

#: dtypes the compressed paths handle
COMPRESSIBLE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass
class Buf:
    """A parsed buffer spec.

    ``array`` is a flat view of the whole buffer in the spec's element type,
    or ``None`` when the buffer is not a NumPy array of a compressible dtype
    (``reason`` then says why). ``count`` is the element count the spec
    gives (or the whole array), ``counts``/``displs`` those of a v-spec.
    """

    spec: Any
    array: np.ndarray | None
    count: int
    reason: str = ""
    counts: tuple[int, ...] | None = None
    displs: tuple[int, ...] | None = None
    raw: int = 0  #: bytes of a buffer that is not compressible (for the stats)
    on_device: bool = False  #: a CUDA buffer (``array`` is then a flat Numba device array)

    @property
    def compressible(self) -> bool:
        return self.array is not None

    @property
    def dtype(self) -> np.dtype | None:
        return None if self.array is None else np.dtype(self.array.dtype)

    @property
    def itemsize(self) -> int:
        return 0 if self.array is None else np.dtype(self.array.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.raw if self.array is None else self.count * self.itemsize

    def data(self, offset: int = 0, count: int | None = None) -> np.ndarray:
        """The ``count`` elements starting at element ``offset`` (default: all of ``count``)."""
        assert self.array is not None
        n = self.count if count is None else count
        return self.array[offset : offset + n]


def is_in_place(spec: Any) -> bool:
    return spec is MPI.IN_PLACE


def parse(spec: Any, name: str = "buffer", blocks: int = 1) -> Buf:
    """Parse a simple spec: buf, [buf, dt], [buf, count, dt] or [buf, (count, displ), dt].

    ``blocks`` is the number of equal parts an implicit count is split into
    (e.g. the size of the communicator for an Allgather receive buffer);
    an explicit count is the MPI count argument itself.
    """
    obj, count, displ, datatype = _split_simple(spec, name)
    array, reason = _as_array(obj, datatype, name)
    on_device = device.is_device_array(obj)
    if array is None:
        return Buf(spec, None, 0, reason, raw=_raw_nbytes(obj, count, blocks),
                   on_device=on_device)
    if count is None:
        if array.size % blocks:
            raise ValueError(
                f"{name}: {array.size} elements cannot be split into {blocks} equal parts"
            )
        count = array.size // blocks
    _check_extent(name, array.size, displ or 0, count * blocks)
    return Buf(spec, array[displ or 0 :], count, on_device=on_device)


def parse_v(spec: Any, size: int, name: str = "buffer") -> Buf:
    """Parse a v-spec: counts and displacements per rank (``size`` of them)."""
    if not isinstance(spec, (list, tuple)):
        raise TypeError(
            f"{name}: a v-variant buffer needs counts, e.g. [buf, counts, displs, datatype], "
            f"got a bare {type(spec).__name__}"
        )
    items = list(spec)
    obj = items[0]
    datatype = items[-1] if len(items) >= 3 and isinstance(items[-1], MPI.Datatype) else None
    rest = items[1 : len(items) - (datatype is not None)]
    counts: Any
    displs: Any = None
    if len(rest) == 1 and isinstance(rest[0], tuple) and len(rest[0]) == 2 and not np.isscalar(
        rest[0][0]
    ):
        counts, displs = rest[0]
    elif len(rest) == 1:
        counts = rest[0]
    elif len(rest) == 2:
        counts, displs = rest
    else:
        raise TypeError(f"{name}: cannot read a v-variant buffer spec from {len(items)} items")
    counts = _int_list(counts, size, f"{name} counts")
    if displs is None:
        displs = list(np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int))
    displs = _int_list(displs, size, f"{name} displacements")
    array, reason = _as_array(obj, datatype, name)
    on_device = device.is_device_array(obj)
    if array is None:
        return Buf(spec, None, 0, reason, tuple(counts), tuple(displs), on_device=on_device)
    for c, d in zip(counts, displs, strict=True):
        _check_extent(name, array.size, d, c)
    return Buf(spec, array, int(sum(counts)), "", tuple(counts), tuple(displs),
               on_device=on_device)


# -- helpers ----------------------------------------------------------------
def _raw_nbytes(obj: Any, count: int | None, blocks: int) -> int:
    """Bytes a plain-MPI buffer moves per block (best effort: for the statistics only)."""
    try:
        if device.is_device_array(obj):
            d = device.as_device(obj)
            itemsize, nbytes = np.dtype(d.dtype).itemsize, d.size * np.dtype(d.dtype).itemsize
        else:
            mv = memoryview(obj)
            itemsize, nbytes = mv.itemsize, mv.nbytes
    except (TypeError, ValueError):
        return 0
    if count is not None:
        return count * itemsize
    return nbytes // max(blocks, 1)


def _split_simple(spec: Any, name: str) -> tuple[Any, int | None, int | None, Any]:
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    items = list(spec)
    if len(items) == 2:
        obj, second = items
        if isinstance(second, MPI.Datatype):
            return obj, None, None, second
        return obj, _count(second, name), None, None
    if len(items) == 3:
        obj, second, datatype = items
        if isinstance(second, tuple) and len(second) == 2:
            return obj, _count(second[0], name), _count(second[1], name, "displacement"), datatype
        return obj, _count(second, name), None, datatype
    raise TypeError(
        f"{name}: a buffer spec is buf, [buf, datatype], [buf, count, datatype] or "
        f"[buf, (count, displ), datatype]; got a {type(spec).__name__} of {len(items)} items"
    )


def _count(value: Any, name: str, what: str = "count") -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: {what} must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{name}: {what} must be >= 0, got {value}")
    return int(value)


def _int_list(values: Any, size: int, name: str) -> list[int]:
    if np.isscalar(values):
        raise TypeError(f"{name} must be a sequence of {size} integers, got {values!r}")
    out = [_count(v, name, "entry") for v in values]
    if len(out) != size:
        raise ValueError(f"{name} must have one entry per rank ({size}), got {len(out)}")
    return out


def _check_extent(name: str, size: int, displ: int, count: int) -> None:
    if displ + count > size:
        raise ValueError(
            f"{name}: count {count} at displacement {displ} needs {displ + count} elements, "
            f"the buffer has {size}"
        )


def _as_array(obj: Any, datatype: Any, name: str) -> tuple[np.ndarray | None, str]:
    """A flat view of ``obj`` in the element type (NumPy, or a Numba device array for a
    CUDA buffer), or ``(None, reason)``."""
    if datatype is not None and not isinstance(datatype, MPI.Datatype):
        raise TypeError(f"{name}: datatype must be an MPI.Datatype, got {datatype!r}")
    if device.is_device_array(obj):
        return _as_device_array(obj, datatype, name)
    if not isinstance(obj, np.ndarray):
        return None, f"not a numpy array ({type(obj).__name__})"
    if not (obj.flags.c_contiguous or obj.flags.f_contiguous):
        raise ValueError(
            f"{name}: the array must be contiguous (shape {obj.shape}, strides {obj.strides}); "
            "pass a contiguous copy, e.g. numpy.ascontiguousarray(x)"
        )
    reason = _check_datatype(obj.dtype, datatype, name)
    if reason:
        return None, reason
    flat = obj.reshape(-1, order="A")
    if flat.dtype not in COMPRESSIBLE_DTYPES:
        return None, f"dtype {flat.dtype} is not float32/float64"
    return flat, ""


def _as_device_array(obj: Any, datatype: Any, name: str) -> tuple[Any, str]:
    """A flat Numba device array over a CUDA buffer (ValueError if not C-contiguous)."""
    arr = device.as_device(obj, name)
    dt = np.dtype(arr.dtype)
    reason = _check_datatype(dt, datatype, name)
    if reason:
        return None, reason
    if dt not in COMPRESSIBLE_DTYPES:
        return None, f"dtype {dt} is not float32/float64"
    return arr, ""


def _check_datatype(dtype: np.dtype, datatype: Any, name: str) -> str:
    """'' when ``datatype`` is None or matches ``dtype``; a plain-MPI reason when it has
    no NumPy dtype; TypeError when they differ."""
    if datatype is None:
        return ""
    try:
        dt = dtlib.to_numpy_dtype(datatype)
    except (ValueError, KeyError):
        return f"datatype {datatype.Get_name() or datatype!r} has no numpy dtype"
    if dt != dtype:
        raise TypeError(
            f"{name}: the array has dtype {dtype} but the MPI datatype is "
            f"{datatype.Get_name() or datatype} ({dt}); they must match"
        )
    return ""

