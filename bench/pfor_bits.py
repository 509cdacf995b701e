"""``python -m mpicomp.bench pfor-bits``: what errbound's streams would weigh if its blocks
were coded with a fixed width (and exceptions) instead of Rice codes.

errbound's decoder reads Rice codes one after the other (``rice-chains``
times that loop: it is most of the decode), which keeps it far from the
speed of bitplane's decoder, whose fixed-width planes decode with vector
operations. A patched frame of reference (PFOR) codes a block of 32
integers in one width ``w`` for all (``w`` planes, decodable without a
serial chain) and lists the values that do not fit as exceptions: a 5-bit
index and the bits above ``w`` each, after an 11-bit header (their count
and how many bits they add). This command prices that coding of the same
integers errbound codes, to say what such a format would cost in bits
before anyone writes its kernels.

For each data set and tolerance (relative to the largest magnitude), it
encodes with errbound and reads the stream's code bytes: raw blocks and
blocks of zeros cost the same in both. Every other block is priced as the
cheapest of PFOR over its values or their residuals of order 1, 2 or 3
(with errbound's history: the values before the block in its group of 8
blocks, 0 before a group's first; an order only where every residual's
zigzag code fits 32 bits, as errbound requires), each at its best ``w``,
and errbound's zero mask. Both pay errbound's code byte per block and two
bytes of size per group. A third coding, ``aligned``, is the simplest a
vector (or a GPU warp) decodes: every block a whole number of bytes (so
its offset follows from the code bytes: no group sizes), the values or
residuals of order 1-3 in the width of the largest (no exceptions), or the
zero mask. Columns: bits per value of errbound's stream, of PFOR and of
aligned, each over errbound's, and the share of values PFOR codes as
exceptions.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from mpicomp.kernels.errbound_layout import BLOCK as _BLOCK
from mpicomp.kernels.errbound_layout import GROUP as _GROUP
from mpicomp.kernels.errbound_layout import RAW

from . import data as bench_data

__all__ = ["add_arguments", "main", "pfor_block_bits", "run"]

#: an exception's index bits and a block's exception header (count and extra width)
_INDEX_BITS = 5
_HEADER_BITS = 11
#: a cost no coding reaches
_NEVER = np.int64(1) << np.int64(40)


def _zigzag(d: np.ndarray) -> np.ndarray:
    return np.where(d >= 0, 2 * d, -2 * d - 1)


def _bit_lengths(z: np.ndarray) -> np.ndarray:
    """Bits needed for each non-negative integer (below 2**52) of ``z``, 0 for 0."""
    return np.frexp(z.astype(np.float64))[1].astype(np.int64)


def pfor_block_bits(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(bits, exceptions)`` of the cheapest PFOR coding of each row of ``z`` (non-negative
    integers, one block a row): ``w`` bits a value plus, where some value needs more, the
    header and each such value's index and bits above ``w``."""
    lengths = _bit_lengths(z)
    widest = lengths.max(axis=1)
    rows = z.shape[0]
    top = int(widest.max(initial=0))
    counts = np.zeros((rows, top + 2), np.int64)
    np.add.at(counts, (np.repeat(np.arange(rows), z.shape[1]), lengths.ravel()), 1)
    # above[:, w]: the values longer than w bits
    above = counts[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]
    best = np.full(rows, _NEVER)
    excepted = np.zeros(rows, np.int64)
    for w in range(top + 1):
        n_exc = above[:, w]
        cost = z.shape[1] * w + np.where(
            n_exc > 0, _HEADER_BITS + n_exc * (_INDEX_BITS + np.maximum(widest - w, 0)), 0)
        better = cost < best
        best = np.where(better, cost, best)
        excepted = np.where(better, n_exc, excepted)
    return best, excepted


def _residuals(q: np.ndarray, order: int) -> np.ndarray:
    """``q`` (one group a row) minus its prediction of ``order`` from the values before each,
    0 before a group's first value."""
    if order == 0:
        return q
    h = np.concatenate([np.zeros((q.shape[0], 3), np.int64), q], axis=1)
    at = np.arange(3, h.shape[1])
    if order == 1:
        return h[:, at] - h[:, at - 1]
    if order == 2:
        return h[:, at] - 2 * h[:, at - 1] + h[:, at - 2]
    return h[:, at] - 3 * h[:, at - 1] + 3 * h[:, at - 2] - h[:, at - 3]


def _mask_bits(z: np.ndarray) -> np.ndarray:
    """errbound's zero mask of each block (a bit a value, each non-zero ``z - 1`` in the
    width of the largest), where the block holds zeros and non-zeros."""
    nonzero = (z != 0).sum(axis=1)
    width = _bit_lengths(np.maximum(z.max(axis=1) - 1, 0))
    mixed = (nonzero > 0) & (nonzero < z.shape[1])
    return np.where(mixed, z.shape[1] + nonzero * width, _NEVER)


def measure(x: np.ndarray, tolerance: float) -> dict:
    """errbound's and PFOR's bits per value and PFOR's exception share for ``x`` (a whole
    number of groups) at ``tolerance`` relative to its largest magnitude."""
    from mpicomp.codecs.errbound import ErrboundCodec, _sections

    codec = ErrboundCodec(tolerance=tolerance, relative=True)
    stream = np.empty(codec.stream_nbytes(x.size, x.dtype), np.uint8)
    used = codec.encode_into(x, stream)
    codes = _sections(stream, x.size)[0].astype(np.int64)
    step = 2.0 * codec.bound(x)
    # the encoder's integers: x times 1/step, plus 1/2, each rounded, floored
    # (0 past 31 bits, as errbound's history of a raw block takes them)
    q = np.floor(x.astype(np.float64) * (1.0 / step) + 0.5)
    q = np.where(np.abs(q) <= 2.0**31 - 1, q, 0.0).astype(np.int64).reshape(-1, _BLOCK * _GROUP)
    raw = codes == RAW
    priced = []
    for order in range(4):
        z = _zigzag(_residuals(q, order)).reshape(-1, _BLOCK)
        bits, exc = pfor_block_bits(z)
        if order:
            bits = np.where(z.max(axis=1) <= 0xFFFFFFFF, bits, _NEVER)
        priced.append((bits, exc))
    priced.append((_mask_bits(_zigzag(q).reshape(-1, _BLOCK)), np.zeros(codes.size, np.int64)))
    bits = np.stack([b for b, _ in priced])
    pick = bits.argmin(axis=0)
    block_bits = bits[pick, np.arange(codes.size)]
    exceptions = np.stack([e for _, e in priced])[pick, np.arange(codes.size)]
    block_bits = np.where(codes == 0, 0, block_bits)
    exceptions = np.where(codes == 0, 0, exceptions)
    block_bits = np.where(raw, _BLOCK * 8 * x.itemsize, block_bits)
    exceptions = np.where(raw, 0, exceptions)
    groups = codes.size // _GROUP
    group_bytes = (block_bits.reshape(groups, _GROUP).sum(axis=1) + 7) // 8
    pfor_bytes = 8 + codes.size + 2 * groups + int(group_bytes.sum())
    # aligned: the width of each order's largest code, or the mask; whole bytes a block
    widths = []
    for order in range(4):
        z = _zigzag(_residuals(q, order)).reshape(-1, _BLOCK)
        top = z.max(axis=1)
        bits = _BLOCK * _bit_lengths(top)
        widths.append(np.where(order == 0 or top <= 0xFFFFFFFF, bits, _NEVER))
    widths.append(priced[-1][0])
    aligned = np.stack(widths).min(axis=0)
    aligned = np.where(codes == 0, 0, np.where(raw, _BLOCK * 8 * x.itemsize, aligned))
    aligned_bytes = 8 + codes.size + int(((aligned + 7) // 8).sum())
    return {"eb_bits": 8.0 * used / x.size, "pfor_bits": 8.0 * pfor_bytes / x.size,
            "aligned_bits": 8.0 * aligned_bytes / x.size,
            "exceptions": float(exceptions.sum()) / x.size}


def run(n: int = 1 << 20, data: str = "real,weights,field",
        tolerances: str = "1e-2,1e-3,1e-4,1e-5", out: Any = sys.stdout,
        argv: list[str] | None = None) -> list[dict]:
    """Print and return one row per data set and tolerance (see the module docstring)."""
    kinds = bench_data.kinds_and_size(data, n)
    tols = bench_data.relative_tolerances(tolerances, "pfor-bits")
    size = n - n % (_BLOCK * _GROUP)
    if size == 0:
        raise ValueError(f"pfor-bits: --n must be at least {_BLOCK * _GROUP}, got {n}")
    print(f"# command: python -m mpicomp.bench {' '.join(argv or ['pfor-bits'])}", file=out)
    print(f"# {size} float32 values a data set; tolerance relative to max|x|; PFOR: width + "
          f"exceptions ({_INDEX_BITS}-bit index, {_HEADER_BITS}-bit header) over orders 0-3, "
          "or the zero mask", file=out)
    print(f"{'data':8s} {'tolerance':>9s} {'bits eb':>8s} {'bits PFOR':>9s} {'PFOR/eb':>8s} "
          f"{'bits aligned':>12s} {'aligned/eb':>10s} {'exceptions':>10s}", file=out)
    rows = []
    for kind in kinds:
        x = bench_data.generate(kind, size, "float32", 0)
        for tol in tols:
            row = {"data": kind, "tolerance": tol, **measure(x, tol)}
            rows.append(row)
            print(f"{kind:8s} {tol:9.0e} {row['eb_bits']:8.3f} {row['pfor_bits']:9.3f} "
                  f"{row['pfor_bits'] / row['eb_bits']:8.3f} {row['aligned_bits']:12.3f} "
                  f"{row['aligned_bits'] / row['eb_bits']:10.3f} {row['exceptions']:10.4f}",
                  file=out, flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``pfor-bits`` subcommand's options."""
    bench_data.add_data_arguments(parser, 1 << 20)
    parser.add_argument("--tolerances", default="1e-2,1e-3,1e-4,1e-5",
                        help="error bounds relative to the data's largest magnitude, "
                             "comma-separated (1e-2,1e-3,1e-4,1e-5)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    run(n=args.n, data=args.data, tolerances=args.tolerances, argv=argv)
    return 0
