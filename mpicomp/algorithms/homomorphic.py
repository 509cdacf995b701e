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

The quantization error is made once per input, not once per hop: per value,
``|result - exact sum| <= p * 2**e / (2 Q)`` (plus one float rounding of the
final product). ``k`` is the largest field width with
``64 / (64 // k) + 16 / BLOCK <= rate``; the rate must leave ``Q >= 1``.
The codec setting does not matter to this algorithm (only ``rate`` does).
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
from mpi4py import MPI

from ..kernels import fixedpoint_cpu as fx
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
        src = np.frombuffer(inbuf, dtype=np.uint64)
        dst = np.frombuffer(inoutbuf, dtype=np.uint64)
        fx.swar_add(dst, src, high, low)

    return MPI.Op.Create(add, commute=True)


def allreduce(ctx: Ctx, x: np.ndarray, out: np.ndarray, rate: float) -> Format:
    p, n = ctx.size, x.size
    fmt = choose_format(rate, p)
    nblocks = -(-n // BLOCK)
    exps = ctx.scratch.get("exps", nblocks, np.int16)
    gexps = ctx.scratch.get("gexps", nblocks, np.int16)
    with ctx.rec.codec():
        fx.block_exponents(x, BLOCK, exps)
    with ctx.rec.mpi():
        ctx.comm.Allreduce(exps, gexps, op=MPI.MAX)
    ctx.rec.sent(exps.nbytes)
    nwords = -(-n // fmt.per_word)
    words = ctx.scratch.get("words", nwords, np.uint64)
    sums = ctx.scratch.get("sums", nwords, np.uint64)
    with ctx.rec.codec():
        fx.quantize_pack(x, gexps, BLOCK, fmt.k, fmt.q_max, words)
    with ctx.rec.mpi():
        ctx.comm.Allreduce(words, sums, op=_sum_op(fmt.k))
    ctx.rec.sent(words.nbytes)
    with ctx.rec.codec():
        fx.unpack_dequantize(sums, gexps, BLOCK, fmt.k, fmt.q_max, out)
    return fmt
