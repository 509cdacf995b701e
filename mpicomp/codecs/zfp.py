"""``zfp``: LLNL zfp's fixed-rate mode, byte-compatible with zfp 1.0.1.

A flat buffer of n values is coded as zfp codes the array of shape (n,),
(ceil(n/4), 4) or (ceil(n/16), 4, 4) for ``dims`` = 1, 2, 3, i.e. blocks of
4, 16 or 64 contiguous values; see docs/format.md for the exact stream and
how a partial last block is padded. CUDA buffers are coded on the GPU by
``kernels/zfp_cuda.py`` (the same per-block code, so the same bytes).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import cuda_runtime as cuda
from ..kernels.launch import SERIAL_BELOW, readonly, run_kernel
from .base import Codec, check_rate

__all__ = ["ZfpCodec"]

_EBITS = {np.dtype(np.float32): 8, np.dtype(np.float64): 11}


class ZfpCodec(Codec):
    """ZFP fixed-rate codec.

    Parameters
    ----------
    rate : float
        Maximum bits per value. The codec uses ``maxbits = floor(4**dims * rate)``
        bits per block (the most that fits), so the exact rate is
        ``maxbits / 4**dims`` (``self.rate``), a multiple of 1/4**dims.
    dims : int
        Block dimensionality 1, 2 or 3 (blocks of 4, 16 or 64 contiguous values).

    Fixed-rate zfp has no pointwise error bound: the error of a value depends
    on its whole block (docs/format.md gives the measured figures).

    >>> import numpy as np
    >>> c = ZfpCodec(rate=8, dims=1)
    >>> x = np.cos(np.arange(1000, dtype=np.float32) / 50)
    >>> y = c.decode(c.encode(x), out=np.empty_like(x))
    >>> float(np.abs(x - y).max()) < 1e-2
    True
    """

    codec_id = "zfp"

    def __init__(self, rate: float = 16.0, dims: int = 1):
        if isinstance(dims, bool) or not isinstance(dims, (int, np.integer)):
            raise TypeError(f"codec 'zfp': dims must be an int (1, 2 or 3), got {dims!r}")
        if dims not in (1, 2, 3):
            raise ValueError(f"codec 'zfp': dims must be 1, 2 or 3, got {dims}")
        self.dims = int(dims)
        self.block_size = 4 ** self.dims
        requested = check_rate("zfp", rate, 0.0, 64.0)
        self.maxbits = int(np.floor(self.block_size * requested + 1e-9))
        # The header of a non-empty block is 1 + EBITS bits (9 for float32):
        # a budget below 10 bits could not code a single value bit.
        if self.maxbits < 10:
            raise ValueError(
                f"codec 'zfp': rate must give at least 10 bits per block of {self.block_size} "
                f"values (rate >= {10 / self.block_size:g} for dims={self.dims}), got {requested:g}"
            )
        self.rate = self.maxbits / self.block_size
        self._scratch: dict[np.dtype, Any] = {}  # dtype -> zfp_cpu.Scratch

    def _scratch_for(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self._scratch.get(dtype)
        if s is None:
            from ..kernels import zfp_cpu

            s = self._scratch[dtype] = zfp_cpu.Scratch(dtype)
        return s.fblock, s.iblock, s.ublock

    def _params(self) -> dict[str, Any]:
        return {"rate": self.rate, "dims": self.dims}

    def _min_bits(self, dtype: np.dtype) -> int:
        return 2 + _EBITS[dtype]

    def _check_budget(self, dtype: np.dtype) -> None:
        if self.maxbits < self._min_bits(dtype):
            raise ValueError(
                f"codec 'zfp': {dtype.name} needs at least {self._min_bits(dtype)} bits per block "
                f"(rate >= {self._min_bits(dtype) / self.block_size:g} for dims={self.dims}), "
                f"got rate {self.rate:g}"
            )

    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        self._check_budget(dtype)
        nblocks = -(-count // self.block_size)
        return 8 * (-(-nblocks * self.maxbits // 64))

    def encode_into(self, x: np.ndarray, out: np.ndarray) -> None:
        if x.size == 0:
            return
        from ..kernels import zfp_cpu

        x = readonly(x)
        bits = x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint64)
        bad = run_kernel(zfp_cpu.encode, x, bits, out.view(np.uint64), self.dims, self.maxbits,
                   *self._scratch_for(x.dtype), serial=x.size < SERIAL_BELOW)
        if bad:
            raise self._uncompressible(
                "nonfinite", f"{bad} block(s) of {self.block_size} values hold NaN or Inf"
            )

    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        if out.size == 0:
            return
        from ..kernels import zfp_cpu

        run_kernel(zfp_cpu.decode, readonly(buf.view(np.uint64)), out, self.dims, self.maxbits,
             *self._scratch_for(out.dtype),
             zfp_cpu.decode_table(self.dims, self.maxbits, out.dtype),
             serial=out.size < SERIAL_BELOW)

    # -- CUDA buffers: kernels/zfp_cuda.py ------------------------------------
    def _register_path(self) -> bool:
        """1D blocks with budgets of at most 64 bits are coded in one register."""
        return self.dims == 1 and self.maxbits <= 64

    def encode_on_stream(self, x: Any, out: Any, stream: Any, checked: bool) -> None:
        from ..kernels import zfp_cuda

        bits = x.view(np.uint32 if np.dtype(x.dtype).itemsize == 4 else np.uint64)
        words = out.view(np.uint64)
        flag = cuda.zeros_like_flag(stream)
        if self._register_path():
            blocks, threads = zfp_cuda.launch_shape_1d(x.size, words.size, self.maxbits)
            zfp_cuda.encode_1d[blocks, threads, stream](bits, words, self.maxbits, flag)
        else:
            # chunks of blocks that start and end on a 64-bit word boundary
            chunk = 64 // math.gcd(self.maxbits, 64)
            nblocks = -(-x.size // self.block_size)
            blocks, threads = cuda.grid(-(-nblocks // chunk))
            zfp_cuda.encode_chunks[blocks, threads, stream](
                x, bits, words, self.dims, self.maxbits, chunk, flag)
        # one 4-byte read (a stream synchronization): the only way to refuse the buffer
        if not checked and flag.copy_to_host(stream=stream)[0]:
            raise self._uncompressible(
                "nonfinite", f"a block of {self.block_size} values holds NaN or Inf"
            )

    def decode_on_stream(self, buf: Any, out: Any, stream: Any) -> None:
        from ..kernels import zfp_cuda

        words = buf.view(np.uint64)
        if self._register_path():
            blocks, threads = zfp_cuda.launch_shape_1d(out.size, words.size, self.maxbits)
            zfp_cuda.decode_1d[blocks, threads, stream](words, out, self.maxbits)
        else:
            blocks, threads = cuda.grid(-(-out.size // self.block_size))  # one thread per block
            zfp_cuda.decode_blocks[blocks, threads, stream](words, out, self.dims, self.maxbits)
