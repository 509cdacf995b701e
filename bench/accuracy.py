"""``python -m mpicomp.bench accuracy``: bitplane vs zfp PSNR at equal bits per value.

For each data set and for P = 4, 8, 16 bits per value, compares

* ``bitplane`` with blocks of 32 values at rate ``P + E/32`` (E, the block
  exponent, is 8 bits for float32: rates 4.25, 8.25, 16.25),
* zfp 1D (blocks of 4 values) at the same rate, and
* zfp 3D on 64 contiguous values (the buffer coded as shape (n/16, 4, 4)),
  at the same rate,

all of which spend exactly that many bits per value (zfp's rate granularity
is 1/4 in 1D and 1/64 in 3D). PSNR is zfp's ``20 log10(range / (2 RMSE))``.

On the gradient-like data the project's accuracy targets are checked:

* at ~4 and ~8 bits: bitplane >= zfp 1D + 10 dB and >= zfp 3D + 1 dB;
* at ~16 bits: bitplane >= zfp 3D - 3 dB.

The command prints PASS/FAIL per target and exits with status 1 if any fails.

Quick run::

    python -m mpicomp.bench accuracy --n 65536
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

import numpy as np

from mpicomp.codecs import get_codec

from . import data as bench_data
from .metrics import error_stats
from .report import Column, command_line, format_table, machine_lines, progress

__all__ = ["LEVELS", "TARGET_DATA", "add_arguments", "failed", "main", "run"]

#: bits per value kept by bitplane (sign included): the "~4, ~8, ~16 bits" levels
LEVELS = (4, 8, 16)
#: the data set the targets are defined on
TARGET_DATA = "gradient"
#: bitplane's block size in this comparison
BLOCK_SIZE = 32

# bitplane's block exponent bits on the wire, per dtype
_BITPLANE_EBITS = {np.dtype(np.float32): 8, np.dtype(np.float64): 16}


def _targets(level: int, bp: float, z1: float, z3: float) -> list[dict[str, Any]]:
    """The targets at one level, each with its margin in dB (>= 0 means met)."""
    if level in (4, 8):
        checks = [("bitplane >= zfp1D + 10 dB", bp - (z1 + 10.0)),
                  ("bitplane >= zfp3D + 1 dB", bp - (z3 + 1.0))]
    elif level == 16:
        checks = [("bitplane >= zfp3D - 3 dB", bp - (z3 - 3.0))]
    else:
        checks = []
    return [{"target": f"~{level} bits: {name}", "margin_db": margin, "passed": margin >= 0.0}
            for name, margin in checks]


def _signed(v: float) -> str:
    return f"{v:+.1f}"


COLUMNS = [
    Column("data", "data"),
    Column("level", "~bits"),
    Column("rate", "rate", "{:g}"),
    Column("bpv_bitplane", "bits/val bp", "{:.3f}"),
    Column("bpv_zfp1d", "bits/val z1D", "{:.3f}"),
    Column("bpv_zfp3d", "bits/val z3D", "{:.3f}"),
    Column("psnr_bitplane", "PSNR bitplane", "{:.1f}"),
    Column("psnr_zfp1d", "PSNR zfp1D", "{:.1f}"),
    Column("psnr_zfp3d", "PSNR zfp3D", "{:.1f}"),
    Column("bp_minus_zfp1d", "bp - zfp1D", _signed),
    Column("bp_minus_zfp3d", "bp - zfp3D", _signed),
    Column("verdict", "targets"),
]


def _psnr_and_bits(codec, x: np.ndarray) -> tuple[float, float]:
    y = codec.decode(codec.encode(x), out=np.empty_like(x))
    return error_stats(x, y)["psnr_db"], codec.bits_per_value(x.size, x.dtype)


def run(
    n: int = 1 << 20,
    dtype: str = "float32",
    data: str = "real,gradient,gaussian,smooth",
    seed: int = 0,
    argv: list[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Measure, print the table and the target verdicts, and return one dict per (data, level).

    Rows of the gradient data carry ``targets``: a list of
    ``{"target", "margin_db", "passed"}``; :func:`failed` tells whether any
    target failed.
    """
    out = sys.stdout if out is None else out
    dt = np.dtype(dtype)
    if dt not in _BITPLANE_EBITS:
        raise TypeError(f"dtype must be float32 or float64, got {dt.name}")
    kinds = bench_data.kinds_and_size(data, n)

    rows = []
    for kind in kinds:
        x = bench_data.generate(kind, n, dt, seed=seed)
        for level in LEVELS:
            rate = level + _BITPLANE_EBITS[dt] / BLOCK_SIZE
            bp, bpv_bp = _psnr_and_bits(get_codec("bitplane", rate=rate, block_size=BLOCK_SIZE), x)
            z1, bpv_z1 = _psnr_and_bits(get_codec("zfp", rate=rate, dims=1), x)
            z3, bpv_z3 = _psnr_and_bits(get_codec("zfp", rate=rate, dims=3), x)
            row: dict[str, Any] = {
                "data": kind, "level": level, "rate": rate,
                "bpv_bitplane": bpv_bp, "bpv_zfp1d": bpv_z1, "bpv_zfp3d": bpv_z3,
                "psnr_bitplane": bp, "psnr_zfp1d": z1, "psnr_zfp3d": z3,
                "bp_minus_zfp1d": bp - z1, "bp_minus_zfp3d": bp - z3,
            }
            if kind == TARGET_DATA:
                row["targets"] = _targets(level, bp, z1, z3)
                row["verdict"] = " ".join("PASS" if t["passed"] else "FAIL"
                                          for t in row["targets"])
            rows.append(row)
            progress(f"accuracy: {kind} ~{level} bits: bitplane {bp:.1f}, zfp1D {z1:.1f}, "
                     f"zfp3D {z3:.1f} dB", err)

    header = machine_lines() + [
        f"{n} {dt.name} values per data set (seed {seed}); bitplane block {BLOCK_SIZE}; "
        "zfp 3D codes 64 contiguous values as a 4x4x4 block",
        "PSNR in dB = 20 log10(range / (2 RMSE)); bp - zfp = PSNR difference in dB",
        f"command: {command_line(argv)}",
    ]
    print(format_table(COLUMNS, rows, header), end="", file=out)
    verdicts = [(r, t) for r in rows for t in r.get("targets", [])]
    if not verdicts:
        print(f"# no targets evaluated: they are defined on '{TARGET_DATA}' data", file=out)
    for r, t in verdicts:
        print(f"# {'PASS' if t['passed'] else 'FAIL'}  {r['data']} {t['target']} "
              f"(margin {t['margin_db']:+.1f} dB)", file=out)
    out.flush()
    return rows


def failed(rows: list[dict[str, Any]]) -> bool:
    """True when any target in ``rows`` failed."""
    return any(not t["passed"] for r in rows for t in r.get("targets", []))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``accuracy`` subcommand's options."""
    parser.add_argument("--n", type=int, default=1 << 20, help="values per data set (1048576)")
    parser.add_argument("--dtype", choices=bench_data.DTYPES, default="float32")
    parser.add_argument("--data", default="real,gradient,gaussian,smooth",
                        help="comma-separated data sets among " + ", ".join(bench_data.KINDS))
    parser.add_argument("--seed", type=int, default=0, help="data seed (0)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns 1 if any target failed, else 0."""
    rows = run(n=args.n, dtype=args.dtype, data=args.data, seed=args.seed, argv=argv)
    return 1 if failed(rows) else 0
