"""The codec contract shared by every codec.

A codec turns a flat float buffer into a byte stream of a size known in
advance from ``(count, dtype, parameters)`` alone, and back. The stream
carries no header: every rank builds the same codec from the same config, so
receive buffers can be sized without exchanging sizes.

Two layers: the public methods (:meth:`Codec.encode`, :meth:`Codec.decode`,
:meth:`Codec.encode_guarded`, :meth:`Codec.encoded_nbytes`) check their
arguments and take NumPy arrays or CUDA buffers; the kernel entry points each
codec implements (:meth:`Codec.stream_nbytes`, :meth:`Codec.encode_into`,
:meth:`Codec.decode_into`, :meth:`Codec.encode_into_guarded`,
:meth:`Codec.encode_on_stream`, :meth:`Codec.decode_on_stream`) check
nothing and are what the backend (:mod:`mpicomp.backend`) calls on the
flat scratch arrays of a collective, whose sizes and dtypes it made.

The codecs import nothing of the communicator: only the kernels
(``kernels/``, with :mod:`mpicomp.cuda_runtime` for CUDA buffers)
and :mod:`mpicomp.errors`.
"""
from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np

from .. import cuda_runtime as cuda
from ..errors import UncompressibleError

__all__ = ["GUARD_HEADROOM", "Codec"]

#: :meth:`Codec.encode_guarded` flags a block whose decoded values could come
#: within this factor of the dtype's largest finite value (the communicator's
#: overflow rule keeps the same factor of headroom)
GUARD_HEADROOM = 8.0


class Codec(abc.ABC):
    """Abstract codec (the numcodecs shape, fixed-size and header-free).

    Subclasses set ``codec_id`` and ``dtypes``, validate their parameters in
    ``__init__`` and implement ``stream_nbytes``, ``encode_into`` and ``decode_into``.
    """

    codec_id: ClassVar[str]
    #: dtypes the codec accepts, as NumPy dtypes
    dtypes: ClassVar[tuple[np.dtype, ...]] = (np.dtype(np.float32), np.dtype(np.float64))
    #: True when decode(encode(x)) may differ from x
    lossy: ClassVar[bool] = True
    #: True when :meth:`encode_guarded` is implemented (host arrays)
    guards: ClassVar[bool] = False
    #: True when a stream's size depends on the data: :meth:`encoded_nbytes` is then its
    #: upper bound, :meth:`encode` returns the bytes used, :meth:`decode` reads the length
    #: from the stream (``errbound``); the collectives send the bytes used
    variable: ClassVar[bool] = False
    #: True when :meth:`reconstruct_into` makes a decode's values from the encoder's input
    #: without reading the stream's payload (the owner of a stream in a collective)
    reconstructs: ClassVar[bool] = False
    #: True when the codec predicts across each call's own array's dimensions (errbound's
    #: ``shape="auto"``): a call then asks it ``field_of`` and ``for_field``
    takes_field: bool = False

    # -- public API ---------------------------------------------------------
    def encoded_nbytes(self, count: int, dtype: Any) -> int:
        """Exact size in bytes of the stream for ``count`` values of ``dtype`` (a variable
        codec's: the most its stream can take)."""
        count = _check_count(count)
        return self.stream_nbytes(count, self._check_dtype(dtype))

    def bits_per_value(self, count: int, dtype: Any) -> float:
        """Exact bits per value on the wire for this count and dtype, padding included."""
        count = _check_count(count)
        if count == 0:
            return 0.0
        return 8.0 * self.encoded_nbytes(count, dtype) / count

    def encode(self, x: np.ndarray, out: np.ndarray | None = None, *,
               checked: bool = False) -> np.ndarray:
        """Encode an array (any layout: values in C order); return a 1-D uint8 array of
        ``encoded_nbytes`` bytes.

        ``out``, when given, is a 1-D contiguous uint8 array of at least that
        many bytes; the stream is written to its head and that head returned.
        Raises :class:`~mpicomp.errors.UncompressibleError` when the buffer
        holds values the format cannot carry (see each codec's docs).

        ``checked=True`` says the caller has already made sure that ``x``
        can be encoded (finite, and within a cast's range; the
        communicator's agreement step does): on the device the encoder then
        skips the 4-byte flag read that would wait for the stream, so the
        call stays asynchronous. The stream is the same either way.
        """
        if type(x) is not np.ndarray and cuda.is_device_array(x):
            return self._encode_device_buffer(x, out, checked)
        flat = self._check_input(x)
        n = self.stream_nbytes(flat.size, flat.dtype)
        stream = _check_stream_out(out, n)
        used = self.encode_into(flat, stream)
        return stream if used is None else stream[:used]

    def encode_guarded(self, x: np.ndarray, out: np.ndarray) -> int:
        """Encode host values into ``out`` as :meth:`encode` does, but never refuse them.

        Returns the number of blocks that hold NaN or Inf or whose decoded
        values could reach ``finfo(dtype).max / GUARD_HEADROOM`` in magnitude;
        the stream of such a block means nothing. 0 says that every value of
        the stream decodes to less than that bound. The encoder reads every
        value anyway, so this costs nothing over :meth:`encode`, and lets a
        collective find unsafe data while it runs instead of scanning its
        input first (the communicator's speculative ring allreduce).
        Codecs with ``guards = False`` raise ``NotImplementedError``.
        """
        if not self.guards:
            raise NotImplementedError(f"codec {self.codec_id!r} has no guarded encoder")
        flat = self._check_input(x)
        stream = _check_stream_out(out, self.stream_nbytes(flat.size, flat.dtype))
        return self.encode_into_guarded(flat, stream)

    def decode(
        self,
        buf: np.ndarray,
        out: np.ndarray | None = None,
        *,
        count: int | None = None,
        dtype: Any = None,
    ) -> np.ndarray:
        """Decode ``buf`` into ``out`` (which fixes count and dtype) and return ``out``.

        Without ``out``, pass ``count`` and ``dtype`` and a new 1-D array is returned.
        """
        if ((type(buf) is not np.ndarray and cuda.is_device_array(buf))
                or (type(out) not in (np.ndarray, type(None)) and cuda.is_device_array(out))):
            return self._decode_device_buffer(buf, out, count, dtype)
        if out is None:
            if count is None or dtype is None:
                raise TypeError("decode needs either out= or both count= and dtype=")
            out = np.empty(_check_count(count), dtype=self._check_dtype(dtype))
        flat = self._check_input(out, name="out", writable=True)
        stream = _as_stream(buf, self.min_stream_nbytes(flat.size, flat.dtype))
        self.decode_into(self.stream_part(stream, flat.size, flat.dtype), flat)
        if not out.flags.c_contiguous:  # (decoded into a C-ordered copy)
            out[...] = flat.reshape(out.shape)
        return out

    def get_config(self) -> dict[str, Any]:
        """JSON-safe parameters; ``get_codec(c.get_config())`` rebuilds an equal codec."""
        return {"id": self.codec_id, **self._params()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Codec:
        params = dict(config)
        codec_id = params.pop("id", cls.codec_id)
        if codec_id != cls.codec_id:
            raise ValueError(f"config id {codec_id!r} does not match codec {cls.codec_id!r}")
        return cls(**params)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.get_config().items())))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    # -- kernel entry points (each codec implements them; no checks) ---------
    @abc.abstractmethod
    def _params(self) -> dict[str, Any]:
        """The constructor's parameters, JSON-safe."""

    @abc.abstractmethod
    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        """Stream size of ``count`` values of the NumPy dtype ``dtype`` (one the codec takes)."""

    def min_stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        """The shortest stream of ``count`` values (a fixed-size codec's only size)."""
        return self.stream_nbytes(count, dtype)

    def stream_part(self, stream: Any, count: int, dtype: np.dtype) -> Any:
        """What a decode of ``count`` values reads of a uint8 ``stream`` buffer (host or
        device) that holds at least :meth:`min_stream_nbytes`: its first
        :meth:`stream_nbytes`, or a variable codec's whole buffer (the stream holds its
        own length)."""
        return stream if self.variable else stream[: self.stream_nbytes(count, dtype)]

    @abc.abstractmethod
    def encode_into(self, x: np.ndarray, out: np.ndarray) -> int | None:
        """Encode the 1-D contiguous ``x`` into the uint8 ``out`` of exact size
        (:class:`~mpicomp.errors.UncompressibleError` for values the format cannot carry);
        a variable codec returns the bytes it used (``out`` has the upper bound)."""

    @abc.abstractmethod
    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        """Decode the uint8 ``buf`` of exact size into the 1-D contiguous ``out``."""

    def encode_into_guarded(self, x: np.ndarray, out: np.ndarray) -> int:
        """:meth:`encode_guarded` on a 1-D contiguous ``x`` and an ``out`` of exact size."""
        raise NotImplementedError

    def reconstruct_into(self, x: np.ndarray, buf: np.ndarray, out: np.ndarray) -> None:
        """``decode_into(buf, out)`` where ``buf`` is this codec's encode of ``x`` (1-D,
        contiguous; ``out`` may be ``x``): the same values, by a decode unless the codec
        can make them from ``x`` (``reconstructs``)."""
        self.decode_into(buf, out)

    def residual_into(self, x: np.ndarray, prev: np.ndarray | None, a: float, b: float,
                      lim: float, out: np.ndarray) -> int | None:
        """Error feedback's residual ``clip(a * prev + b * (x - C(x)), -lim, lim)`` into
        ``out`` in one pass over the 1-D contiguous host ``x`` (``prev`` None: ``a`` is 0;
        ``prev`` and ``out`` of ``x``'s size and dtype), ``C`` this codec's round trip,
        with no stream made; returns the blocks of ``x`` the codec refuses (NaN or Inf:
        their values of ``out`` are not written), or None where the codec has no such
        kernel (the caller then codes a stream and decodes it)."""
        return None

    # -- CUDA buffers (mpicomp/cuda_runtime.py) --------------------------------
    def _encode_device_buffer(self, x: Any, out: Any, checked: bool = False) -> Any:
        xd = cuda.as_device(x)
        self._check_dtype(xd.dtype)
        n = self.stream_nbytes(xd.size, np.dtype(xd.dtype))
        if out is None:
            out = cuda.empty(n, np.uint8, like=x)
        od = cuda.as_device(out, "out")
        if np.dtype(od.dtype) != np.uint8 or od.size < n:
            raise ValueError(f"out must be a device uint8 buffer of at least {n} bytes")
        if n:
            with cuda.serialized():  # the simulator runs one kernel at a time
                used = self.encode_on_stream(xd, od[:n], cuda.current_stream(), checked)
            n = n if used is None else used
        return out[:n]

    def _decode_device_buffer(self, buf: Any, out: Any, count: Any, dtype: Any) -> Any:
        if out is None:
            if count is None or dtype is None:
                raise TypeError("decode needs either out= or both count= and dtype=")
            out = cuda.empty(_check_count(count), self._check_dtype(dtype), like=buf)
        od = cuda.as_device(out, "out")
        self._check_dtype(od.dtype)
        dt = np.dtype(od.dtype)
        n = self.min_stream_nbytes(od.size, dt)
        bd = cuda.as_device(buf, "buf")
        if np.dtype(bd.dtype) != np.uint8 or bd.size < n:
            raise ValueError(f"buf must be a device uint8 buffer of at least {n} bytes")
        if od.size:
            with cuda.serialized():
                self.decode_on_stream(self.stream_part(bd, od.size, dt), od,
                                      cuda.current_stream())
        return out

    def encode_on_stream(self, x: Any, out: Any, stream: Any, checked: bool) -> int | None:
        """Encode the flat Numba device array ``x`` into the device uint8 ``out`` of exact
        size on ``stream`` (GPU codecs override); read the kernel's refusal flag unless
        ``checked``; a variable codec returns the bytes it used."""
        raise TypeError(f"codec {self.codec_id!r} has no GPU kernels")

    def decode_on_stream(self, buf: Any, out: Any, stream: Any) -> None:
        """Decode the device uint8 ``buf`` of exact size into the flat Numba device array
        ``out`` on ``stream`` (GPU codecs override)."""
        raise TypeError(f"codec {self.codec_id!r} has no GPU kernels")

    def reconstruct_on_stream(self, x: Any, buf: Any, out: Any, stream: Any) -> None:
        """:meth:`decode_on_stream` of ``buf``, this codec's encode of the device array
        ``x``, into ``out`` (which may be ``x``): made from ``x`` where the codec can
        (``reconstructs``; such a codec overrides this and reads no more of ``buf`` than its
        :meth:`min_stream_nbytes`), else decoded."""
        self.decode_on_stream(buf, out, stream)

    def _uncompressible(self, reason: str, detail: str) -> UncompressibleError:
        return UncompressibleError(self.codec_id, reason, detail)

    def _check_dtype(self, dtype: Any) -> np.dtype:
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise TypeError(f"codec {self.codec_id!r}: {dtype!r} is not a dtype") from exc
        if dt not in self.dtypes:
            raise TypeError(
                f"codec {self.codec_id!r} supports dtypes {[d.name for d in self.dtypes]}, "
                f"got {dt.name}"
            )
        return dt

    def _check_input(self, x: Any, name: str = "x", writable: bool = False) -> np.ndarray:
        """``x`` as the flat C-contiguous array the kernels take: a view where it is one,
        else (an input of any other layout: strided, Fortran-ordered, broadcast) a copy in
        C order; an output (``writable``) must be writable, and :meth:`decode` copies back
        into one that is not C-contiguous."""
        if not isinstance(x, np.ndarray):
            raise TypeError(
                f"codec {self.codec_id!r}: {name} must be a numpy.ndarray, got {type(x).__name__}"
            )
        self._check_dtype(x.dtype)
        if writable and not x.flags.writeable:
            raise ValueError(f"codec {self.codec_id!r}: {name} must be writable")
        return np.ascontiguousarray(x).reshape(-1)


def _check_count(count: Any) -> int:
    if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
        raise TypeError(f"count must be an integer, got {type(count).__name__}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return int(count)


def _check_stream_out(out: np.ndarray | None, n: int) -> np.ndarray:
    if out is None:
        return np.empty(n, dtype=np.uint8)
    if not isinstance(out, np.ndarray) or out.dtype != np.uint8 or out.ndim != 1:
        raise TypeError("out must be a 1-D numpy.ndarray of dtype uint8")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be contiguous and writable")
    if out.size < n:
        raise ValueError(f"out must hold at least {n} bytes, got {out.size}")
    return out[:n]


def _as_stream(buf: Any, n: int) -> np.ndarray:
    """``buf`` as a flat uint8 array of at least ``n`` bytes (all of it)."""
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise ValueError("buf must be contiguous")
        stream = buf.reshape(-1).view(np.uint8)
    else:
        try:
            stream = np.frombuffer(buf, dtype=np.uint8)
        except TypeError as exc:
            raise TypeError(
                f"buf must be a numpy array or a bytes-like object, got {type(buf).__name__}"
            ) from exc
    if stream.size < n:
        raise ValueError(
            f"buf must hold at least {n} bytes for this count/dtype, got {stream.size}"
        )
    return stream


def check_rate(codec_id: str, rate: Any, low: float, high: float) -> float:
    """Validate a rate in bits per value: a real number with ``low <= rate <= high``."""
    number = (int, float, np.integer, np.floating)
    if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, number):
        raise TypeError(
            f"codec {codec_id!r}: rate must be a number of bits per value, got {rate!r}"
        )
    rate = float(rate)
    if not (low <= rate <= high):
        raise ValueError(
            f"codec {codec_id!r}: rate must be in [{low:g}, {high:g}] bits per value, "
            f"got {rate:g}"
        )
    return rate
