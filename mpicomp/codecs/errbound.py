"""The ``errbound`` codec: every value within a stated error bound, in as few bits as the
data need.

Each value is quantized to a multiple of ``step``, ``2 * bound`` rounded down to a
float32 value (so no decoded value is off by more than ``bound``); each block of 32
values is then coded the cheapest way, in bit planes of whole bytes (read and written
with vector operations): the bit width of its largest zigzag-coded multiple, a zero
mask and the non-zeros (sparse data such as ReLU networks' gradients), or its
residuals after a predictor of order 1 to 3 (random walks, smooth data); a
block of zeros costs its code byte only, a block the bound cannot reach
through the dtype's rounding is stored raw. The bound is absolute
(``tolerance``), or relative to the buffer's largest magnitude
(``relative=True``: ``bound = tolerance * max|x|``). With ``shape=`` a
field's values are predicted across its dimensions instead
(:mod:`.errbound_shaped`).

Streams are variable-size (``variable = True``): ``encode`` returns the
bytes used, at most :meth:`~Codec.encoded_nbytes` (the upper bound, known in
advance from count and dtype), and ``decode`` reads the stream's own length
from it. The wire format is in ``docs/format.md`` (section errbound). NaN
and Inf make ``encode`` raise :class:`~mpicomp.errors.UncompressibleError`,
as the bitplane and zfp codecs do.

>>> import numpy as np
>>> from mpicomp.codecs import get_codec
>>> c = get_codec("errbound", tolerance=1e-3)
>>> x = np.zeros(1000, np.float32); x[:10] = np.linspace(-1, 1, 10)
>>> s = c.encode(x)
>>> int(s.size) < x.nbytes // 20
True
>>> bool(np.abs(c.decode(s, out=np.empty_like(x)) - x).max() <= 1e-3)
True
"""
from __future__ import annotations

import functools
import math
import struct
from typing import Any

import numpy as np

from .. import cuda_runtime as cuda
from ..kernels.errbound_layout import (
    BAD_CODE,
    BLOCK,
    GROUP,
    HEADER_NBYTES,
    PAST_BYTES,
    TOO_LONG,
    valid_code,
)
from . import errbound_shaped
from .base import Codec, _check_stream_out

__all__ = ["HEADER_NBYTES", "ErrboundCodec"]

#: the stream's header: the quantization step, a little-endian float64
_HEADER = struct.Struct("<d")
#: whether each byte value is a code byte an encoder writes (one lookup per block when a
#: stream is read: here and in ``errbound_cpu.read_groups``, which takes it)
_VALID_CODE = valid_code(np.arange(256))


class ErrboundCodec(Codec):
    """Quantize to a step from an error bound; per block the cheapest of bit width, zero
    mask and predictor residuals (orders 1-3), in bit planes.

    Parameters
    ----------
    tolerance
        The largest error of any decoded value: absolute, or relative to the
        buffer's largest magnitude with ``relative=True``. A positive number.
    relative
        Read ``tolerance`` relative to ``max|x|`` of each encoded buffer.
    rate
        Accepted so that a policy can pass its rate to any codec; ignored (the
        bits per value follow from the bound and the data).
    shape
        ``None`` (flat, the default); the dimensions of the field the buffers
        hold (``(ny, nx)``, ``(nz, ny, nx)``: C order), whose values are then
        predicted across them (:mod:`.errbound_shaped`, host buffers), a
        buffer of a slab of whole rows or planes of it too; or ``"auto"``:
        an N-dimensional array's own shape (:meth:`encode` of a 2-D or 3-D
        array), flat otherwise.
    """

    codec_id = "errbound"
    variable = True
    reconstructs = True

    def __init__(self, tolerance: Any = 1e-3, relative: Any = False, rate: Any = None,
                 shape: Any = None):
        number = (int, float, np.integer, np.floating)
        if isinstance(tolerance, (bool, np.bool_)) or not isinstance(tolerance, number):
            raise TypeError(f"codec 'errbound': tolerance must be a number, got {tolerance!r}")
        tolerance = float(tolerance)
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise ValueError(f"codec 'errbound': tolerance must be finite and > 0, "
                             f"got {tolerance:g}")
        if not isinstance(relative, (bool, np.bool_)):
            raise TypeError(f"codec 'errbound': relative must be True or False, "
                            f"got {relative!r}")
        self.tolerance = tolerance
        self.relative = bool(relative)
        self.shape = _check_shape(shape)
        #: a shaped stream's values are decoded, not made from the input's (its head alone
        #: is not the flat head a reconstruction reads)
        self.reconstructs = self.shape is None
        self.takes_field = self.shape == "auto"

    def _params(self) -> dict[str, Any]:
        params: dict[str, Any] = {"tolerance": self.tolerance, "relative": self.relative}
        if self.shape is not None:
            params["shape"] = self.shape
        return params

    # -- a collective's field ---------------------------------------------------------
    def field_of(self, shape: tuple[int, ...], count: int) -> tuple[int, int, int]:
        """(``takes_field``) The dimensions ``count`` values of an array of ``shape`` are
        predicted over (:func:`.errbound_shaped.dims_of`), ``(0, 0, 0)`` where they form
        no field (a flat array, a count no row divides): a call's agreement takes it."""
        return errbound_shaped.dims_of(shape or None, count) or (0, 0, 0)

    def for_field(self, dims: tuple[int, int, int] | None) -> ErrboundCodec:
        """(``takes_field``) This codec with the field ``dims`` the ranks agreed on (None or
        ``(0, 0, 0)``: flat)."""
        return _with_shape(self, dims if dims and min(dims) >= 1 else None)

    # -- sizes ------------------------------------------------------------------------
    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        """The upper bound: header, code bytes, group sizes, every block raw."""
        return _head_nbytes(count) + count * dtype.itemsize

    def min_stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        """The shortest stream of ``count`` values: header, code bytes and group sizes (a
        shaped stream's header, with ``shape``)."""
        if self.shape is not None:
            return min(_head_nbytes(count), errbound_shaped.HEAD.size)
        return _head_nbytes(count)

    def bound(self, x: np.ndarray) -> float:
        """The absolute error bound an encode of ``x`` keeps."""
        if not self.relative:
            return self.tolerance
        from ..kernels.scan_cpu import max_abs

        return self.tolerance * (max_abs(x) if x.size else 0.0)

    def _step(self, bound: float) -> tuple[float, float]:
        if not math.isfinite(bound):
            raise self._uncompressible("nonfinite", "the buffer holds NaN or Inf")
        step = step_of(bound)
        return step, _inverse(step)

    # -- host kernels -----------------------------------------------------------------
    def encode(self, x: np.ndarray, out: np.ndarray | None = None, *,
               checked: bool = False) -> np.ndarray:
        """:meth:`Codec.encode`; with ``shape="auto"`` a 2-D or 3-D host array is predicted
        across its own dimensions."""
        if self.shape == "auto" and type(x) is np.ndarray and x.ndim >= 2:
            flat = self._check_input(x)
            stream = _check_stream_out(out, self.stream_nbytes(flat.size, flat.dtype))
            return stream[:self._encode_host(flat, stream, x.shape)]
        return super().encode(x, out, checked=checked)

    def encode_into(self, x: np.ndarray, out: np.ndarray) -> int:
        return self._encode_host(x, out, None if self.shape == "auto" else self.shape)

    def _encode_host(self, x: np.ndarray, out: np.ndarray, shape: Any) -> int:
        """The stream of the flat ``x``: shaped over ``shape`` where it applies, else flat."""
        from ..kernels import errbound_cpu
        from ..kernels.launch import readonly, run_kernel

        bound = self.bound(x)
        step, inv_step = self._step(bound)
        dims = errbound_shaped.dims_of(shape, x.size) if step > 0 else None
        if dims is not None:
            try:
                used = errbound_shaped.encode_into(x, dims, bound, out)
            except ValueError:
                raise self._uncompressible("nonfinite", "the buffer holds NaN or Inf") from None
            if used is not None:
                return used
        codes, sizes = _sections(out, x.size)
        single = x.dtype == np.float32
        bad, nbytes = run_kernel(errbound_cpu.encode, readonly(x), readonly(x.view(np.uint8)),
                           inv_step, step, bound, single, x.dtype.itemsize, codes, sizes, out,
                           _head_nbytes(x.size))
        if bad:
            raise self._uncompressible("nonfinite", f"{bad} block(s) hold NaN or Inf")
        _HEADER.pack_into(out, 0, step)
        return int(nbytes)

    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        from ..kernels import errbound_cpu
        from ..kernels.launch import readonly, run_kernel

        if self.shape is not None and errbound_shaped.is_shaped(buf):
            errbound_shaped.decode_into(buf, out)
            return
        count = out.size
        step = self._read_step(buf, count, buf.size)
        codes, sizes = _sections(buf, count)
        status, value = run_kernel(errbound_cpu.decode, readonly(buf), codes, sizes,
                             _head_nbytes(count), _VALID_CODE, step, _inverse(step), out,
                             out.view(np.uint8), out.dtype.itemsize)
        if status:
            raise _layout_error(int(status), int(value), count, buf.size)

    def reconstruct_into(self, x: np.ndarray, buf: np.ndarray, out: np.ndarray) -> None:
        """The values :meth:`decode_into` makes of ``buf``, the encode of ``x``, from ``x``
        and the code bytes: each value's integer times the step (a raw block's values, a
        block of zeros' 0), in a loop that vectorizes instead of reading the bits."""
        from ..kernels import errbound_cpu
        from ..kernels.launch import readonly, run_kernel

        step = self._read_step(buf, x.size, buf.size)  # (the caller's own stream: its code
        codes, _ = _sections(buf, x.size)  # bytes steer only the values made from x)
        run_kernel(errbound_cpu.reconstruct, readonly(x), codes, _inverse(step), step, out)

    def read_layout(self, buf: np.ndarray, count: int, dtype: np.dtype,
                    total: int | None = None) -> tuple[float, np.ndarray, np.ndarray]:
        """(step, code bytes, group offsets) of a stream of ``count`` values, checked:
        ValueError when its bytes cannot be a stream of this codec (hostile bytes).
        ``buf`` holds at least the header, code bytes and group sizes; ``total``: the
        stream's whole length when ``buf`` is only its head (a device stream's)."""
        total = buf.size if total is None else total
        step = self._read_step(buf, count, total)
        codes, sizes = _sections(buf, count)
        if codes.size and not bool(_VALID_CODE[codes].all()):
            raise _layout_error(BAD_CODE, 0, count, total)
        offsets = _offsets(sizes, count)
        if offsets[-1] > total:
            raise _layout_error(TOO_LONG, int(offsets[-1]), count, total)
        return step, codes, offsets

    @staticmethod
    def _read_step(buf: np.ndarray, count: int, total: int) -> float:
        """The step in a stream's header, checked with the stream's head (header, code bytes
        and group sizes) present: ValueError otherwise."""
        head = _head_nbytes(count)
        if buf.size < head:
            raise ValueError(f"errbound stream of {count} values: {total} bytes, fewer "
                             f"than its header, code bytes and group sizes ({head})")
        (step,) = _HEADER.unpack_from(buf, 0)
        if not (math.isfinite(step) and step >= 0):
            raise ValueError(f"errbound stream: bad step {step!r}")
        return step

    # -- device kernels: kernels/errbound_cuda.py --------------------------------------
    def encode_on_stream(self, x: Any, out: Any, stream: Any, checked: bool) -> int:
        """One kernel (a warp a group, offsets by a look-back on the device), then one read
        of its outcome (NaN/Inf found, the stream's length): the call's one synchronization
        (two for a relative tolerance, whose bound needs the buffer's largest value)."""
        from ..kernels import errbound_cuda, scan_cuda

        bound = (self.tolerance if not self.relative
                 else self.tolerance * scan_cuda.max_abs(x, stream))
        step, inv_step = self._step(bound)
        nblocks = -(-x.size // BLOCK)
        if not nblocks:
            header = np.frombuffer(_HEADER.pack(step), np.uint8).copy()
            out[:HEADER_NBYTES].copy_to_device(header, stream=stream)
            stream.synchronize()
            return HEADER_NBYTES
        ngroups = -(-nblocks // GROUP)
        work = _work(ngroups, stream)
        blocks, threads = errbound_cuda.launch_shape(ngroups)
        errbound_cuda.encode[blocks, threads, stream](x, x.view(np.uint8), inv_step, step, bound,
                                                      out, work)
        outcome = work[:errbound_cuda.WORK_HEAD].copy_to_host(stream=stream)
        if outcome[errbound_cuda.FLAG]:
            raise self._uncompressible("nonfinite", "the buffer holds NaN or Inf (device)")
        return int(outcome[errbound_cuda.LENGTH])

    def decode_on_stream(self, buf: Any, out: Any, stream: Any) -> None:
        """One kernel, then one read of what it found wrong (the CPU decoder's errors, in
        its order: a bad step, a code byte no encoder writes, groups needing more bytes than
        the stream holds, blocks running past their group's bytes)."""
        from ..kernels import errbound_cuda

        count = out.size
        head = _head_nbytes(count)
        if buf.size < head:
            raise ValueError(f"errbound stream of {count} values: {buf.size} bytes, fewer "
                             f"than its header, code bytes and group sizes ({head})")
        if count == 0:  # a header alone: its step checked on the host
            self._read_step(buf[:head].copy_to_host(stream=stream), count, buf.size)
            return
        nblocks = -(-count // BLOCK)
        ngroups = -(-nblocks // GROUP)
        work = _work(ngroups, stream)
        blocks, threads = errbound_cuda.launch_shape(ngroups)
        errbound_cuda.decode[blocks, threads, stream](buf, out, out.view(np.uint8), work)
        found = work[:errbound_cuda.WORK_HEAD].copy_to_host(stream=stream)
        if found[errbound_cuda.BAD_STEP]:
            step = float(np.array(found[errbound_cuda.STEP_BITS], np.int64).view(np.float64))
            raise ValueError(f"errbound stream: bad step {step!r}")
        if found[errbound_cuda.FLAG]:
            raise _layout_error(BAD_CODE, 0, count, buf.size)
        if found[errbound_cuda.LENGTH] > buf.size:
            raise _layout_error(TOO_LONG, int(found[errbound_cuda.LENGTH]), count, buf.size)
        if found[errbound_cuda.PAST]:
            raise _layout_error(PAST_BYTES, int(found[errbound_cuda.PAST]), count, buf.size)

    def reconstruct_on_stream(self, x: Any, buf: Any, out: Any, stream: Any) -> None:
        """:meth:`reconstruct_into` on the device: one thread a value, the step and code
        bytes read from the stream on the device (no synchronization)."""
        from ..kernels import errbound_cuda

        if out.size == 0:
            return
        if buf.size < _head_nbytes(out.size):
            raise ValueError(f"errbound stream of {out.size} values: {buf.size} bytes, fewer "
                             f"than its header, code bytes and group sizes "
                             f"({_head_nbytes(out.size)})")
        blocks, threads = cuda.grid(out.size)
        errbound_cuda.reconstruct[blocks, threads, stream](x, buf, out)

    def used_nbytes(self, buf: np.ndarray, count: int, dtype: Any) -> int:
        """The bytes a stream of ``count`` values uses (read from its group sizes, or a
        shaped stream's sections)."""
        dt = self._check_dtype(dtype)
        buf = np.asarray(buf)
        if self.shape is not None and errbound_shaped.is_shaped(buf):
            return errbound_shaped.used_nbytes(buf, count, dt.itemsize)
        return int(_offsets(_sections(buf, count)[1], count)[-1])


@functools.lru_cache(maxsize=64)
def _with_shape(codec: ErrboundCodec, dims: tuple[int, int, int] | None) -> ErrboundCodec:
    return ErrboundCodec(codec.tolerance, codec.relative, shape=dims)


def _layout_error(status: int, value: int, count: int, total: int) -> ValueError:
    """The ValueError of a hostile stream of ``count`` values and ``total`` bytes:
    ``status`` (``BAD_CODE``, ``TOO_LONG`` or ``PAST_BYTES``) and ``value`` as
    ``errbound_cpu.read_groups`` and ``decode`` report them."""
    if status == BAD_CODE:
        return ValueError("errbound stream: a block code byte that no encoder writes "
                          "(0-32, 64-127, 128-160, 176-239 or 255)")
    if status == TOO_LONG:
        return ValueError(f"errbound stream of {count} values: its groups need {value} "
                          f"bytes, the stream holds {total}")
    return ValueError(f"errbound stream: the blocks of {value} group(s) run past their "
                      "bytes or set mask bits past their values")


def _work(ngroups: int, stream: Any) -> Any:
    """A zeroed int64 work array of the device kernels (kernels/errbound_cuda.py)."""
    from ..kernels import errbound_cuda

    n = errbound_cuda.work_size(ngroups)
    work = cuda.as_device(cuda.empty(n, np.int64), "work", sync=False)
    blocks, threads = cuda.grid(n)
    errbound_cuda.zero[blocks, threads, stream](work)
    return work


def _check_shape(shape: Any) -> Any:
    """None, "auto", or a tuple of positive ints (a field's dimensions)."""
    if shape is None or shape == "auto":
        return shape
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if (not dims or any(isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
                        or d < 1 for d in dims)):
        raise ValueError(f"codec 'errbound': shape must be None, 'auto' or positive whole "
                         f"numbers (a field's dimensions), got {shape!r}")
    return tuple(int(d) for d in dims)


def step_of(bound: float) -> float:
    """The quantization step of an error bound: ``2 * bound`` rounded down to the nearest
    float32 value where that is a normal float32 (at most ``2 * bound``: every value stays
    within its bound, which the encoder checks), else ``2 * bound`` itself. A float32 step
    lets the CPU decoder make a float32 block's values as float32 products, which are the
    float64 products rounded to float32 where the integers fit 24 bits
    (``kernels/errbound_vector._store_single``); the step changes by less than one part in
    ``2**23``, the bytes of a stream by about nothing."""
    step = 2.0 * bound
    limits = np.finfo(np.float32)
    if not float(limits.tiny) <= step <= float(limits.max):
        return step
    single = np.float32(step)
    if float(single) > step:
        single = np.nextafter(single, np.float32(0))
    return float(single)


def _inverse(step: float) -> float:
    """``1 / step`` (0 for a step of 0): encoder and decoder compute it alike."""
    return 1.0 / step if step > 0 else 0.0


def _head_nbytes(count: int) -> int:
    """Header, code bytes and group sizes of a stream of ``count`` values."""
    nblocks = -(-count // BLOCK)
    return HEADER_NBYTES + nblocks + 2 * -(-nblocks // GROUP)


def _sections(stream: Any, count: int) -> tuple[Any, Any]:
    """The code bytes and the group sizes (uint16 as byte pairs) of a stream."""
    nblocks = -(-count // BLOCK)
    at = HEADER_NBYTES + nblocks
    return stream[HEADER_NBYTES:at], stream[at:at + 2 * -(-nblocks // GROUP)]


def _offsets(sizes: np.ndarray, count: int) -> np.ndarray:
    """Each group's offset in the stream, and the stream's length last (``ngroups + 1``
    values) from the group sizes' bytes (NumPy, for the host side of a device stream and
    the readers in Python; ``errbound_cpu.group_offsets`` inside the CPU kernels)."""
    nbytes = sizes[0::2].astype(np.int64) | (sizes[1::2].astype(np.int64) << 8)
    offsets = np.empty(nbytes.size + 1, np.int64)
    offsets[0] = _head_nbytes(count)
    np.cumsum(nbytes, out=offsets[1:])
    offsets[1:] += offsets[0]
    return offsets
