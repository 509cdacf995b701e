"""``python -m mpicomp.bench rice-chains``: how fast a Rice decoding loop can go on this host,
one bit stream against two decoded side by side.

errbound's decoder spends most of its time reading Rice codes, one code at a
time: each code's position depends on the previous code's length (a count
of trailing zeros, two shifts), so the codes of one stream form a serial
chain. Splitting a group's codes between two streams would give the
processor two independent chains; this command measures what that could
gain before the format pays for it. It takes the zigzag codes of the
quantized values of each data set (bound ``--tolerance`` times the largest
magnitude; per block of 32 codes the Rice parameter ``k`` that codes it in
the fewest bits, as errbound picks it; only the blocks whose codes all fit
56 bits, the share ``kept``), writes them as one Rice stream and as two
(each block's even and odd codes), and times two minimal decoding loops of
the codes into float32 values, errbound's inner loop without its other
codings: ``one``, the single stream; ``two``, both streams in one loop, a
code of each per iteration. Both must decode the quantized values. Columns:
``kept``, bits per code, ns per code of each loop (best of ``--repeat``)
and ``two x``, one's time over two's.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from . import data as bench_data

__all__ = ["add_arguments", "main", "run"]


def _loops() -> tuple[Any, Any]:
    """The Rice writer and the two decoding loops, compiled on first use."""
    from numba import njit
    from numba.cpython.unsafe.numbers import trailing_zeros

    one = np.uint64(1)

    from mpicomp.kernels.errbound_block import _load8 as load8  # (the decoder's own load)

    @njit
    def write(z, ks, per, out):
        """Rice codes of ``z`` (LSB first, ``per`` codes a block, block ``b``'s parameter
        ``ks[b]``) into ``out``; returns the bytes used."""
        acc = np.uint64(0)
        fill = 0
        p = 0
        for i in range(z.size):
            v = z[i]
            k = ks[i // per]
            t = v >> k
            while t >= 32:  # (long quotients: 32 zero bits at a time)
                fill += 32
                while fill >= 8:
                    out[p] = np.uint8(acc & np.uint64(0xFF))
                    acc >>= np.uint64(8)
                    fill -= 8
                    p += 1
                t -= 32
            acc |= np.uint64(1) << np.uint64(fill + t)
            fill += t + 1
            while fill >= 8:
                out[p] = np.uint8(acc & np.uint64(0xFF))
                acc >>= np.uint64(8)
                fill -= 8
                p += 1
            acc |= np.uint64(v & ((1 << k) - 1)) << np.uint64(fill)
            fill += k
            while fill >= 8:
                out[p] = np.uint8(acc & np.uint64(0xFF))
                acc >>= np.uint64(8)
                fill -= 8
                p += 1
        while fill > 0:
            out[p] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            fill -= 8
            p += 1
        return p

    @njit(inline="always")
    def refill(buf, p, acc, fill):
        """Top the reader up to 56-63 bits with one 8-byte load (as errbound's does)."""
        acc |= load8(buf, p) << np.uint64(fill)
        return p + ((63 - fill) >> 3), acc, fill | 56

    @njit(inline="always")
    def value(t, v, k, low, step):
        z = (t << k) | np.int64(v & low)
        return np.float32(np.float64((z >> 1) ^ -(z & 1)) * step)

    @njit
    def decode_one(buf, ks, step, out):
        """One stream, blocks of 32 codes: refill to 56+ bits, take every code whole in them
        (codes of at most 56 bits; the command keeps only such blocks)."""
        p = 0
        acc = np.uint64(0)
        fill = 0
        for b in range(ks.size):
            k = ks[b]
            low = (one << np.uint64(k)) - one
            i = 32 * b
            n = i + 32
            while i < n:
                p, acc, fill = refill(buf, p, acc, fill)
                room = fill - k
                t = np.int64(trailing_zeros(acc))
                while i < n and t < room:
                    v = acc >> np.uint64(t + 1)
                    out[i] = value(t, v, k, low, step)
                    acc = v >> np.uint64(k)
                    room -= t + 1 + k
                    i += 1
                    t = np.int64(trailing_zeros(acc))
                fill = room + k

    @njit
    def decode_two(a, b, ks, step, out):
        """Two streams (each block's codes 0, 2, 4, ... in ``a``; 1, 3, ... in ``b``), one
        code of each per iteration: two independent chains."""
        pa = 0
        pb = 0
        acc_a = np.uint64(0)
        acc_b = np.uint64(0)
        fill_a = 0
        fill_b = 0
        for blk in range(ks.size):
            k = ks[blk]
            low = (one << np.uint64(k)) - one
            i = 32 * blk
            n = i + 32
            while i < n:
                pa, acc_a, fill_a = refill(a, pa, acc_a, fill_a)
                pb, acc_b, fill_b = refill(b, pb, acc_b, fill_b)
                room_a = fill_a - k
                room_b = fill_b - k
                ta = np.int64(trailing_zeros(acc_a))
                tb = np.int64(trailing_zeros(acc_b))
                while i < n and ta < room_a and tb < room_b:
                    va = acc_a >> np.uint64(ta + 1)
                    vb = acc_b >> np.uint64(tb + 1)
                    out[i] = value(ta, va, k, low, step)
                    out[i + 1] = value(tb, vb, k, low, step)
                    acc_a = va >> np.uint64(k)
                    acc_b = vb >> np.uint64(k)
                    room_a -= ta + 1 + k
                    room_b -= tb + 1 + k
                    i += 2
                    ta = np.int64(trailing_zeros(acc_a))
                    tb = np.int64(trailing_zeros(acc_b))
                fill_a = room_a + k
                fill_b = room_b + k

    return write, (decode_one, decode_two)


def _codes(x: np.ndarray, bound: float) -> np.ndarray:
    """The zigzag codes of ``x`` quantized to the step ``2 * bound``."""
    q = np.floor(x.astype(np.float64) / (2.0 * bound) + 0.5).astype(np.int64)
    return (q << 1) ^ (q >> 63)


def _best_ks(z: np.ndarray) -> np.ndarray:
    """Per row of ``z`` (a block of codes), the Rice parameter that codes it in the fewest
    bits."""
    bits = np.stack([np.sum(z >> k, axis=1) + z.shape[1] * (k + 1) for k in range(33)])
    return np.argmin(bits, axis=0).astype(np.int64)


def run(n: int = 1 << 20, data: str = "real,weights,field", tolerance: float = 1e-4,
        repeat: int = 15, out: Any = sys.stdout, argv: list[str] | None = None) -> list[dict]:
    """Print and return one row per data set (see the module docstring)."""
    if not 1e-12 <= tolerance <= 1:
        raise ValueError(f"rice-chains: --tolerance must lie in [1e-12, 1], got {tolerance!r}")
    kinds = bench_data.kinds_and_size(data, n)
    write, (decode_one, decode_two) = _loops()
    print(f"# command: python -m mpicomp.bench {' '.join(argv or ['rice-chains'])}", file=out)
    print(f"# {n} values a data set, bound {tolerance:g} x max|x|, one thread, best of "
          f"{repeat}", file=out)
    print(f"{'data':8s} {'kept':>5s} {'bits':>6s} {'one ns':>7s} {'two ns':>7s} {'two x':>6s}",
          file=out)
    rows = []
    for kind in kinds:
        x = bench_data.generate(kind, n, "float32", 0)
        blocks = _codes(x[: x.size - x.size % 32], tolerance * float(np.abs(x).max()))
        blocks = blocks.reshape(-1, 32)
        ks = _best_ks(blocks)
        fits = (blocks.max(axis=1) >> ks) + 1 + ks <= 56
        ks = ks[fits]
        z = blocks[fits].ravel()
        size = z.size
        if not size:
            raise ValueError(f"rice-chains: no block of {kind!r} has Rice codes within 56 bits "
                             f"at --tolerance {tolerance:g}: raise it")
        room = 8 * size + 64  # (a stream's upper bound in bytes, and the loads' slack)
        streams = [np.zeros(room, np.uint8) for _ in range(3)]
        used = [write(z, ks, 32, streams[0]), write(z[0::2], ks, 16, streams[1]),
                write(z[1::2], ks, 16, streams[2])]
        step = 2.0 * tolerance * float(np.abs(x).max())
        y1 = np.empty(size, np.float32)
        y2 = np.empty(size, np.float32)
        decode_one(streams[0], ks, step, y1)
        decode_two(streams[1], streams[2], ks, step, y2)
        want = (((z >> 1) ^ -(z & 1)).astype(np.float64) * step).astype(np.float32)
        for name, y in (("one", y1), ("two", y2)):
            if not np.array_equal(y.view(np.uint32), want.view(np.uint32)):
                raise AssertionError(f"rice-chains: loop {name!r} decodes other values than "
                                     f"the quantized data ({kind})")
        one = two = np.inf
        for _ in range(repeat):
            t0 = time.perf_counter()
            decode_one(streams[0], ks, step, y1)
            t1 = time.perf_counter()
            decode_two(streams[1], streams[2], ks, step, y2)
            t2 = time.perf_counter()
            one, two = min(one, t1 - t0), min(two, t2 - t1)
        row = {"data": kind, "kept": size / x.size, "bits": 8.0 * used[0] / size,
               "one_ns": one / size * 1e9, "two_ns": two / size * 1e9}
        rows.append(row)
        print(f"{kind:8s} {row['kept']:5.3f} {row['bits']:6.2f} {row['one_ns']:7.2f} "
              f"{row['two_ns']:7.2f} {one / two:6.2f}", file=out, flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``rice-chains`` subcommand's options."""
    bench_data.add_data_arguments(parser, 1 << 20)
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="error bound relative to the data's largest magnitude (1e-4)")
    parser.add_argument("--repeat", type=int, default=15, help="timed rounds (15)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    run(n=args.n, data=args.data, tolerance=args.tolerance, repeat=args.repeat, argv=argv)
    return 0
