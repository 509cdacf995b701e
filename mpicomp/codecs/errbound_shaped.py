"""The ``errbound`` codec's shaped mode: fields predicted across their dimensions.

A buffer with a shape of 2 or 3 dimensions (the codec's ``shape=``, or an
N-dimensional array's own) is coded by multilevel cubic interpolation
(``kernels/interp_cpu.py``): coarse to fine, each value predicted from the
reconstructed values around it along one axis, the prediction error
quantized to twice the bound at the finest level and finer at coarser ones
(their values predict every point below them). The codes, mostly zero on a
smooth field, are entropy coded by zstd (PyPI ``zstandard``). Values the
step cannot reach within the bound (through the dtype's rounding, or an
error too large to code) are kept exactly, as *escapes*.

The stream (little-endian; ``docs/format.md``, section errbound):

=========  =====================================================
bytes      field
=========  =====================================================
8          ``-step`` (float64, negative: a flat stream's step is
           never negative, so a reader tells the modes apart)
1          the dimensions ``d`` (1 to 3)
4 d        the dimensions, uint32 each (their product: the count)
4          ``F``: the zstd frame's bytes (uint32)
F          the zstd frame of the codes' two byte planes (2 bytes a value)
4          ``E``: the escapes (uint32)
4 E        their flat positions, ascending (uint32 each)
E size     their values, in the data's dtype
=========  =====================================================

A buffer whose shaped stream would not fit the codec's upper bound (the
flat stream's) is coded flat instead. Only a codec with a ``shape`` reads a
negative step as a shaped stream; without one it is a flat stream's bad
step, refused alike on the host and the device.
"""
from __future__ import annotations

import math
import struct
import threading

import numpy as np

__all__ = ["HEAD", "dims_of", "decode_into", "encode_into", "is_shaped", "used_nbytes"]

#: ``-step`` and the dimensions' count
HEAD = struct.Struct("<dB")
_U32 = struct.Struct("<I")
#: zstd's level: the fastest of the standard levels (1) codes the planes of smooth fields
#: within a few percent of level 3 (docs/decisions.md)
ZSTD_LEVEL = 1

_contexts = threading.local()


def _zstd() -> tuple[object, object]:
    """This thread's zstd compressor and decompressor, kept between calls (a new one
    cost 15 to 25 us a call: 15% to 45% of zstd's work on a 512 x 512 wave field). A
    context is for one thread at a time."""
    pair = getattr(_contexts, "pair", None)
    if pair is None:
        import zstandard

        pair = _contexts.pair = (zstandard.ZstdCompressor(level=ZSTD_LEVEL),
                                 zstandard.ZstdDecompressor())
    return pair


def dims_of(shape: tuple[int, ...] | None, count: int) -> tuple[int, int, int] | None:
    """The 3 dimensions (leading ones 1) a buffer of ``count`` values is predicted over:
    ``shape``'s trailing dimensions of the largest product that divides ``count``, with
    ``count`` over that product leading (the whole shape, several fields of it, or a slab
    of whole rows or planes, as a collective's piece of a field is); None (coded flat)
    when no product divides it or one dimension remains. More than 3 dimensions: the
    leading ones merge."""
    if shape is None or count == 0:
        return None
    dims = [int(d) for d in shape]
    for j in range(len(dims)):
        size = math.prod(dims[j:])
        if size == 0 or count % size:
            continue
        view = ([count // size] if count > size else []) + dims[j:]
        while len(view) > 3:
            view[:2] = [view[0] * view[1]]
        if sum(v > 1 for v in view) < 2:
            return None  # one dimension: nothing to predict across
        return (*([1] * (3 - len(view))), *view)  # type: ignore[return-value]
    return None


def is_shaped(buf: np.ndarray) -> bool:
    """Whether ``buf`` (8 bytes at least) is a shaped stream (its step negative)."""
    return bool(buf.size >= 8 and (buf[7] & 0x80) and np.frombuffer(
        buf[:8].tobytes(), "<f8")[0] < 0)


def encode_into(x: np.ndarray, dims: tuple[int, int, int], bound: float, out: np.ndarray
                ) -> int | None:
    """The shaped stream of ``x`` (flat, C order over ``dims``) with error ``bound`` (> 0)
    into ``out``; its bytes, or None when it would not fit ``out`` (then code it flat).
    Raises ValueError (nonfinite) for NaN/Inf: the caller's UncompressibleError."""
    from ..kernels import interp_cpu, scratch

    planes = scratch.kept("errbound_shaped.planes", 2 * x.size, np.uint8)
    bad, kept = interp_cpu.encode(x, dims, 2.0 * bound, bound, planes)
    if bad:
        raise ValueError(f"nonfinite: {bad} value(s) NaN or Inf")
    frame = _zstd()[0].compress(planes.data)
    where = interp_cpu.escape_positions(planes, dims) if kept else np.zeros(0, np.uint32)
    d = len(dims)
    total = (HEAD.size + 4 * d + 4 + len(frame) + 4 + where.size * (4 + x.itemsize))
    if total > out.size:
        return None
    HEAD.pack_into(out, 0, -2.0 * bound, d)
    at = HEAD.size
    for v in dims:
        _U32.pack_into(out, at, v)
        at += 4
    _U32.pack_into(out, at, len(frame))
    at += 4
    out[at:at + len(frame)] = np.frombuffer(frame, np.uint8)
    at += len(frame)
    _U32.pack_into(out, at, where.size)
    at += 4
    out[at:at + 4 * where.size] = where.view(np.uint8)
    at += 4 * where.size
    out[at:at + where.size * x.itemsize] = x[where].view(np.uint8)
    return at + where.size * x.itemsize


def _layout(buf: np.ndarray, count: int, itemsize: int) -> tuple[float, tuple[int, ...], int,
                                                                  int, int]:
    """(step, dims, frame start, frame bytes, escapes' start) of a shaped stream, checked:
    ValueError when its bytes cannot be one of ``count`` values (hostile bytes)."""
    if buf.size < HEAD.size:
        raise ValueError(f"errbound shaped stream: {buf.size} bytes, fewer than its header")
    neg_step, d = HEAD.unpack_from(buf, 0)
    step = -neg_step
    if not (math.isfinite(step) and step > 0) or not 1 <= d <= 3:
        raise ValueError(f"errbound shaped stream: bad header (step {step!r}, {d} dims)")
    at = HEAD.size
    need = at + 4 * d + 4
    if buf.size < need:
        raise ValueError(f"errbound shaped stream: {buf.size} bytes, fewer than its header")
    dims = tuple(_U32.unpack_from(buf, at + 4 * i)[0] for i in range(d))
    if math.prod(dims) != count:
        raise ValueError(f"errbound shaped stream of dimensions {dims} decoded into "
                         f"{count} values")
    at += 4 * d
    (nframe,) = _U32.unpack_from(buf, at)
    at += 4
    if buf.size < at + nframe + 4:
        raise ValueError(f"errbound shaped stream: its frame needs {at + nframe + 4} bytes, "
                         f"the stream holds {buf.size}")
    (nesc,) = _U32.unpack_from(buf, at + nframe)
    esc = at + nframe + 4
    if nesc > count or buf.size < esc + nesc * (4 + itemsize):
        raise ValueError(f"errbound shaped stream: {nesc} escapes need "
                         f"{esc + nesc * (4 + itemsize)} bytes, the stream holds {buf.size}")
    return step, dims, at, nframe, esc


def used_nbytes(buf: np.ndarray, count: int, itemsize: int) -> int:
    """The bytes a shaped stream of ``count`` values uses."""
    _, _, _, _, esc = _layout(buf, count, itemsize)
    (nesc,) = _U32.unpack_from(buf, esc - 4)
    return esc + nesc * (4 + itemsize)


def decode_into(buf: np.ndarray, out: np.ndarray) -> None:
    """Decode the shaped stream ``buf`` into ``out`` (flat, its count and dtype)."""
    import zstandard

    from ..kernels import interp_cpu

    n = out.size
    step, dims, at, nframe, esc = _layout(buf, n, out.itemsize)
    (nesc,) = _U32.unpack_from(buf, esc - 4)
    try:
        planes = _zstd()[1].decompress(
            buf[at:at + nframe].tobytes(), max_output_size=2 * n)
    except zstandard.ZstdError as exc:
        raise ValueError(f"errbound shaped stream: its frame does not decode ({exc})") from None
    if len(planes) != 2 * n:
        raise ValueError(f"errbound shaped stream: its frame holds {len(planes)} bytes of "
                         f"codes, {2 * n} expected")
    codes = np.frombuffer(planes, np.uint8)
    where = np.frombuffer(buf[esc:esc + 4 * nesc].tobytes(), "<u4").astype(np.int64)
    if nesc and (where[-1] >= n or (nesc > 1 and not bool((np.diff(where) > 0).all()))):
        raise ValueError("errbound shaped stream: escape positions out of order or range")
    values = np.frombuffer(buf[esc + 4 * nesc:esc + nesc * (4 + out.itemsize)].tobytes(),
                           out.dtype)
    full = (*([1] * (3 - len(dims))), *dims)
    bad = interp_cpu.decode(codes, full, step, where, values, out)
    if bad:
        raise ValueError(f"errbound shaped stream: {bad} code(s) no encoder writes")
