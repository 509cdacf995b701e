"""Host memory: NumPy arrays, the CPU kernels (``kernels/*_cpu.py``), reused scratch.

:class:`HostArrays` is every operation mpicomp performs on host values and
streams: running a codec's kernels, the element-wise sums and scans of the
collectives, the error feedback's arithmetic. :class:`HostMemory` adds the
scratch pool of one private communicator (values and streams reused across calls) and is
what a compressed call on host buffers works in; the training code uses
:data:`HOST` (no scratch: its buckets are its own).

:mod:`mpicomp.backend.device` has the same interface on the GPU, so the
algorithms (:mod:`mpicomp.algorithms`, :mod:`mpicomp.collectives`) and the
gradient reducer (:mod:`mpicomp.training`) have one implementation for both.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UncompressibleError

if TYPE_CHECKING:
    from ..codecs import Codec

__all__ = ["HOST", "HostArrays", "HostMemory", "Scratch", "check_float"]

#: dtypes the compiled element-wise kernels take (others fall back to NumPy)
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class Scratch:
    """Named scratch arrays: ``get(name, n, dtype)`` returns ``n`` elements, reusing memory.

    A name's memory grows to the largest request and is kept; two names
    never share memory. ``alloc(nbytes)`` makes a flat uint8 buffer (host
    memory by default; the device memory passes device and pinned-host
    allocators). Not thread-safe: give each thread its own pool (one per private communicator).
    """

    def __init__(self, alloc: Callable[[int], Any] | None = None) -> None:
        self._alloc = alloc or (lambda nbytes: np.empty(nbytes, dtype=np.uint8))
        self._buffers: dict[str, Any] = {}

    def get(self, name: str, n: int, dtype: np.dtype | type) -> Any:
        dt = np.dtype(dtype)
        nbytes = n * dt.itemsize
        buf = self._buffers.get(name)
        if buf is None or buf.size < nbytes:
            # round up so that slowly growing requests do not reallocate each time
            buf = self._alloc(max(nbytes, 64) + (nbytes >> 3))
            self._buffers[name] = buf
        return buf[:nbytes].view(dt)

    def locate(self, view: np.ndarray) -> tuple[str, int, int] | None:
        """``(name, offset, size)`` of the host buffer ``view`` lies in: its name, where
        ``view`` starts in it, its bytes; None when it lies in none of this pool's."""
        start = int(view.__array_interface__["data"][0])
        for name, buf in self._buffers.items():
            if not isinstance(buf, np.ndarray):
                return None  # (a device pool)
            base = int(buf.__array_interface__["data"][0])
            if base <= start and start + view.nbytes <= base + buf.nbytes:
                return name, start - base, buf.nbytes
        return None


class HostArrays:
    """Operations on host arrays (NumPy); kernels from ``kernels/*_cpu.py``."""

    on_device = False
    place = "host"

    # -- arrays -------------------------------------------------------------------
    def view(self, name: str, g: Any) -> np.ndarray:
        """A NumPy view of a gradient's memory (no copy), or TypeError/ValueError."""
        if isinstance(g, np.ndarray):
            arr = g
        elif hasattr(g, "numpy") and str(getattr(g, "device", "")) == "cpu":
            arr = g.detach().numpy() if hasattr(g, "detach") else g.numpy()
        else:
            raise TypeError(f"gradient {name!r}: GradientReducer takes NumPy arrays, CPU "
                            f"tensors NumPy can view and CUDA device buffers, got "
                            f"{type(g).__name__}")
        if not arr.flags.c_contiguous:
            raise ValueError(f"gradient {name!r} must be C-contiguous (strides {arr.strides})")
        check_float(name, arr.dtype)
        return arr

    def empty(self, n: int, dtype: Any) -> np.ndarray:
        return np.empty(n, dtype)

    def fresh_wire(self, nbytes: int) -> np.ndarray:
        """A new stream buffer that outlives the call (a frame, a landing buffer)."""
        return np.empty(nbytes, dtype=np.uint8)

    # -- the codec's kernels (arrays the caller made: flat, contiguous, right size) -----
    def encode(self, codec: Codec, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Encode ``x`` into the head of ``out``; returns that head (the stream; a variable
        codec's: the bytes it used)."""
        stream = _head(out, codec.stream_nbytes(x.size, x.dtype))
        used = codec.encode_into(_flat(x), stream)
        return stream if used is None else stream[:used]

    def encode_guarded(self, codec: Codec, x: np.ndarray, out: np.ndarray) -> int:
        """Encode; the number of unsafe blocks (:meth:`Codec.encode_guarded`)."""
        stream = _head(out, codec.stream_nbytes(x.size, x.dtype))
        return codec.encode_into_guarded(_flat(x), stream)

    def reconstruct(self, codec: Codec, x: np.ndarray, stream: np.ndarray,
                    out: np.ndarray) -> np.ndarray:
        """:meth:`decode` of ``stream``, the encode of ``x``, into ``out``: made from ``x``
        where the codec can (``Codec.reconstructs``); returns ``out``."""
        if not codec.reconstructs:
            return self.decode(codec, stream, out)
        codec.reconstruct_into(_flat(x), stream, out.reshape(-1))
        return out

    def decode(self, codec: Codec, stream: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Decode the head of ``stream`` into ``out`` (a variable codec's stream: all of
        it, its length read from it); returns ``out``."""
        # Codec.stream_part written out: a fixed-size codec's decode on this hot path runs
        # no code of codecs/base.py (tests/test_call_path.py counts the modules)
        if codec.variable:
            _head(stream, codec.min_stream_nbytes(out.size, out.dtype))
        else:
            stream = _head(stream, codec.stream_nbytes(out.size, out.dtype))
        codec.decode_into(stream, out.reshape(-1))
        return out

    def roundtrip(self, codec: Codec, x: np.ndarray, out: np.ndarray | None = None
                  ) -> np.ndarray:
        """C(x) (into ``out`` when given), or ``x`` itself when the codec refuses it (then
        sent plain)."""
        try:
            return codec.decode(codec.encode(x), out=np.empty_like(x) if out is None else out)
        except UncompressibleError:
            return x

    # -- element-wise ---------------------------------------------------------------
    def add_into(self, acc: np.ndarray, x: np.ndarray) -> None:
        """``acc += x`` (same number of values), on the rank's thread budget."""
        if acc.dtype in _KERNEL_DTYPES and x.dtype == acc.dtype:
            from ..kernels.scan_cpu import add_into

            add_into(acc.reshape(-1), x.reshape(-1))
        else:
            acc += x.reshape(acc.shape)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """``dst[:] = src`` (same number of values; shapes may differ)."""
        if dst is not src:
            np.copyto(dst.reshape(-1), src.reshape(-1))

    def divide(self, y: np.ndarray, p: int) -> None:
        np.divide(y, y.dtype.type(p), out=y)

    def max_abs(self, x: np.ndarray) -> float:
        """max |x| (+Inf for NaN/Inf)."""
        from ..kernels.scan_cpu import max_abs

        return max_abs(x) if x.size else 0.0

    def finite(self, x: np.ndarray, rt: np.ndarray | None = None) -> bool:
        """True when every ``x`` (``x - rt`` when given) is finite."""
        if rt is not None and _fused(x, rt):
            from ..kernels import feedback_cpu

            return feedback_cpu.count_nonfinite_difference(x.reshape(-1), rt.reshape(-1)) == 0
        with np.errstate(over="ignore", invalid="ignore"):
            return bool(np.isfinite(x if rt is None else x - rt).all())

    def residual(self, x: np.ndarray, rt: np.ndarray, prev: np.ndarray | None, a: float,
                 b: float, lim: float, out: np.ndarray | None = None) -> np.ndarray:
        """``clip(a * prev + b * (x - rt), -lim, lim)`` in ``x``'s dtype, into ``out`` when
        given (it may be ``rt``), else into ``prev`` when given, else a new array."""
        t = x.dtype.type
        if _fused(x, rt) and (prev is None or (prev.dtype == x.dtype and prev.size == x.size
                                               and prev.flags.c_contiguous)) and (
                out is None or _fused(x, out)):
            from ..kernels import feedback_cpu

            if out is None:
                out = np.empty_like(x) if prev is None else prev
            feedback_cpu.residual(x.reshape(-1), rt.reshape(-1),
                                  None if prev is None else prev.reshape(-1), a, b, lim,
                                  out.reshape(-1))
            return out
        v = t(a) * prev if (prev is not None and a != 0) else np.zeros_like(x)
        if b != 0:
            v += t(b) * (x - rt)
        v = np.clip(v, -t(lim), t(lim), out=v)
        if out is None:
            return v
        out.reshape(-1)[:] = v.reshape(-1)
        return out

    def order_keys(self, codes: np.ndarray) -> None:
        """Turn int16 codes into keys that order like their values (negative ones flipped)."""
        np.bitwise_xor(codes, np.int16(0x7FFF), out=codes, where=codes < 0)


class HostMemory(HostArrays):
    """A call's values and streams in host memory, from one private communicator's scratch pool."""

    wire_on_device = False
    label = "host"

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch

    def values(self, name: str, n: int, dtype: Any) -> np.ndarray:
        return self.scratch.get(name, n, dtype)

    def wire(self, name: str, nbytes: int) -> np.ndarray:
        return self.scratch.get(name, nbytes, np.uint8)

    def host(self, name: str, n: int, dtype: Any) -> np.ndarray:
        """Host scratch (for data MPI must see in host memory)."""
        return self.scratch.get(name, n, dtype)

    def mpi_comm(self, comm: Any) -> Any:
        return comm

    def synchronize(self) -> None:
        pass


#: host operations without a scratch pool (the gradient reducer's)
HOST = HostArrays()


def _fused(x: np.ndarray, rt: np.ndarray) -> bool:
    """Whether error feedback's passes over ``x`` and ``rt`` run as one kernel each
    (``kernels/feedback_cpu.py``): float32/float64, contiguous, alike."""
    return (x.dtype in (np.float32, np.float64) and rt.dtype == x.dtype
            and rt.size == x.size and x.flags.c_contiguous and rt.flags.c_contiguous)


def _flat(x: np.ndarray) -> np.ndarray:
    """``x`` flat and C-contiguous, as the kernels take it (a copy where it is not)."""
    return np.ascontiguousarray(x).reshape(-1)


def _head(stream: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` bytes of a stream buffer (a kernel must never run past its end)."""
    if stream.size < n:
        raise ValueError(f"a stream buffer of {stream.size} bytes for a stream of {n}")
    return stream[:n]


def check_float(name: str, dtype: np.dtype) -> None:
    if dtype.kind != "f":
        raise TypeError(f"gradient {name!r} must be a float array, got dtype {dtype}")
