"""``python -m mpicomp.bench field-rd``: bits per value on 2-D and 3-D fields at SZ3's accuracy.

Data (solved at run time): ``gs2d`` and ``gs3d``, the Gray-Scott
reaction-diffusion ``v`` field of ``bench/pde_fields.py`` (py-pde) on
``side2 x side2`` and ``side3**3`` grids, and ``wave2d``, the wave equation
of ``bench/field.py``; float32, C order.

For each of SZ3's relative bounds (``--tolerances``): SZ3 (``pysz``, one
thread, given the array's shape) sets the PSNR; ``errbound`` with
``shape=`` (the field's), zfp in fixed-accuracy mode over the field's
dimensions (``zfpy``: zfp 2D or 3D) and flat ``errbound`` each take the
loosest tolerance (bisected) whose PSNR reaches it; their bits per value
over SZ3's. Speeds: input GB/s, best of ``--repeat``, of shaped
``errbound`` on 1 thread and on the host's budget (``mpicomp.threads``),
encoding into a stream buffer allocated once (as ``rate-distortion`` and
``codecs`` do), and of SZ3 on one thread (it allocates its own); the
speedups are over SZ3's.

``--plot FILE.png``: PSNR against bits per value of each codec, a panel per
field. ``--json FILE``: the rows.

Quick run::

    python -m mpicomp.bench field-rd --side2 128 --side3 32 --data gs2d
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import numpy as np

from mpicomp.codecs import get_codec

from . import sz3
from .field import field
from .rate_distortion import matching, plot_curves, round_trip, speeds
from .report import Column, command_line, format_table, machine_lines, progress

__all__ = ["DATA", "TOLERANCES", "add_arguments", "main", "run"]

DATA = ("gs2d", "gs3d", "wave2d")
#: SZ3's relative bounds: each sets a row's PSNR
TOLERANCES = (1e-2, 1e-3, 1e-4, 1e-5)


def make_field(kind: str, side2: int, side3: int, seed: int = 0) -> np.ndarray:
    if kind == "gs2d":
        from .pde_fields import gray_scott

        return gray_scott((side2, side2), seed)
    if kind == "gs3d":
        from .pde_fields import gray_scott

        return gray_scott((side3, side3, side3), seed)
    if kind == "wave2d":
        return field(side2 * side2, np.float32, seed).reshape(side2, side2)
    raise ValueError(f"data must be among {', '.join(DATA)}, got {kind!r}")


class _Zfp:
    """zfp (LLNL's zfpy) in fixed-accuracy mode over the array's own dimensions, an
    absolute tolerance of ``tolerance * range``."""

    def __init__(self, tolerance: float, value_range: float):
        self.tolerance = tolerance * value_range

    def encode(self, x: np.ndarray) -> np.ndarray:
        import zfpy

        return np.frombuffer(zfpy.compress_numpy(x, tolerance=self.tolerance), np.uint8)

    def decode(self, s: np.ndarray, out: np.ndarray) -> np.ndarray:
        import zfpy

        out[...] = zfpy.decompress_numpy(s.tobytes())
        return out


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[None]:
    """mpicomp's kernels on ``n`` threads (None: the host's budget) inside the block."""
    from mpicomp import threads

    saved = os.environ.get("MPICOMP_THREADS")
    if n is not None:
        os.environ["MPICOMP_THREADS"] = str(n)
    threads.budget.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("MPICOMP_THREADS", None)
        else:
            os.environ["MPICOMP_THREADS"] = saved
        threads.budget.cache_clear()


COLUMNS = [
    Column("data", "data"),
    Column("sz3_tolerance", "SZ3 rel", "{:g}"),
    Column("psnr", "PSNR dB", "{:.1f}"),
    Column("bits_sz3", "bits SZ3", "{:.3f}"),
    Column("bits_shaped", "bits eb", "{:.3f}"),
    Column("bits_zfp", "bits zfp", "{:.3f}"),
    Column("bits_flat", "bits eb flat", "{:.3f}"),
    Column("ratio", "eb/SZ3", "{:.2f}"),
    Column("ratio_zfp", "zfp/SZ3", "{:.2f}"),
    Column("enc_1", "enc eb 1t", "{:.2f}"),
    Column("dec_1", "dec eb 1t", "{:.2f}"),
    Column("enc_n", "enc eb", "{:.2f}"),
    Column("dec_n", "dec eb", "{:.2f}"),
    Column("enc_sz3", "enc SZ3", "{:.3f}"),
    Column("dec_sz3", "dec SZ3", "{:.3f}"),
    Column("enc_x", "enc eb/SZ3", "{:.1f}"),
    Column("dec_x", "dec eb/SZ3", "{:.1f}"),
]


def _row(kind: str, x: np.ndarray, tol: float, repeat: int) -> dict[str, Any]:
    value_range = float(x.max()) - float(x.min())
    shaped = lambda t: get_codec("errbound", tolerance=t, relative=True, shape=x.shape)  # noqa: E731
    flat = lambda t: get_codec("errbound", tolerance=t, relative=True)  # noqa: E731
    # (errbound's relative tolerance is of max|x|, SZ3's and zfp's of the range)
    psnr, bits_sz = round_trip(sz3.SZ3(tol), x)
    t_eb, psnr_eb, bits_eb = matching(shaped, x, psnr)
    _, _, bits_zfp = matching(lambda t: _Zfp(t, value_range), x, psnr)
    _, _, bits_flat = matching(lambda t: _Flat(flat(t)), x, psnr)
    with _threads(1):
        enc_1, dec_1 = speeds(shaped(t_eb), x, repeat)
    with _threads(None):
        enc_n, dec_n = speeds(shaped(t_eb), x, repeat)
    enc_sz, dec_sz = speeds(sz3.SZ3(tol), x, repeat)
    return {"data": kind, "shape": list(x.shape), "sz3_tolerance": tol, "psnr": psnr,
            "psnr_shaped": psnr_eb, "tolerance_shaped": t_eb, "bits_sz3": bits_sz,
            "bits_shaped": bits_eb, "bits_zfp": bits_zfp, "bits_flat": bits_flat,
            "ratio": bits_eb / bits_sz, "ratio_zfp": bits_zfp / bits_sz,
            "enc_1": enc_1, "dec_1": dec_1, "enc_n": enc_n, "dec_n": dec_n,
            "enc_sz3": enc_sz, "dec_sz3": dec_sz, "enc_x": enc_n / enc_sz,
            "dec_x": dec_n / dec_sz}


class _Flat:
    """A codec on the field's values as one flat buffer (no shape)."""

    def __init__(self, codec: Any):
        self.codec = codec

    def encode(self, x: np.ndarray) -> np.ndarray:
        return self.codec.encode(x.reshape(-1))

    def decode(self, s: np.ndarray, out: np.ndarray) -> np.ndarray:
        self.codec.decode(s, out=out.reshape(-1))
        return out


def _curves(x: np.ndarray) -> dict[str, list[tuple[float, float]]]:
    value_range = float(x.max()) - float(x.min())
    tols = [10.0 ** (-e / 2) for e in range(3, 12)]
    return {
        "SZ3": [round_trip(sz3.SZ3(t), x)[::-1] for t in tols],
        "errbound (shape)": [round_trip(get_codec("errbound", tolerance=t, relative=True,
                                                   shape=x.shape), x)[::-1] for t in tols],
        f"zfp {x.ndim}D": [round_trip(_Zfp(t, value_range), x)[::-1] for t in tols],
        "errbound (flat)": [round_trip(_Flat(get_codec("errbound", tolerance=t,
                                                         relative=True)), x)[::-1]
                            for t in tols],
    }


def run(data: str = ",".join(DATA), side2: int = 512, side3: int = 64,
        tolerances: tuple[float, ...] = TOLERANCES, seed: int = 0, repeat: int = 3,
        out: TextIO | None = None, argv: list[str] | None = None,
        plot_path: str | None = None, json_path: str | None = None) -> list[dict[str, Any]]:
    """Run the comparison; print the table (and write the plot and JSON); return its rows."""
    from mpicomp import threads

    out = sys.stdout if out is None else out
    if not sz3.available():
        raise SystemExit("field-rd compares with SZ3: pip install pysz")
    kinds = [k for k in data.split(",") if k]
    for k in kinds:
        if k not in DATA:
            raise SystemExit(f"--data: {k!r} is not among {', '.join(DATA)}")
    rows, sets, shapes = [], {}, {}
    for kind in kinds:
        progress(f"field-rd: solving {kind} ...")
        x = make_field(kind, side2, side3, seed)
        shapes[kind] = x.shape
        for tol in tolerances:
            row = _row(kind, x, tol, repeat)
            rows.append(row)
            progress(f"field-rd: {kind} at SZ3 {tol:g}: {row['psnr']:.1f} dB, errbound "
                     f"{row['bits_shaped']:.3f} bits, SZ3 {row['bits_sz3']:.3f}")
        if plot_path:
            sets[f"{kind} {' x '.join(map(str, x.shape))}"] = _curves(x)
    header = machine_lines() + [
        "fields: " + "; ".join(f"{k} {' x '.join(map(str, s))} float32"
                               for k, s in shapes.items()) + f" (seed {seed})",
        "PSNR = 20 log10(range / (2 RMSE)): SZ3's at its relative bound (given the shape); "
        "errbound with shape=, zfp fixed-accuracy (zfpy, the field's dimensions) and flat "
        "errbound each at the loosest tolerance that reaches it; bits = 8 * stream bytes / "
        "values",
        f"speeds: input GB/s, best of {repeat}; errbound (shape=) on 1 thread and on "
        f"{threads.budget()} (this host's budget), into a stream buffer allocated once; SZ3 "
        "on one thread, allocating its own",
        f"command: {command_line(argv)}",
    ]
    print(format_table(COLUMNS, rows, header), end="", file=out)
    out.flush()
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    if plot_path:
        plot_curves(plot_path, sets, f"float32 fields; {command_line(argv)}", max_bits=24,
                    styles={"SZ3": "d--", "errbound (shape)": "^-", "zfp 2D": "s-",
                            "zfp 3D": "s-", "errbound (flat)": "o:"})
        progress(f"field-rd: curves written to {plot_path}")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=",".join(DATA),
                        help=f"comma-separated, of {','.join(DATA)} (all)")
    parser.add_argument("--side2", type=int, default=512, help="2-D fields' side (512)")
    parser.add_argument("--side3", type=int, default=64, help="3-D fields' side (64)")
    parser.add_argument("--tolerances", default=",".join(f"{t:g}" for t in TOLERANCES),
                        help="SZ3's relative bounds, comma-separated (1e-2 ... 1e-5)")
    parser.add_argument("--seed", type=int, default=0, help="initial state's seed (0)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per speed (3)")
    parser.add_argument("--plot", dest="plot_path", metavar="FILE.png", default=None,
                        help="draw each field's rate-distortion curves (matplotlib)")
    parser.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                        help="write the rows as JSON")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    tolerances = tuple(float(t) for t in args.tolerances.split(",") if t)
    run(data=args.data, side2=args.side2, side3=args.side3, tolerances=tolerances,
        seed=args.seed, repeat=args.repeat, argv=argv, plot_path=args.plot_path,
        json_path=args.json_path)
    return 0
