"""``python -m mpicomp.bench rate-distortion``: bits per value at equal accuracy, and speed.

For each data set and each bitplane rate (4.25, 8.25, 16.25 bits per value
for float32), the PSNR bitplane reaches, then the fewest bits the
error-bounded ``errbound`` codec needs to reach it too (its relative
tolerance bisected until its PSNR is at least bitplane's), and zfp 1D's PSNR
at that rate. Bits per value count every byte of the stream (an
``errbound`` stream's actual size). Encode and decode speeds are input GB/s,
best of ``--repeat``, on this host's thread budget.

The ratio column is errbound's bits over bitplane's at equal PSNR: below 1
where the variable-size codec sends fewer bits for the same accuracy.

Quick run::

    python -m mpicomp.bench rate-distortion --n 65536 --data real
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any, TextIO

import numpy as np

from mpicomp.codecs import get_codec

from . import data as bench_data
from .codecs import best_time
from .metrics import error_stats
from .report import Column, command_line, format_table, machine_lines, progress

__all__ = ["RATES", "add_arguments", "main", "run"]

#: bitplane's rates (blocks of 32: P + 8/32 bits per value for float32)
RATES = (4.25, 8.25, 16.25)
#: bisection steps on the tolerance (log scale): PSNR within about 0.05 dB
_STEPS = 30


def _round_trip(codec: Any, x: np.ndarray) -> tuple[float, float]:
    """(PSNR dB, bits per value) of one encode/decode."""
    s = codec.encode(x)
    y = codec.decode(s, out=np.empty_like(x))
    return error_stats(x, y)["psnr_db"], 8.0 * s.size / x.size


def _matching(make: Any, x: np.ndarray, psnr: float) -> tuple[float, float, float]:
    """(tolerance, PSNR, bits) of the loosest relative tolerance whose PSNR >= ``psnr``."""
    lo, hi = -16.0, 0.0  # log10 of the tolerance: tight (meets) .. loose (misses)
    best = None
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        got, bits = _round_trip(make(10.0 ** mid), x)
        if got >= psnr:
            lo, best = mid, (10.0 ** mid, got, bits)
        else:
            hi = mid
    if best is None:
        tol = 10.0 ** lo
        got, bits = _round_trip(make(tol), x)
        best = (tol, got, bits)
    return best


def _speeds(codec: Any, x: np.ndarray, repeat: int) -> tuple[float, float]:
    s = codec.encode(x)
    y = np.empty_like(x)
    codec.decode(s, out=y)
    enc = best_time(lambda: codec.encode(x), repeat)
    dec = best_time(lambda: codec.decode(s, out=y), repeat)
    return x.nbytes / enc / 1e9, x.nbytes / dec / 1e9


COLUMNS = [
    Column("data", "data"),
    Column("rate", "bp rate", "{:g}"),
    Column("psnr", "PSNR dB", "{:.1f}"),
    Column("bits_bitplane", "bits bp", "{:.2f}"),
    Column("bits_errbound", "bits eb", "{:.2f}"),
    Column("ratio", "eb/bp", "{:.2f}"),
    Column("tolerance", "eb rel tol", "{:.2e}"),
    Column("psnr_zfp", "zfp1D PSNR", "{:.1f}"),
    Column("enc_bitplane", "enc bp GB/s", "{:.2f}"),
    Column("dec_bitplane", "dec bp GB/s", "{:.2f}"),
    Column("enc_errbound", "enc eb GB/s", "{:.2f}"),
    Column("dec_errbound", "dec eb GB/s", "{:.2f}"),
]


def run(n: int = 1 << 20, dtype: Any = "float32", data: str = "real,smooth,gaussian",
        seed: int = 0, repeat: int = 3, out: TextIO | None = None, err: TextIO | None = None,
        argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the comparison; print the table; return its rows."""
    out = sys.stdout if out is None else out
    dt = np.dtype(dtype)
    if dt != np.float32:
        raise TypeError(f"dtype must be float32 (bitplane's rates), got {dt.name}")
    kinds = bench_data.kinds_and_size(data, n)
    rows = []
    for kind in kinds:
        x = bench_data.generate(kind, n, dt, seed=seed)
        for rate in RATES:
            bp = get_codec("bitplane", rate=rate)
            psnr, bits_bp = _round_trip(bp, x)
            tol, psnr_eb, bits_eb = _matching(
                lambda t: get_codec("errbound", tolerance=t, relative=True), x, psnr)
            eb = get_codec("errbound", tolerance=tol, relative=True)
            zfp_psnr, _ = _round_trip(get_codec("zfp", rate=math.floor(rate * 4) / 4, dims=1), x)
            enc_bp, dec_bp = _speeds(bp, x, repeat)
            enc_eb, dec_eb = _speeds(eb, x, repeat)
            rows.append({"data": kind, "rate": rate, "psnr": psnr, "bits_bitplane": bits_bp,
                         "bits_errbound": bits_eb, "ratio": bits_eb / bits_bp,
                         "tolerance": tol, "psnr_errbound": psnr_eb, "psnr_zfp": zfp_psnr,
                         "enc_bitplane": enc_bp, "dec_bitplane": dec_bp,
                         "enc_errbound": enc_eb, "dec_errbound": dec_eb})
            progress(f"rate-distortion: {kind} at bitplane {rate}: {psnr:.1f} dB, errbound "
                     f"{bits_eb:.2f} bits ({bits_eb / bits_bp:.2f}x bitplane's)", err)
    header = machine_lines() + [
        f"{n} {dt.name} values per data set (seed {seed}); PSNR = 20 log10(range / (2 RMSE)), "
        "bitplane's at its rate; errbound's relative tolerance bisected to the loosest that "
        "reaches it; zfp 1D at bitplane's rate (floored to 1/4 bit)",
        "bits = 8 * stream bytes / values (errbound: the bytes a stream uses); speeds: input "
        f"GB/s, best of {repeat}",
        f"command: {command_line(argv)}",
    ]
    print(format_table(COLUMNS, rows, header), end="", file=out)
    out.flush()
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``rate-distortion`` subcommand's options."""
    parser.add_argument("--n", type=int, default=1 << 20, help="values per data set (1048576)")
    parser.add_argument("--data", default="real,smooth,gaussian",
                        help="comma-separated data sets among " + ", ".join(bench_data.KINDS))
    parser.add_argument("--seed", type=int, default=0, help="data seed (0)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per speed (3)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    run(n=args.n, data=args.data, seed=args.seed, repeat=args.repeat, argv=argv)
    return 0
