"""mpi4py buffer specifications, parsed into what a compressed path needs.

mpi4py accepts a bare buffer, ``[buf, datatype]``, ``[buf, count, datatype]``,
``[buf, (count, displ), datatype]`` and, for the v-variants,
``[buf, counts, displs, datatype]``, ``[buf, (counts, displs), datatype]``,
``[buf, counts, datatype]`` or ``[buf, counts]`` (counts and displacements in
elements). :func:`parse` turns such a spec into a :class:`Buf`: a flat NumPy
view of the memory plus the element count (or counts) in use. Buffers the
codecs can compress are contiguous float32/float64 host buffers (NumPy
arrays, and, viewed without a copy, anything with the buffer protocol or
a CPU ``__dlpack__``: ``array.array('f')``, ``MPI.buffer``, ``bytearray``
with a float datatype in the spec, PyTorch CPU tensors) and
C-contiguous float32/float64 CUDA buffers (anything with
``__cuda_array_interface__`` or a CUDA ``__dlpack__``: CuPy, PyTorch,
Numba), which become flat Numba device arrays over the same memory;
anything else is marked so that the call goes to plain MPI unchanged.

A datatype in the spec is read for its type signature
(:mod:`mpicomp.datatypes`): counts become elements of the signature's element
type, so ranks that describe the same values with different datatypes parse
them alike. A derived datatype whose elements lie back to back is compressed
as a flat array; one with gaps (or a datatype that is not the array's own
dtype) gives a :class:`Buf` with a ``veto``: it counts and sizes like the
others' buffers, but this rank cannot compress it, so the agreement step
sends the whole call plain on every rank.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
from mpi4py import MPI

from . import cuda_runtime as cuda
from . import datatypes
from .backend import placement

__all__ = ["COMPRESSIBLE_DTYPES", "Buf", "gather", "is_in_place", "parse", "parse_v",
           "same_count"]

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
    place: placement.Place = placement.Place.HOST  #: where the memory lives
    #: why this rank cannot compress a buffer whose type signature others may compress
    #: ('': none); ``array`` is then a placeholder of the signature's size (no memory),
    #: so the call screens and agrees as on every other rank, and then goes plain
    veto: str = ""
    #: the dimensions of the NumPy array the spec names, in its memory order (its shape, or
    #: reversed for a Fortran-ordered one); () for a flat array or any other buffer: the
    #: field errbound's ``shape="auto"`` predicts across
    shape: tuple[int, ...] = ()

    @property
    def on_device(self) -> bool:
        """A CUDA buffer mpicomp may touch (``array`` is then a flat Numba device array)."""
        return self.place is placement.Place.DEVICE

    @property
    def compressible(self) -> bool:
        return self.array is not None and not self.veto

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


def gather(b: Buf) -> np.ndarray | None:
    """The values of a vetoed host buffer (a datatype with gaps, or not the array's dtype),
    read through its spec by MPI itself into a new contiguous array of the signature's
    element type, in signature order: what a sender of one message may compress (no other
    rank has to agree). None for a buffer mpicomp may not read on the host (device or
    foreign memory) or one that is not vetoed."""
    if not b.veto or b.place is not placement.Place.HOST or b.array is None:
        return None
    out = np.empty(b.count, b.array.dtype)
    # a message to itself on a private communicator: MPI lays the spec's values out by its
    # datatype exactly as a plain send of the spec would send them
    # (one at a time: two threads' messages would match each other's receives)
    with _SELF_LOCK:
        MPI.Intracomm.Sendrecv(_self_comm(), b.spec, 0, 0,
                               [out, MPI._typedict[out.dtype.char]], 0, 0)
    return out


_SELF: list[MPI.Intracomm] = []
_SELF_LOCK = threading.Lock()


def _self_comm() -> MPI.Intracomm:
    """A duplicate of ``MPI.COMM_SELF`` for :func:`gather`'s messages (made once)."""
    if not _SELF:
        _SELF.append(MPI.COMM_SELF.Dup())
    return _SELF[0]


def is_in_place(spec: Any) -> bool:
    """``MPI.IN_PLACE``, or ``None`` where a buffer may be in place (as mpi4py reads it)."""
    return spec is None or spec is MPI.IN_PLACE


def same_count(sbuf: Buf, rbuf: Buf, name: str) -> None:
    """ValueError when a call's send and receive buffers hold different counts."""
    if sbuf.compressible and rbuf.compressible and sbuf.count != rbuf.count:
        raise ValueError(
            f"{name}: sendbuf has {sbuf.count} values, recvbuf {rbuf.count}; they must match"
        )


def parse(spec: Any, name: str = "buffer", blocks: int = 1) -> Buf:
    """Parse a simple spec: buf, [buf, dt], [buf, count], [buf, (count, displ)],
    [buf, count, dt], [buf, (count, displ), dt] or [buf, count, displ, dt] (mpi4py's forms).

    ``blocks`` is the number of equal parts an implicit count is split into
    (e.g. the size of the communicator for an Allgather receive buffer);
    an explicit count is the MPI count argument itself. A buffer that is not
    compressible is not checked further: it goes to MPI as given, and MPI
    (mpi4py) judges it.
    """
    obj, count, displ, datatype = _split_simple(spec, name)
    where = placement.HOST if type(obj) is np.ndarray else placement.of(obj)
    lay = _layout(datatype)
    array, reason, veto = _as_array(obj, lay, name, where)
    if array is None:
        return Buf(spec, None, 0, reason, raw=_raw_nbytes(obj, where, count, blocks),
                   place=where.place)
    # counts and displacements are in the datatype's items (mpi4py's units)
    per, item_bytes = (lay.per_item, lay.extent) if lay is not None else (1, array.itemsize)
    if count is None:
        items = array.size * array.itemsize // item_bytes if item_bytes else 0
        if items % blocks:
            raise ValueError(
                f"{name}: {items} elements cannot be split into {blocks} equal parts"
            )
        count = items // blocks
    if veto:
        return Buf(spec, _placeholder(array.dtype, count * per * blocks), count * per,
                   veto, place=where.place, veto=veto)
    start = (displ or 0) * per
    _check_extent(name, array.size, start, count * per * blocks)
    return Buf(spec, array[start:], count * per, place=where.place, shape=_own_shape(obj))


def parse_v(spec: Any, size: int, name: str = "buffer") -> Buf:
    """Parse a v-spec, in mpi4py's forms: [buf, counts], [buf, (counts, displs)],
    [buf, datatype], [buf, counts, datatype], [buf, (counts, displs), datatype] or
    [buf, counts, displs, datatype]; ``counts`` a sequence of ``size`` or one integer
    (the same for every rank) or None (the buffer split as evenly as it goes),
    ``displs`` a sequence, one integer (a stride) or None (packed)."""
    if not isinstance(spec, (list, tuple)):
        obj, counts, displs, datatype = spec, None, None, None
    else:
        items = list(spec)
        displs = datatype = None
        if len(items) == 2:
            obj, counts = items
            if _is_datatype(counts):
                counts, datatype = None, counts
            elif isinstance(counts, tuple):
                counts, displs = _pair(counts, name)
        elif len(items) == 3:
            obj, counts, datatype = items
            if isinstance(counts, tuple):
                counts, displs = _pair(counts, name)
        elif len(items) == 4:
            obj, counts, displs, datatype = items
        else:
            raise ValueError(f"{name}: a v-variant buffer spec has 2 to 4 items, got {len(items)}")
    where = placement.of(obj)
    lay = _layout(datatype)
    array, reason, veto = _as_array(obj, lay, name, where)
    if array is None:
        return Buf(spec, None, 0, reason, place=where.place)
    per, item_bytes = (lay.per_item, lay.extent) if lay is not None else (1, array.itemsize)
    if counts is None:
        items = array.size * array.itemsize // item_bytes if item_bytes else 0
        base, extra = divmod(items, size)
        counts = [base + (i < extra) for i in range(size)]
    elif isinstance(counts, (int, np.integer)) and not isinstance(counts, (bool, np.bool_)):
        counts = [_count(counts, name)] * size
    counts = [c * per for c in _int_list(counts, size, f"{name} counts")]
    if veto:  # the signature's counts, packed over a placeholder
        displs = [int(d) for d in np.concatenate([[0], np.cumsum(counts)[:-1]])]
        return Buf(spec, _placeholder(array.dtype, sum(counts)), int(sum(counts)), veto,
                   tuple(counts), tuple(displs), place=where.place, veto=veto)
    if displs is None:
        displs = [int(d) for d in np.concatenate([[0], np.cumsum(counts)[:-1]])]
    elif isinstance(displs, (int, np.integer)) and not isinstance(displs, (bool, np.bool_)):
        displs = [_count(displs, name, "displacement") * per * i for i in range(size)]
    else:
        displs = [d * per for d in _int_list(displs, size, f"{name} displacements")]
    for c, d in zip(counts, displs, strict=True):
        _check_extent(name, array.size, d, c)
    return Buf(spec, array, int(sum(counts)), "", tuple(counts), tuple(displs),
               place=where.place)


# -- helpers ----------------------------------------------------------------
def _own_shape(obj: Any) -> tuple[int, ...]:
    """:attr:`Buf.shape` of the spec's object ``obj``."""
    if not isinstance(obj, np.ndarray) or obj.ndim < 2:
        return ()
    return tuple(obj.shape) if obj.flags.c_contiguous else tuple(obj.shape[::-1])


def _raw_nbytes(obj: Any, where: placement.Placement, count: int | None, blocks: int) -> int:
    """Bytes a plain-MPI buffer moves per block (best effort: for the statistics only)."""
    try:
        if where.place is not placement.Place.HOST:
            cai = getattr(obj, "__cuda_array_interface__", None)
            if cai is None:  # a DLPack or simulator device array
                d = cuda.as_device(obj)
                itemsize = np.dtype(d.dtype).itemsize
                nbytes = d.size * itemsize
            else:
                itemsize = np.dtype(cai["typestr"]).itemsize
                nbytes = int(np.prod(cai["shape"], dtype=np.int64)) * itemsize
        else:
            mv = memoryview(obj)
            itemsize, nbytes = mv.itemsize, mv.nbytes
    except (TypeError, ValueError, KeyError):
        return 0
    if count is not None:
        return count * itemsize
    return nbytes // max(blocks, 1)


def _split_simple(spec: Any, name: str) -> tuple[Any, int | None, int | None, Any]:
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    items = list(spec)
    displ: Any = None
    if len(items) == 2:
        obj, count = items
        if _is_datatype(count):
            return obj, None, None, count
        datatype = None
        if isinstance(count, (tuple, list)):
            count, displ = _pair(count, name)
    elif len(items) == 3:
        obj, count, datatype = items
        if isinstance(count, (tuple, list)):
            count, displ = _pair(count, name)
    elif len(items) == 4:
        obj, count, displ, datatype = items
    else:
        raise ValueError(
            f"{name}: a buffer spec is buf or a list/tuple of 2 to 4 items ([buf, datatype], "
            f"[buf, count, datatype], [buf, (count, displ), datatype], "
            f"[buf, count, displ, datatype]); got {len(items)} items"
        )
    return (obj, None if count is None else _count(count, name),
            None if displ is None else _count(displ, name, "displacement"), datatype)


def _is_datatype(value: Any) -> bool:
    """An MPI datatype where mpi4py takes one: a Datatype or a type character such as 'f'."""
    return isinstance(value, (MPI.Datatype, str))


def _pair(value: Any, name: str) -> tuple[Any, Any]:
    if len(value) != 2:
        raise ValueError(f"{name}: expected (count, displacement), got {value!r}")
    return value[0], value[1]


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


def _layout(datatype: Any) -> datatypes.Layout | None:
    """The spec's datatype read for its type signature (None: no datatype given); a type
    character of mpi4py's is its predefined datatype."""
    if datatype is None:
        return None
    datatype = datatypes.resolve(datatype)
    if not isinstance(datatype, MPI.Datatype):
        return datatypes.Layout(None, reason=f"datatype given as {datatype!r}, not an "
                                             "MPI.Datatype or a type character")
    return datatypes.layout(datatype)


def _placeholder(dtype: np.dtype, size: int) -> np.ndarray:
    """A read-only array of ``size`` values that occupies no memory: a vetoed buffer's
    stand-in (its size and dtype are read, never its values)."""
    return np.broadcast_to(np.zeros(1, dtype), (size,))


def _as_array(obj: Any, lay: datatypes.Layout | None, name: str,
              where: placement.Placement) -> tuple[Any, str, str]:
    """A flat view of ``obj`` in the signature's element type (NumPy, or a Numba device
    array for a CUDA buffer) and ``''``; or ``(None, reason, '')``: not compressible on
    any rank; or ``(array, reason, reason)``: a veto (a float signature this rank's
    layout cannot compress: a datatype with gaps, or not the array's own dtype; the
    array then only gives the element type and the bytes)."""
    element = None
    if lay is not None:
        if lay.element is None:
            return None, lay.reason, ""
        if lay.element not in COMPRESSIBLE_DTYPES:
            return None, f"dtype {lay.element} is not float32/float64", ""
        element = lay.element
    if where.place is placement.Place.FOREIGN:
        return _foreign(obj, element, where.reason)
    if where.on_device:
        arr = cuda.as_device(obj, name)
        dt = np.dtype(arr.dtype)
    else:
        if not isinstance(obj, np.ndarray):
            obj, reason = _host_view(obj, element)
            if obj is None:
                return None, reason, ""
        if not (obj.flags.c_contiguous or obj.flags.f_contiguous):
            raise ValueError(  # mpi4py refuses it too
                f"{name}: the array must be contiguous (shape {obj.shape}, strides "
                f"{obj.strides}); pass a contiguous copy, e.g. numpy.ascontiguousarray(x)"
            )
        arr = obj.reshape(-1, order="A")
        dt = arr.dtype
    if element is not None and element != dt:
        assert lay is not None
        why = f"MPI datatype {lay.name or element} is not the array's dtype {dt}"
        return _placeholder(element, arr.size * dt.itemsize // element.itemsize), why, why
    if dt not in COMPRESSIBLE_DTYPES:
        return None, f"dtype {dt} is not float32/float64", ""
    if lay is not None and not lay.dense:
        return arr, lay.reason, lay.reason
    return arr, "", ""


def _foreign(obj: Any, element: np.dtype | None, reason: str) -> tuple[Any, str, str]:
    """A CUDA buffer mpicomp must not touch: a veto when its interface names float values
    (another rank may pass the same values in memory mpicomp compresses), else plain."""
    cai = cuda.interface(obj)
    try:
        dt = np.dtype(cai["typestr"]) if cai is not None else None
        size = int(np.prod(cai["shape"], dtype=np.int64)) if cai is not None else 0
    except (TypeError, KeyError, ValueError):
        dt = None
    element = element if element is not None else dt
    if dt is None or element not in COMPRESSIBLE_DTYPES:
        return None, reason, ""
    return _placeholder(element, size * dt.itemsize // element.itemsize), reason, reason


#: buffer formats of raw bytes: MPI reads them through the spec's datatype
_BYTE_FORMATS = ("B", "b", "c")


def _host_view(obj: Any, element: np.dtype | None) -> tuple[np.ndarray | None, str]:
    """A NumPy view (no copy) of a host buffer that is not an ndarray, found the way mpi4py
    finds one: the buffer protocol (``array.array``, ``bytearray``, ``MPI.buffer``,
    ``memoryview``, ...), else a CPU ``__dlpack__`` (PyTorch CPU tensors, ...); or
    ``(None, reason)``. Raw bytes take the element type of the spec's datatype
    (``element``)."""
    try:
        mv = memoryview(obj)
    except TypeError:
        mv = None
    if mv is None:
        if getattr(obj, "__dlpack__", None) is None:
            return None, f"{type(obj).__name__} has neither the buffer protocol nor __dlpack__"
        return _dlpack_view(obj, element)
    if not mv.c_contiguous:
        return None, f"{type(obj).__name__}: a buffer that is not C-contiguous"
    if mv.format in _BYTE_FORMATS:
        if element is None:
            return None, f"{type(obj).__name__} of bytes without a float MPI datatype"
        dt = element
        if mv.nbytes % dt.itemsize:
            return None, f"{mv.nbytes} bytes are not a whole number of {dt} values"
    else:
        try:
            dt = np.dtype(mv.format)
        except TypeError:
            return None, f"buffer format {mv.format!r} has no numpy dtype"
    return np.frombuffer(mv.cast("B"), dtype=dt), ""


def _dlpack_view(obj: Any, element: np.dtype | None) -> tuple[np.ndarray | None, str]:
    """A host DLPack object's memory as a NumPy view, read by mpi4py's own DLPack consumer
    (``MPI.buffer``: the memory MPI would get; NumPy's consumer crashed on exporters mpi4py
    accepts). The element type: the spec's datatype, else the object's ``dtype`` by name
    (``float32``, ``torch.float32``)."""
    try:
        raw = memoryview(MPI.buffer(obj))
    except Exception as exc:  # noqa: BLE001 - whatever mpi4py refuses goes to it as given
        return None, f"{type(obj).__name__}: mpi4py reads no host memory through DLPack ({exc})"
    if element is not None:
        dt = element
    else:
        try:
            dt = np.dtype(str(getattr(obj, "dtype", "")).removeprefix("torch."))
        except TypeError:
            return None, f"{type(obj).__name__}: DLPack object of unknown dtype, no datatype"
    if dt.itemsize == 0 or raw.nbytes % dt.itemsize:
        return None, f"{raw.nbytes} bytes are not a whole number of {dt} values"
    return np.frombuffer(raw, dtype=dt), ""
