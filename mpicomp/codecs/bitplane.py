"""The ``bitplane`` codec: block floating point stored as bit planes.

Blocks of ``block_size`` consecutive values share one exponent (the largest
in the block) and each value keeps a sign bit and ``P - 1`` magnitude bits,
rounded to nearest. Every value's error is bounded by its block's scale (see
``docs/format.md``, section bitplane), unlike fixed-rate zfp; on noisy data
such as gradients it is also more accurate than zfp at the same rate.

>>> import numpy as np
>>> from mpicomp.codecs import get_codec
>>> c = get_codec("bitplane", rate=8.25, block_size=32)
>>> c.nplanes(np.float32)  # bits per value, sign included
8
>>> x = np.linspace(-1, 1, 1000, dtype=np.float32)
>>> buf = c.encode(x)
>>> buf.size == c.encoded_nbytes(x.size, x.dtype) == 32 * 33
True
>>> y = c.decode(buf, out=np.empty_like(x))
>>> bool(np.abs(y - x).max() <= 2.0**-7)  # quantum/2 = 2**(0 + 1 - 7) / 2
True
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import cuda_runtime as cuda
from .base import GUARD_HEADROOM, Codec, check_rate

__all__ = ["BitplaneCodec"]

#: allowed block sizes (values per block; one plane word has this many bits)
BLOCK_SIZES = (8, 16, 32, 64)

# per itemsize: (exponent bits on the wire, largest P)
_LAYOUT = {4: (8, 24), 8: (16, 53)}
_INTS = (int, np.integer)


def guard_exponent(dtype: np.dtype) -> int:
    """The largest block exponent ``Emax`` whose values decode to at most
    ``finfo(dtype).max / GUARD_HEADROOM`` (a block's values decode to less than
    ``2**(Emax - BIAS + 1)``, docs/format.md).

    >>> guard_exponent(np.dtype(np.float32)), guard_exponent(np.dtype(np.float64))
    (250, 2042)
    """
    info = np.finfo(dtype)
    bias = info.maxexp - 1
    _, k = math.frexp(float(info.max) / GUARD_HEADROOM)  # the bound is below 2**k, at least 2**(k-1)
    return (k - 1) + bias - 1


class BitplaneCodec(Codec):
    """Block floating point with a shared exponent per block of values.

    Parameters
    ----------
    rate
        Bits per value on the wire, at least. ``P``, the bits kept per value
        (sign included), is the largest integer with
        ``P + E / block_size <= rate``, where ``E`` is 8 for float32 and 16
        for float64 (the block exponent). ``P`` must be in ``[2, 24]`` for
        float32 and ``[2, 53]`` for float64.
    block_size
        Values per block: 8, 16, 32 (default) or 64.
    """

    codec_id = "bitplane"

    def __init__(self, rate: Any = 8.25, block_size: Any = 32):
        if isinstance(block_size, (bool, np.bool_)) or not isinstance(block_size, _INTS):
            raise TypeError(
                f"codec 'bitplane': block_size must be an integer, got {block_size!r}"
            )
        if int(block_size) not in BLOCK_SIZES:
            raise ValueError(
                f"codec 'bitplane': block_size must be one of {list(BLOCK_SIZES)}, got {block_size}"
            )
        self.block_size = int(block_size)
        # The widest range over both dtypes: P >= 2 with float32's 8-bit
        # exponent, P <= 53 with float64's 16-bit one. Per-dtype limits are
        # checked when a dtype is known (``nplanes``).
        self.rate = check_rate(
            self.codec_id, rate, 2 + 8 / self.block_size, 53 + 16 / self.block_size
        )
        self._planes_of: dict[np.dtype, int] = {}  # nplanes of each dtype, once checked

    def _planes(self, dtype: np.dtype) -> int:
        """:meth:`nplanes` of a dtype already checked (found once per dtype)."""
        p = self._planes_of.get(dtype)
        return p if p is not None else self.nplanes(dtype)

    def nplanes(self, dtype: Any) -> int:
        """P, the bits per value (sign included) used for ``dtype``.

        Raises ``ValueError`` when the rate gives a P outside the dtype's range.
        """
        dt = self._check_dtype(dtype)
        ebits, pmax = _LAYOUT[dt.itemsize]
        p = math.floor(self.rate - ebits / self.block_size)
        if not 2 <= p <= pmax:
            lo = 2 + ebits / self.block_size
            hi = pmax + ebits / self.block_size
            raise ValueError(
                f"codec 'bitplane': rate {self.rate:g} with block_size {self.block_size} gives "
                f"P = {p} bits per value for {dt.name}; {dt.name} needs P in [2, {pmax}], "
                f"i.e. a rate in [{lo:g}, {hi:g}]"
            )
        self._planes_of[dt] = p
        return p

    def _params(self) -> dict[str, Any]:
        return {"rate": self.rate, "block_size": self.block_size}

    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        p = self._planes(dtype)
        ebits = _LAYOUT[dtype.itemsize][0]
        nblocks = -(-count // self.block_size)
        return nblocks * (p * self.block_size // 8 + ebits // 8)

    def encode_into(self, x: np.ndarray, out: np.ndarray) -> None:
        from ..kernels import bitplane_cpu

        p = self._planes(x.dtype)
        bits = x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint64)
        bad = bitplane_cpu.encode(bits, self.block_size, p, out)
        if bad:
            raise self._nonfinite(x, bad)

    guards = True

    def encode_into_guarded(self, x: np.ndarray, out: np.ndarray) -> int:
        from ..kernels import bitplane_cpu

        bits = x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint64)
        return bitplane_cpu.encode(bits, self.block_size, self._planes(x.dtype), out,
                                   limit=guard_exponent(x.dtype))

    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        from ..kernels import bitplane_cpu

        bitplane_cpu.decode(buf, self.block_size, self._planes(out.dtype), out)

    def residual_into(self, x: np.ndarray, prev: np.ndarray | None, a: float, b: float,
                      lim: float, out: np.ndarray) -> int:
        from ..kernels import bitplane_cpu, feedback_cpu

        p = self._planes(x.dtype)
        return feedback_cpu.bitplane_residual(x, self.block_size, p,
                                              bitplane_cpu.quantum_table(x.dtype.itemsize, p),
                                              prev, a, b, lim, out)

    def encode_on_stream(self, x: Any, out: Any, stream: Any, checked: bool) -> None:
        from ..kernels import bitplane_cuda

        p = self._planes(x.dtype)
        bits = x.view(np.uint32 if np.dtype(x.dtype).itemsize == 4 else np.uint64)
        bad = cuda.zeros_like_flag(stream)
        blocks, threads = bitplane_cuda.launch_shape(x.size, self.block_size)
        bitplane_cuda.encode[blocks, threads, stream](bits, self.block_size, p, out, bad)
        if checked:
            return
        # one 4-byte read (a stream synchronization): the only way to refuse the buffer
        nbad = int(bad.copy_to_host(stream=stream)[0])
        if nbad:
            raise self._uncompressible(
                "nonfinite",
                f"NaN/Inf value(s) in {nbad} block(s) of {self.block_size} (device buffer). "
                "The format has no encoding for NaN or Inf.",
            )

    def decode_on_stream(self, buf: Any, out: Any, stream: Any) -> None:
        from ..kernels import bitplane_cuda

        p = self._planes(out.dtype)
        blocks, threads = bitplane_cuda.launch_shape(out.size, self.block_size)
        bitplane_cuda.decode[blocks, threads, stream](buf, self.block_size, p, out)

    def _nonfinite(self, x: np.ndarray, nbad_blocks: int) -> Exception:
        # Only on the error path: the kernel has already counted the blocks.
        bad = ~np.isfinite(x)
        first = int(np.argmax(bad))
        return self._uncompressible(
            "nonfinite",
            f"{int(np.count_nonzero(bad))} NaN/Inf value(s) in {nbad_blocks} block(s) of "
            f"{self.block_size}; the first at index {first} ({x[first]!r}). "
            "The format has no encoding for NaN or Inf.",
        )
