"""Homomorphic fixed-point allreduce: quantize once, sum integers exactly.

1. Each rank finds, for every block of :data:`BLOCK` values, the smallest
   power of two above its largest magnitude; one MPI MAX allreduce of these
   int16 exponents gives every rank the same scale ``2**e`` per block.
2. Each value becomes the integer ``q = rint(x * Q / 2**e)``, ``|q| <= Q``,
   with ``Q = (2**(k-1) - 1) // p``: headroom for ``p`` summands in a
   ``k``-bit two's-complement field.
3. The fields, packed ``64 // k`` per 64-bit word, are summed by one
   MPI_Allreduce with a user-defined op that adds packed words field by field
   (modulo ``2**k``, exact thanks to the headroom).
4. ``sum * 2**e / Q`` is the result, the same bits on every rank.

On device buffers the three kernels run on the GPU (``fixedpoint_cuda.py``,
the same per-word code as the CPU's, so the same bits); the exponents and
packed words, which the MPI op adds on the host, go through pinned host
buffers.

The quantization error is made once per input, not once per hop: per value,
``|result - exact sum| <= p * 2**e / (2 Q)`` (plus one float rounding of the
final product). ``k`` is the largest field width with
``64 / (64 // k) + 16 / BLOCK <= rate``; the rate must leave ``Q >= 1``.
The codec setting does not matter to this algorithm (only ``rate`` does).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
from mpi4py import MPI

from ..kernels.launch import run_kernel
from .common import Ctx

__all__ = ["BLOCK", "Format", "allreduce", "choose_format"]

#: values per shared exponent
BLOCK = 64


@dataclasses.dataclass(frozen=True)
class Format:
    k: int  #: bits per field
    q_max: int  #: largest |q| a rank may contribute
    bits_per_value: float  #: exact wire cost, exponents included

    @property
    def per_word(self) -> int:
        return 64 // self.k


def choose_format(rate: float, p: int) -> Format:
    """The widest field that fits ``rate``; ValueError if none leaves room for ``p`` summands."""
    best = None
    for k in range(2, 33):
        bits = 64 / (64 // k) + 16 / BLOCK
        if bits <= rate:
            best = (k, bits)
    if best is not None:
        k, bits = best
        q_max = ((1 << (k - 1)) - 1) // p
        if q_max >= 1:
            return Format(k, q_max, bits)
    need = next(
        64 / (64 // k) + 16 / BLOCK for k in range(2, 33) if ((1 << (k - 1)) - 1) // p >= 1
    )
    raise ValueError(
        f"algorithm 'homomorphic': rate {rate:g} leaves no room for the sum of {p} ranks; "
        f"it needs rate >= {need:g} bits per value"
    )


@functools.cache
def _sum_op(k: int) -> MPI.Op:
    """An MPI op adding packed ``k``-bit fields (commutative and exact modulo 2**k)."""
    m = 64 // k
    field_high = sum(1 << (j * k + k - 1) for j in range(m))
    field_all = sum(((1 << k) - 1) << (j * k) for j in range(m))
    high, low = np.uint64(field_high), np.uint64(field_all & ~field_high)

    def add(inbuf, inoutbuf, datatype):  # noqa: ARG001 - MPI's signature
        from ..kernels import fixedpoint_cpu as fx

        src = np.frombuffer(inbuf, dtype=np.uint64)
        dst = np.frombuffer(inoutbuf, dtype=np.uint64)
        run_kernel(fx.swar_add, dst, src, high, low)

    return MPI.Op.Create(add, commute=True)


def allreduce(ctx: Ctx, x: Any, out: Any, rate: float) -> Format:
    p, n = ctx.size, x.size
    fmt = choose_format(rate, p)
    nblocks = -(-n // BLOCK)
    nwords = -(-n // fmt.per_word)
    steps = _DeviceSteps(ctx) if ctx.on_device else _HostSteps(ctx)
    exps = steps.exponents(x, nblocks)
    gexps = ctx.memory.host("gexps", nblocks, np.int16)
    with ctx.rec.mpi():
        ctx.comm.Allreduce(exps, gexps, op=MPI.MAX)
    ctx.rec.sent(exps.nbytes)
    words = steps.pack(x, gexps, fmt, nwords)
    sums = ctx.memory.host("sums", nwords, np.uint64)
    with ctx.rec.mpi():
        ctx.comm.Allreduce(words, sums, op=_sum_op(fmt.k))
    ctx.rec.sent(words.nbytes)
    steps.unpack(sums, fmt, out)
    return fmt


class _HostSteps:
    """The three kernels on host arrays (``kernels/fixedpoint_cpu.py``)."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.gexps: np.ndarray | None = None

    def exponents(self, x: np.ndarray, nblocks: int) -> np.ndarray:
        from ..kernels import fixedpoint_cpu as fx

        exps = self.ctx.memory.host("exps", nblocks, np.int16)
        with self.ctx.rec.codec():
            run_kernel(fx.block_exponents, x, BLOCK, exps)
        return exps

    def pack(self, x: np.ndarray, gexps: np.ndarray, fmt: Format, nwords: int) -> np.ndarray:
        from ..kernels import fixedpoint_cpu as fx

        self.gexps = gexps
        words = self.ctx.memory.host("words", nwords, np.uint64)
        with self.ctx.rec.codec():
            run_kernel(fx.quantize_pack, x, gexps, BLOCK, fmt.k, fmt.q_max, words)
        return words

    def unpack(self, sums: np.ndarray, fmt: Format, out: np.ndarray) -> None:
        from ..kernels import fixedpoint_cpu as fx

        with self.ctx.rec.codec():
            run_kernel(fx.unpack_dequantize, sums, self.gexps, BLOCK, fmt.k, fmt.q_max, out)


class _DeviceSteps:
    """The same kernels on the GPU (``kernels/fixedpoint_cuda.py``).

    MPI adds the packed words with a Python op, which must run on host
    memory: the exponents and words (the compressed data) always go through
    the pinned host buffers, also with a CUDA-aware MPI.
    """

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.memory = ctx.memory
        self.gexps_d: Any = None
        ctx.rec.where("device, staged through pinned host")

    def _launch(self, kernel: Any, items: int, *args: Any) -> None:
        with self.ctx.rec.codec():
            self.memory.launch(kernel, items, *args)

    def exponents(self, x: Any, nblocks: int) -> np.ndarray:
        from ..kernels import fixedpoint_cuda as fc

        exps_d = self.ctx.values("exps", nblocks, np.int16)
        self._launch(fc.block_exponents, nblocks, x, BLOCK, exps_d)
        exps = self.memory.host("exps", nblocks, np.int16)
        self.memory.copy(exps, exps_d)
        return exps  # MPIOnDevice waits for the stream before MPI reads it

    def pack(self, x: Any, gexps: np.ndarray, fmt: Format, nwords: int) -> np.ndarray:
        from ..kernels import fixedpoint_cuda as fc

        self.gexps_d = self.ctx.values("gexps", gexps.size, np.int16)
        self.memory.copy(self.gexps_d, gexps)
        words_d = self.ctx.values("words", nwords, np.uint64)
        self._launch(fc.quantize_pack, nwords, x, self.gexps_d, BLOCK, fmt.k, fmt.q_max,
                     words_d)
        words = self.memory.host("words", nwords, np.uint64)
        self.memory.copy(words, words_d)
        return words

    def unpack(self, sums: np.ndarray, fmt: Format, out: Any) -> None:
        from ..kernels import fixedpoint_cuda as fc

        sums_d = self.ctx.values("sums", sums.size, np.uint64)
        self.memory.copy(sums_d, sums)
        self._launch(fc.unpack_dequantize, sums.size, sums_d, self.gexps_d, BLOCK, fmt.k,
                     fmt.q_max, out)
