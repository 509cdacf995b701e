"""``python -m mpicomp.bench rate-distortion``: bits per value at equal accuracy, and speed.

For each data set and each bitplane rate (4.25, 8.25, 16.25 bits per value
for float32): the PSNR bitplane reaches; the fewest bits the error-bounded
``errbound`` codec and SZ3 (``pysz``, when installed) need to reach it too
(each one's relative tolerance bisected to the loosest whose PSNR is at
least bitplane's); zfp 1D's PSNR at that rate. Bits per value count every
byte of a stream (for the variable-size ones, its actual size). Encode and
decode speeds are input GB/s, best of ``--repeat``: the Numba codecs on this
host's thread budget, encoding into a stream buffer allocated once (as the
``codecs`` command does: a fresh buffer's first touch costs page faults
about as long as the encode), SZ3 on one thread, allocating its own;
``enc eb/SZ3`` and ``dec eb/SZ3`` are errbound's speeds over SZ3's.

``--plot FILE.png`` draws the rate-distortion curves (PSNR against bits per
value) of every codec on each data set: bitplane and zfp over their rates,
errbound and SZ3 over their tolerances.

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
from . import sz3
from .codecs import best_time
from .metrics import error_stats
from .report import Column, command_line, format_table, machine_lines, progress

__all__ = ["CURVE_RATES", "CURVE_TOLERANCES", "RATES", "ZFP_CURVE_RATES", "add_arguments",
           "curves", "main", "matching", "plot_curves", "round_trip", "run", "speeds"]

#: bitplane's rates (blocks of 32: P + 8/32 bits per value for float32)
RATES = (4.25, 8.25, 16.25)
#: the curves' points: bitplane rates, zfp rates (its least in 1D is 2.5), relative tolerances
CURVE_RATES = (2.25, 3.25, 4.25, 6.25, 8.25, 12.25, 16.25)
ZFP_CURVE_RATES = (3, 4, 6, 8, 12, 16)
CURVE_TOLERANCES = tuple(10.0 ** (-e / 2) for e in range(2, 13))
#: bisection steps on the tolerance (log scale): PSNR within about 0.05 dB
_STEPS = 24


def round_trip(codec: Any, x: np.ndarray) -> tuple[float, float]:
    """(PSNR dB, bits per value) of one encode/decode."""
    s = codec.encode(x)
    y = codec.decode(s, out=np.empty_like(x))
    return error_stats(x, y)["psnr_db"], 8.0 * s.size / x.size


def matching(make: Any, x: np.ndarray, psnr: float) -> tuple[float, float, float]:
    """(tolerance, PSNR, bits) of the loosest relative tolerance whose PSNR >= ``psnr``."""
    lo, hi = -12.0, 0.0  # log10 of the tolerance: tight (meets) .. loose (misses)
    best = None
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        got, bits = round_trip(make(10.0 ** mid), x)
        if got >= psnr:
            lo, best = mid, (10.0 ** mid, got, bits)
        else:
            hi = mid
    if best is None:
        tol = 10.0 ** lo
        got, bits = round_trip(make(tol), x)
        best = (tol, got, bits)
    return best


def speeds(codec: Any, x: np.ndarray, repeat: int) -> tuple[float, float]:
    """``codec``'s encode and decode of ``x``: input GB/s, best of ``repeat`` each."""
    if hasattr(codec, "encoded_nbytes"):  # ours: into a stream buffer allocated once, as
        room = np.zeros(codec.encoded_nbytes(x.size, x.dtype), np.uint8)  # bench codecs

        def encode() -> Any:
            return codec.encode(x, out=room)
    else:  # SZ3 allocates its stream itself
        def encode() -> Any:
            return codec.encode(x)
    s = encode().copy()
    y = np.empty_like(x)
    codec.decode(s, out=y)
    enc = best_time(encode, repeat)
    dec = best_time(lambda: codec.decode(s, out=y), repeat)
    return x.nbytes / enc / 1e9, x.nbytes / dec / 1e9


def _errbound(tolerance: float) -> Any:
    return get_codec("errbound", tolerance=tolerance, relative=True)


COLUMNS = [
    Column("data", "data"),
    Column("rate", "bp rate", "{:g}"),
    Column("psnr", "PSNR dB", "{:.1f}"),
    Column("bits_bitplane", "bits bp", "{:.2f}"),
    Column("bits_errbound", "bits eb", "{:.2f}"),
    Column("bits_sz3", "bits SZ3", "{:.2f}"),
    Column("ratio", "eb/bp", "{:.2f}"),
    Column("ratio_sz3", "eb/SZ3", "{:.2f}"),
    Column("psnr_zfp", "zfp1D PSNR", "{:.1f}"),
    Column("enc_bitplane", "enc bp", "{:.2f}"),
    Column("dec_bitplane", "dec bp", "{:.2f}"),
    Column("enc_errbound", "enc eb", "{:.2f}"),
    Column("dec_errbound", "dec eb", "{:.2f}"),
    Column("enc_sz3", "enc SZ3", "{:.2f}"),
    Column("dec_sz3", "dec SZ3", "{:.2f}"),
    Column("enc_x_sz3", "enc eb/SZ3", "{:.1f}"),
    Column("dec_x_sz3", "dec eb/SZ3", "{:.1f}"),
]


def _row(kind: str, x: np.ndarray, rate: float, repeat: int, with_sz3: bool) -> dict[str, Any]:
    bp = get_codec("bitplane", rate=rate)
    psnr, bits_bp = round_trip(bp, x)
    tol, psnr_eb, bits_eb = matching(_errbound, x, psnr)
    zfp_psnr, _ = round_trip(get_codec("zfp", rate=math.floor(rate * 4) / 4, dims=1), x)
    enc_bp, dec_bp = speeds(bp, x, repeat)
    enc_eb, dec_eb = speeds(_errbound(tol), x, repeat)
    row = {"data": kind, "rate": rate, "psnr": psnr, "bits_bitplane": bits_bp,
           "bits_errbound": bits_eb, "ratio": bits_eb / bits_bp, "tolerance": tol,
           "psnr_errbound": psnr_eb, "psnr_zfp": zfp_psnr, "enc_bitplane": enc_bp,
           "dec_bitplane": dec_bp, "enc_errbound": enc_eb, "dec_errbound": dec_eb}
    if with_sz3:
        tol_sz, psnr_sz, bits_sz = matching(sz3.SZ3, x, psnr)
        enc_sz, dec_sz = speeds(sz3.SZ3(tol_sz), x, repeat)
        row.update({"bits_sz3": bits_sz, "psnr_sz3": psnr_sz, "tolerance_sz3": tol_sz,
                    "ratio_sz3": bits_eb / bits_sz, "enc_sz3": enc_sz, "dec_sz3": dec_sz,
                    "enc_x_sz3": enc_eb / enc_sz, "dec_x_sz3": dec_eb / dec_sz})
    return row


def curves(x: np.ndarray, with_sz3: bool) -> dict[str, list[tuple[float, float]]]:
    """Each codec's (bits per value, PSNR) points on ``x``."""
    out = {"bitplane": [round_trip(get_codec("bitplane", rate=r), x)[::-1] for r in CURVE_RATES],
           "zfp 1D": [round_trip(get_codec("zfp", rate=r, dims=1), x)[::-1]
                      for r in ZFP_CURVE_RATES],
           "errbound": [round_trip(_errbound(t), x)[::-1] for t in CURVE_TOLERANCES]}
    if with_sz3:
        out["SZ3"] = [round_trip(sz3.SZ3(t), x)[::-1] for t in CURVE_TOLERANCES]
    return out


def plot_curves(path: str, sets: dict[str, dict[str, list[tuple[float, float]]]],
                title: str, styles: dict[str, str] | None = None,
                max_bits: float = 20) -> None:
    """PSNR against bits per value: a panel per data set, a line per codec (``styles``:
    matplotlib format strings by codec name; the default a marker of its own each)."""
    from .plot import _pyplot

    plt = _pyplot()
    styles = styles or {"bitplane": "o-", "zfp 1D": "s-", "errbound": "^-", "SZ3": "d--"}
    fig, axes = plt.subplots(1, len(sets), figsize=(5 * len(sets), 4.5), squeeze=False)
    for ax, (kind, lines) in zip(axes[0], sets.items(), strict=True):
        for name, points in lines.items():
            points = sorted(p for p in points if p[0] <= max_bits)
            ax.plot(*zip(*points, strict=True), styles.get(name, "o-"), label=name,
                    markersize=4)
        ax.set_title(kind)
        ax.set_xlabel("bits per value")
        ax.set_ylabel("PSNR (dB)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(n: int = 1 << 20, dtype: Any = "float32", data: str = "real,weights,field",
        seed: int = 0, repeat: int = 3, out: TextIO | None = None, err: TextIO | None = None,
        argv: list[str] | None = None, plot_path: str | None = None,
        use_sz3: bool = True) -> list[dict[str, Any]]:
    """Run the comparison; print the table (and write the plot); return its rows."""
    out = sys.stdout if out is None else out
    dt = np.dtype(dtype)
    if dt != np.float32:
        raise TypeError(f"dtype must be float32 (bitplane's rates), got {dt.name}")
    kinds = bench_data.kinds_and_size(data, n)
    with_sz3 = use_sz3 and sz3.available()
    rows = []
    sets = {}
    for kind in kinds:
        x = bench_data.generate(kind, n, dt, seed=seed)
        for rate in RATES:
            row = _row(kind, x, rate, repeat, with_sz3)
            rows.append(row)
            versus = f", SZ3 {row['bits_sz3']:.2f}" if with_sz3 else ""
            progress(f"rate-distortion: {kind} at bitplane {rate}: {row['psnr']:.1f} dB, "
                     f"errbound {row['bits_errbound']:.2f} bits{versus}", err)
        if plot_path:
            sets[kind] = curves(x, with_sz3)
    header = machine_lines() + [
        f"{n} {dt.name} values per data set (seed {seed}); PSNR = 20 log10(range / (2 RMSE)), "
        "bitplane's at its rate; errbound's and SZ3's relative tolerances bisected to the "
        "loosest that reaches it; zfp 1D at bitplane's rate (floored to 1/4 bit)",
        "bits = 8 * stream bytes / values (errbound, SZ3: the bytes a stream uses); speeds: "
        f"input GB/s, best of {repeat} (ours into a stream buffer allocated once, as the codecs "
        "command does; SZ3 allocates its own); SZ3 (pysz, one thread): "
        + ("measured" if with_sz3 else "not installed (pip install pysz)" if use_sz3
           else "left out (--no-sz3)"),
        f"command: {command_line(argv)}",
    ]
    print(format_table(COLUMNS, rows, header), end="", file=out)
    out.flush()
    if plot_path:
        plot_curves(plot_path, sets, f"{n} float32 values per set; {command_line(argv)}")
        progress(f"rate-distortion: curves written to {plot_path}", err)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``rate-distortion`` subcommand's options."""
    bench_data.add_data_arguments(parser, 1 << 20)
    parser.add_argument("--seed", type=int, default=0, help="data seed (0)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per speed (3)")
    parser.add_argument("--plot", dest="plot_path", metavar="FILE.png", default=None,
                        help="draw each data set's rate-distortion curves (matplotlib)")
    parser.add_argument("--no-sz3", dest="use_sz3", action="store_false",
                        help="leave SZ3 out even where pysz is installed")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    run(n=args.n, data=args.data, seed=args.seed, repeat=args.repeat, argv=argv,
        plot_path=args.plot_path, use_sz3=args.use_sz3)
    return 0
