"""The ``cast`` codec: each value rounded to a 16-bit float (bfloat16 or IEEE half).

A fixed 16 bits per value with a relative error bound per value (2**-8 for
bfloat16, 2**-11 for float16 in its normal range); see ``docs/format.md``,
section cast. NaN and Inf pass through; a finite value the target cannot
hold (it would become Inf) makes ``encode`` raise
:class:`~mpicomp.errors.UncompressibleError`.

>>> import numpy as np
>>> from mpicomp.codecs import get_codec
>>> c = get_codec("cast", dtype="float16")
>>> x = np.array([1.0, -2.5, 0.1, np.inf], dtype=np.float32)
>>> c.decode(c.encode(x), out=np.empty_like(x)).tolist()
[1.0, -2.5, 0.0999755859375, inf]
>>> get_codec("cast").encoded_nbytes(1000, np.float64)
2000
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import cuda_runtime as cuda
from ..kernels.launch import SERIAL_BELOW, readonly, run_kernel
from .base import Codec, check_rate

__all__ = ["CastCodec"]

TARGETS = ("bfloat16", "float16")

# smallest magnitudes that become Inf (documented in docs/format.md)
_OVERFLOW_AT = {"float16": "65520", "bfloat16": "3.3962e38 (bit pattern 0x7F7F8000)"}
# target exponent field (Inf/NaN when all ones) within the 16-bit code
_EXP_MASK = {"float16": 0x7C00, "bfloat16": 0x7F80}


class CastCodec(Codec):
    """Round every value to a 16-bit float.

    Parameters
    ----------
    dtype
        ``"bfloat16"`` (default; float32's range, 8 significant bits) or
        ``"float16"`` (IEEE half: 11 significant bits, ``|x| < 65520``).
    rate
        Accepted so that a policy can pass its rate to any codec; it must be
        at least 16 (the cast always uses 16 bits per value) and is not part
        of the config.
    """

    codec_id = "cast"

    def __init__(self, dtype: Any = "bfloat16", rate: Any = None):
        if isinstance(dtype, str):
            name = dtype
        elif isinstance(dtype, (type, np.dtype)):  # np.float16 / np.dtype("float16")
            try:
                name = np.dtype(dtype).name
            except TypeError:
                name = repr(dtype)
        else:
            raise TypeError(
                f"codec 'cast': dtype must be one of the strings {list(TARGETS)}, got {dtype!r}"
            )
        if name not in TARGETS:
            raise ValueError(f"codec 'cast': dtype must be one of {list(TARGETS)}, got {name!r}")
        self.target = name
        if rate is not None:
            check_rate(self.codec_id, rate, 16.0, math.inf)

    def _params(self) -> dict[str, Any]:
        return {"dtype": self.target}

    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        return 2 * count

    def encode_into(self, x: np.ndarray, out: np.ndarray) -> None:
        from ..kernels import cast_cpu

        codes = out.view(np.uint16)
        if self.target == "float16":
            if x.dtype.itemsize == 4:
                kernel, src = cast_cpu.encode_f16_from32, x.view(np.uint32)
            else:
                kernel, src = cast_cpu.encode_f16_from64, x.view(np.uint64)
        elif x.dtype.itemsize == 4:
            kernel, src = cast_cpu.encode_bf16_from32, x.view(np.uint32)
        else:
            kernel, src = cast_cpu.encode_bf16_from64, x
        bad = run_kernel(kernel, readonly(src), codes, serial=x.size < SERIAL_BELOW)
        if bad:
            raise self._overflow(x, codes, bad)

    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        from ..kernels import cast_cpu

        kernel = cast_cpu.decode_f16 if self.target == "float16" else cast_cpu.decode_bf16
        run_kernel(kernel, readonly(buf.view(np.uint16)), out, serial=out.size < SERIAL_BELOW)

    def encode_on_stream(self, x: Any, out: Any, stream: Any, checked: bool) -> None:
        from ..kernels import cast_cuda

        codes = out.view(np.uint16)
        wide = np.dtype(x.dtype).itemsize == 8
        flag = cuda.zeros_like_flag(stream)
        blocks, threads = cast_cuda.launch_shape(x.size)
        if self.target == "float16":
            src = x.view(np.uint64 if wide else np.uint32)
            mant_bits, ebits = (52, 11) if wide else (23, 8)
            cast_cuda.encode_f16[blocks, threads, stream](src, mant_bits, ebits, codes, flag)
        else:
            cast_cuda.encode_bf16[blocks, threads, stream](x.view(np.uint64 if wide else np.uint32),
                                                           codes, flag)
        # one 4-byte read (a stream synchronization): the only way to refuse the buffer
        if not checked and flag.copy_to_host(stream=stream)[0]:
            raise self._uncompressible(
                "overflow", f"a finite value is beyond the range of {self.target}"
            )

    def decode_on_stream(self, buf: Any, out: Any, stream: Any) -> None:
        from ..kernels import cast_cuda

        kernel = cast_cuda.decode_f16 if self.target == "float16" else cast_cuda.decode_bf16
        blocks, threads = cast_cuda.launch_shape(out.size)
        kernel[blocks, threads, stream](buf.view(np.uint16), out)

    def _overflow(self, x: np.ndarray, codes: np.ndarray, count: int) -> Exception:
        # Only on the error path: the kernel has already counted the overflows.
        mask = _EXP_MASK[self.target]
        became_inf = (codes & np.uint16(mask)) == mask
        first = int(np.argmax(became_inf & np.isfinite(x)))
        return self._uncompressible(
            "overflow",
            f"{count} finite value(s) of magnitude >= {_OVERFLOW_AT[self.target]} would become "
            f"Inf in {self.target}; the first at index {first} ({x[first]!r})",
        )
