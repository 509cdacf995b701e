"""The ``errbound`` codec: every value within a stated error bound, in as few bits as the
data need.

Each value is quantized to a multiple of ``step = 2 * bound`` (so no decoded
value is off by more than ``bound``); each block of 32 values then takes the
bit width of its largest zigzag-coded multiple: a block of zeros costs one
byte, a block of small values a few bits per value, a block the bound cannot
reach through the dtype's rounding is stored raw. The bound is absolute
(``tolerance``), or relative to the buffer's largest magnitude
(``relative=True``: ``bound = tolerance * max|x|``).

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

import math
import struct
from typing import Any

import numpy as np

from ..kernels import cuda_runtime as cuda
from ..kernels.errbound_layout import BLOCK, HEADER_NBYTES, RAW, WIDEST
from .base import Codec

__all__ = ["HEADER_NBYTES", "ErrboundCodec"]

#: the stream's header: the quantization step, a little-endian float64
_HEADER = struct.Struct("<d")


class ErrboundCodec(Codec):
    """Quantize to a step from an error bound; per-block bit widths.

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
    """

    codec_id = "errbound"
    variable = True

    def __init__(self, tolerance: Any = 1e-3, relative: Any = False, rate: Any = None):
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

    def _params(self) -> dict[str, Any]:
        return {"tolerance": self.tolerance, "relative": self.relative}

    # -- sizes ------------------------------------------------------------------------
    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        """The upper bound: header, one code byte per block, every block raw."""
        return HEADER_NBYTES + -(-count // BLOCK) + count * dtype.itemsize

    def min_stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        """The shortest stream of ``count`` values: header and code bytes (all zero)."""
        return HEADER_NBYTES + -(-count // BLOCK)

    def bound(self, x: np.ndarray) -> float:
        """The absolute error bound an encode of ``x`` keeps."""
        if not self.relative:
            return self.tolerance
        from ..kernels.scan_cpu import max_abs

        return self.tolerance * (max_abs(x) if x.size else 0.0)

    # -- host kernels -----------------------------------------------------------------
    def encode_into(self, x: np.ndarray, out: np.ndarray) -> int:
        from ..kernels import errbound_cpu
        from ..kernels.launch import call, readonly

        bound = self.bound(x)
        if not math.isfinite(bound):
            raise self._uncompressible("nonfinite", "the buffer holds NaN or Inf")
        step = 2.0 * bound
        inv_step = 1.0 / step if step > 0 else 0.0
        nblocks = -(-x.size // BLOCK)
        codes = out[HEADER_NBYTES:HEADER_NBYTES + nblocks]
        single = x.dtype == np.float32
        bad = call(errbound_cpu.codes, readonly(x), inv_step, step, bound, single, codes)
        if bad:
            raise self._uncompressible("nonfinite", f"{bad} block(s) hold NaN or Inf")
        offsets, used = _offsets(codes, x.size, x.dtype.itemsize)
        _HEADER.pack_into(out, 0, step)
        call(errbound_cpu.pack, readonly(x), readonly(x.view(np.uint8)), inv_step, codes,
             offsets, out, x.dtype.itemsize)
        return used

    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        from ..kernels import errbound_cpu
        from ..kernels.launch import call, readonly

        step, codes, offsets = self.read_layout(buf, out.size, out.dtype)
        call(errbound_cpu.unpack, readonly(buf), codes, offsets, step, out,
             out.view(np.uint8), out.dtype.itemsize)

    def read_layout(self, buf: np.ndarray, count: int, dtype: np.dtype,
                    total: int | None = None) -> tuple[float, np.ndarray, np.ndarray]:
        """(step, code bytes, payload offsets) of a stream of ``count`` values, checked:
        ValueError when its bytes cannot be a stream of this codec (hostile bytes).
        ``buf`` holds at least the header and code bytes; ``total``: the stream's whole
        length when ``buf`` is only its head (a device stream's)."""
        total = buf.size if total is None else total
        nblocks = -(-count // BLOCK)
        if buf.size < HEADER_NBYTES + nblocks:
            raise ValueError(f"errbound stream of {count} values: {total} bytes, fewer "
                             f"than its header and code bytes ({HEADER_NBYTES + nblocks})")
        (step,) = _HEADER.unpack_from(buf, 0)
        if not (math.isfinite(step) and step >= 0):
            raise ValueError(f"errbound stream: bad step {step!r}")
        codes = buf[HEADER_NBYTES:HEADER_NBYTES + nblocks]
        if codes.size and (int(codes.max()) > WIDEST and bool(
                ((codes > WIDEST) & (codes != RAW)).any())):
            raise ValueError("errbound stream: a block code byte other than 0-32 or 255")
        offsets, used = _offsets(codes, count, dtype.itemsize)
        if used > total:
            raise ValueError(f"errbound stream of {count} values: its blocks need {used} "
                             f"bytes, the stream holds {total}")
        return step, codes, offsets

    # -- device kernels -------------------------------------------------------------------
    def encode_on_stream(self, x: Any, out: Any, stream: Any, checked: bool) -> int:
        from ..kernels import errbound_cuda

        single = np.dtype(x.dtype) == np.float32
        from ..kernels import scan_cuda

        bound = (self.tolerance if not self.relative
                 else self.tolerance * scan_cuda.max_abs(x, stream))
        if not math.isfinite(bound):
            raise self._uncompressible("nonfinite", "the buffer holds NaN or Inf (device)")
        step = 2.0 * bound
        inv_step = 1.0 / step if step > 0 else 0.0
        nblocks = -(-x.size // BLOCK)
        header = np.frombuffer(_HEADER.pack(step), np.uint8).copy()
        if not nblocks:
            out[:HEADER_NBYTES].copy_to_device(header, stream=stream)
            stream.synchronize()
            return HEADER_NBYTES
        codes_d = out[HEADER_NBYTES:HEADER_NBYTES + nblocks]
        flag = cuda.zeros_like_flag(stream)
        blocks, threads = cuda.grid(nblocks)
        errbound_cuda.codes[blocks, threads, stream](x, inv_step, step, bound, single, codes_d,
                                                     flag)
        # the payload offsets need the code bytes: one read (a stream synchronization)
        codes = codes_d.copy_to_host(stream=stream)
        if int(flag.copy_to_host(stream=stream)[0]):
            raise self._uncompressible("nonfinite", "the buffer holds NaN or Inf (device)")
        offsets, used = _offsets(codes, x.size, np.dtype(x.dtype).itemsize)
        out[:HEADER_NBYTES].copy_to_device(header, stream=stream)
        offsets_d = cuda.as_device(cuda.empty(nblocks, np.int64), "offsets", sync=False)
        offsets_d.copy_to_device(offsets, stream=stream)
        errbound_cuda.pack[blocks, threads, stream](x, x.view(np.uint8), inv_step, codes_d,
                                                    offsets_d, out, np.dtype(x.dtype).itemsize)
        stream.synchronize()  # (the host arrays copied above must outlive the copies)
        return used

    def decode_on_stream(self, buf: Any, out: Any, stream: Any) -> None:
        from ..kernels import errbound_cuda

        nblocks = -(-out.size // BLOCK)
        head = min(buf.size, HEADER_NBYTES + nblocks)
        host = buf[:head].copy_to_host(stream=stream)  # header and code bytes
        step, codes, offsets = self.read_layout(host, out.size, np.dtype(out.dtype),
                                                total=buf.size)
        codes_d = buf[HEADER_NBYTES:HEADER_NBYTES + nblocks]
        offsets_d = cuda.as_device(cuda.empty(max(nblocks, 1), np.int64), "offsets",
                                   sync=False)[:nblocks]
        offsets_d.copy_to_device(offsets, stream=stream)
        blocks, threads = cuda.grid(nblocks)
        errbound_cuda.unpack[blocks, threads, stream](buf, codes_d, offsets_d, step, out,
                                                      out.view(np.uint8),
                                                      np.dtype(out.dtype).itemsize)
        stream.synchronize()

    def used_nbytes(self, buf: np.ndarray, count: int, dtype: Any) -> int:
        """The bytes a stream of ``count`` values uses (read from its code bytes)."""
        dt = self._check_dtype(dtype)
        nblocks = -(-count // BLOCK)
        return _offsets(np.asarray(buf)[HEADER_NBYTES:HEADER_NBYTES + nblocks], count,
                        dt.itemsize)[1]


def _offsets(codes: np.ndarray, count: int, itemsize: int) -> tuple[np.ndarray, int]:
    """Each block's payload offset in the stream, and the stream's length."""
    nblocks = codes.size
    start = HEADER_NBYTES + nblocks
    offsets = np.empty(nblocks, np.int64)
    if not nblocks:
        return offsets, start
    values = np.full(nblocks, BLOCK, np.int64)
    values[-1] = count - (nblocks - 1) * BLOCK  # the last block may be short
    code = codes.astype(np.int64)
    sizes = np.where(code == RAW, values * itemsize, (code * values + 7) // 8)
    offsets[0] = start
    np.cumsum(sizes[:-1], out=offsets[1:])
    offsets[1:] += start
    return offsets, int(offsets[-1] + sizes[-1])
