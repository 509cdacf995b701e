"""``python -m mpicomp.bench codecs``: codec speed and accuracy on one buffer.

In one run, on one buffer of synthetic data (``mpicomp.bench.data``):

* ``np.copyto`` bandwidth into a preallocated buffer: the memory-bound
  ceiling a one-pass codec is compared with;
* for each case (a codec spec, see :func:`parse_case`): encode and decode
  throughput (input bytes / best-of-``repeat`` time, after one untimed
  warm-up call that also triggers Numba compilation, with ``out=``
  preallocated), bits per value on the wire, compression ratio, PSNR (zfp's
  definition), relative L2 error and max abs error;
* for 1-D zfp cases, zfpy (the reference implementation, serial) at the same
  exact rate: its throughput, our speedup over it, and whether both produce
  the same stream and the same decoded values.

Throughputs are in GB/s = 1e9 input bytes per second. The table goes to
stdout under a ``# `` header block, one progress line per case to stderr.

Quick run::

    python -m mpicomp.bench codecs --size-mib 1 --repeat 1
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numba
import numpy as np

from mpicomp.codecs import Codec, UncompressibleError, get_codec

from . import data as bench_data
from .metrics import error_stats
from .report import (
    Column,
    OtherLoad,
    command_line,
    format_markdown,
    format_table,
    machine_lines,
    progress,
)

__all__ = ["DEFAULT_CASES", "add_arguments", "evaluate_targets", "main", "parse_case", "run"]

DEFAULT_CASES = (
    "zfp:4,zfp:8,zfp:16,bitplane:4.25,bitplane:8.25,bitplane:16.25,cast:bfloat16,cast:float16"
)

#: project targets for the CPU codecs (docs/performance/codecs.md)
ZFP_SPEEDUP_TARGET = 5.0
ZFP_TARGET_RATES = (4.0, 8.0, 16.0)
BITPLANE_COPY_FRACTION_TARGET = 0.25

_EBITS = {np.dtype(np.float32): 8, np.dtype(np.float64): 11}


def parse_case(spec: str) -> tuple[str, Codec]:
    """Turn a case spec into ``(label, codec)``.

    Specs: ``zfp:RATE[:DIMS]``, ``bitplane:RATE[:BLOCK_SIZE]``,
    ``cast:bfloat16`` / ``cast:float16``, ``errbound:TOLERANCE[:rel]`` (absolute, or
    relative to each encoded buffer's largest magnitude), ``none``.

    >>> label, codec = parse_case("zfp:8")
    >>> label, codec.get_config()
    ('zfp:8', {'id': 'zfp', 'rate': 8.0, 'dims': 1})
    """
    parts = spec.strip().split(":")
    kind, args = parts[0], parts[1:]
    try:
        if kind == "zfp" and len(args) in (1, 2):
            dims = int(args[1]) if len(args) == 2 else 1
            codec = get_codec("zfp", rate=float(args[0]), dims=dims)
        elif kind == "bitplane" and len(args) in (1, 2):
            block = int(args[1]) if len(args) == 2 else 32
            codec = get_codec("bitplane", rate=float(args[0]), block_size=block)
        elif kind == "cast" and len(args) == 1:
            codec = get_codec("cast", dtype=args[0])
        elif kind == "errbound" and (len(args) == 1 or (len(args) == 2 and args[1] == "rel")):
            codec = get_codec("errbound", tolerance=float(args[0]), relative=len(args) == 2)
        elif kind == "none" and not args:
            codec = get_codec("none")
        else:
            raise ValueError("unknown form")
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"bad case {spec!r} ({exc}); use zfp:RATE[:DIMS], bitplane:RATE[:BLOCK_SIZE], "
            "cast:bfloat16|float16, errbound:TOLERANCE[:rel] or none"
        ) from exc
    return spec.strip(), codec


def best_time(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (the caller does the warm-up)."""
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def copy_bandwidth(x: np.ndarray, repeat: int) -> float:
    """``np.copyto`` into a preallocated array: input GB/s, best of ``repeat``."""
    dst = np.empty_like(x)
    np.copyto(dst, x)  # warm-up: faults the pages in
    return x.nbytes / best_time(lambda: np.copyto(dst, x), repeat) / 1e9


def _zfpy_row(x: np.ndarray, codec: Codec, stream: np.ndarray, decoded: np.ndarray,
              repeat: int, nbytes_in: int) -> dict[str, Any]:
    """zfpy at the codec's exact rate: throughput and whether it matches ours."""
    try:
        import zfpy
    except ImportError:
        return {"zfpy_note": "zfpy not installed"}
    # zfpy segfaults when a block's budget cannot hold the block header
    # (1-D float32 at rate <= 2): never hand it such a rate.
    if codec.dims != 1 or codec.maxbits < 2 + _EBITS[x.dtype]:
        return {"zfpy_note": "not comparable"}
    rate = codec.rate
    ztype = zfpy.dtype_to_ztype(x.dtype)
    zbuf = zfpy.compress_numpy(x, rate=rate, write_header=False)
    t_enc = best_time(lambda: zfpy.compress_numpy(x, rate=rate, write_header=False), repeat)
    zout = np.empty_like(x)
    zfpy._decompress(zbuf, ztype, x.shape, out=zout, rate=rate)
    t_dec = best_time(lambda: zfpy._decompress(zbuf, ztype, x.shape, out=zout, rate=rate), repeat)
    identical = bool(
        np.array_equal(np.frombuffer(zbuf, dtype=np.uint8), stream)
        and np.array_equal(zout.view(np.uint8), decoded.view(np.uint8))
    )
    return {
        "zfpy_enc_gbps": nbytes_in / t_enc / 1e9,
        "zfpy_dec_gbps": nbytes_in / t_dec / 1e9,
        "zfpy_identical": identical,
    }


def measure_case(label: str, codec: Codec, x: np.ndarray, repeat: int, copy_gbps: float
                 ) -> dict[str, Any]:
    """Everything the table reports for one codec on ``x``."""
    n, nbytes_in = x.size, x.nbytes
    row: dict[str, Any] = {"case": label, "codec": codec.get_config()}
    # room for the longest stream: a variable-size codec (errbound) uses the head of it
    room = np.empty(codec.encoded_nbytes(n, x.dtype), dtype=np.uint8)
    decoded = np.empty_like(x)
    try:
        stream = codec.encode(x, out=room)  # warm-up: compiles the kernels
    except UncompressibleError as exc:
        row["note"] = f"not encodable: {exc}"
        return row
    t_enc = best_time(lambda: codec.encode(x, out=room), repeat)
    codec.decode(stream, out=decoded)
    t_dec = best_time(lambda: codec.decode(stream, out=decoded), repeat)
    row.update(
        bits_per_value=8.0 * stream.size / n if n else 0.0,
        ratio=nbytes_in / stream.size,
        enc_s=t_enc,
        dec_s=t_dec,
        enc_gbps=nbytes_in / t_enc / 1e9,
        dec_gbps=nbytes_in / t_dec / 1e9,
    )
    row["enc_frac_copy"] = row["enc_gbps"] / copy_gbps
    row["dec_frac_copy"] = row["dec_gbps"] / copy_gbps
    row.update(error_stats(x, decoded))
    if codec.codec_id == "zfp":
        row.update(_zfpy_row(x, codec, stream, decoded, repeat, nbytes_in))
        if "zfpy_enc_gbps" in row:
            row["enc_speedup"] = row["enc_gbps"] / row["zfpy_enc_gbps"]
            row["dec_speedup"] = row["dec_gbps"] / row["zfpy_dec_gbps"]
    return row


def evaluate_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The project's CPU speed targets that ``rows`` can decide.

    zfp (1-D, rates 4, 8, 16): encode and decode each at least 5x zfpy;
    bitplane: encode and decode each at least 25% of ``np.copyto``. The
    targets are defined for float32, 64 MiB; they are evaluated whatever the
    run's size and dtype (the header says which they were).
    """
    targets = []
    for r in rows:
        codec = r["codec"]
        if codec["id"] == "zfp" and codec["dims"] == 1 and codec["rate"] in ZFP_TARGET_RATES:
            for op in ("enc", "dec"):
                value = r.get(f"{op}_speedup")
                if value is None:
                    continue
                targets.append({
                    "case": r["case"],
                    "target": f"{r['case']} {_OPS[op]} >= {ZFP_SPEEDUP_TARGET:g}x zfpy",
                    "value": f"{value:.1f}x",
                    "met": value >= ZFP_SPEEDUP_TARGET,
                })
        elif codec["id"] == "bitplane":
            for op in ("enc", "dec"):
                value = r.get(f"{op}_frac_copy")
                if value is None:
                    continue
                targets.append({
                    "case": r["case"],
                    "target": f"{r['case']} {_OPS[op]} >= "
                              f"{BITPLANE_COPY_FRACTION_TARGET:.0%} of np.copyto",
                    "value": f"{value:.0%}",
                    "met": value >= BITPLANE_COPY_FRACTION_TARGET,
                })
    return targets


_OPS = {"enc": "encode", "dec": "decode"}


def _sci(v: float) -> str:
    return f"{v:.2e}"


COLUMNS = [
    Column("case", "case"),
    Column("bits_per_value", "bits/val", "{:.3f}"),
    Column("ratio", "ratio", "{:.2f}"),
    Column("enc_gbps", "enc GB/s", "{:.3f}"),
    Column("dec_gbps", "dec GB/s", "{:.3f}"),
    Column("enc_frac_copy", "enc/copy", "{:.2f}"),
    Column("dec_frac_copy", "dec/copy", "{:.2f}"),
    Column("psnr_db", "PSNR dB", "{:.1f}"),
    Column("rel_l2", "rel L2", _sci),
    Column("max_abs_err", "max abs err", _sci),
    Column("zfpy_enc_gbps", "zfpy enc GB/s", "{:.3f}"),
    Column("zfpy_dec_gbps", "zfpy dec GB/s", "{:.3f}"),
    Column("enc_speedup", "enc x zfpy", "{:.1f}"),
    Column("dec_speedup", "dec x zfpy", "{:.1f}"),
    Column("zfpy_identical", "same as zfpy", lambda v: "yes" if v else "NO"),
]


def run(
    size_mib: float = 64,
    dtype: str = "float32",
    data: str = "real",
    repeat: int = 5,
    cases: str = DEFAULT_CASES,
    threads: int | None = None,
    seed: int = 0,
    markdown: str | None = None,
    argv: list[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Run the benchmark, print the table and return one dict per case.

    Each dict holds the table's values under the column keys (absent when
    not applicable), ``codec`` (the codec config), ``copy_gbps``, and
    ``targets`` (see :func:`evaluate_targets`) on the cases a target is
    about. A case whose data the codec cannot encode (e.g. float16 overflow)
    has only ``case``, ``codec`` and ``note``.
    """
    out = sys.stdout if out is None else out
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if not size_mib > 0:
        raise ValueError(f"size_mib must be > 0, got {size_mib}")
    if threads is not None and not 1 <= threads <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(
            f"threads must be in [1, {numba.config.NUMBA_NUM_THREADS}] "
            f"(NUMBA_NUM_THREADS), got {threads}"
        )
    saved_threads = numba.get_num_threads()
    if threads is not None:
        numba.set_num_threads(threads)
    try:
        return _run(size_mib, dtype, data, repeat, cases, seed, markdown, argv, out, err)
    finally:
        numba.set_num_threads(saved_threads)


def _run(size_mib: float, dtype: str, data: str, repeat: int, cases: str, seed: int,
         markdown: str | None, argv: list[str] | None, out: TextIO, err: TextIO | None
         ) -> list[dict[str, Any]]:
    parsed = [parse_case(c) for c in cases.split(",") if c.strip()]
    dt = np.dtype(dtype)
    n = int(size_mib * 2**20) // dt.itemsize

    header = machine_lines()
    progress(f"codecs: generating {n} {dt.name} values of '{data}' data", err)
    x = bench_data.generate(data, n, dt, seed=seed)

    copy_gbps = copy_bandwidth(x, repeat)
    progress(f"codecs: np.copyto {copy_gbps:.2f} GB/s", err)

    rows = []
    with OtherLoad() as run_load:
        for i, (label, codec) in enumerate(parsed, 1):
            with OtherLoad() as load:
                row = measure_case(label, codec, x, repeat, copy_gbps)
            row["copy_gbps"] = copy_gbps
            row["other_cores"] = load.cores
            rows.append(row)
            progress(f"[{i}/{len(parsed)}] {label}: {_summary(row)} "
                     f"({load.seconds:.1f} s; {load.describe()})", err)
    targets = evaluate_targets(rows)
    for r in rows:
        mine = [t for t in targets if t["case"] == r["case"]]
        if mine:
            r["targets"] = mine

    header += [
        f"buffer: {x.nbytes / 2**20:g} MiB = {n} {dt.name} values, data '{data}' (seed {seed})",
        f"np.copyto: {copy_gbps:.3f} GB/s (input bytes/s, best of {repeat})",
        f"GB/s = 1e9 input bytes/s, best of {repeat} after a warm-up; "
        "enc/copy, dec/copy = fraction of np.copyto; zfpy is serial, 1-D, same exact rate",
        f"command: {command_line(argv)}",
    ]
    footer = _notes(rows) + [
        f"during the cases: {run_load.describe()}; {_load_line('load average at the end')}"
    ] + [
        f"target {t['target']}: {t['value']} -> {'met' if t['met'] else 'NOT met'}"
        for t in targets
    ]
    print(format_table(COLUMNS, rows, header), end="", file=out)
    for line in footer:
        print(f"# {line}", file=out)
    out.flush()
    if markdown:
        text = format_markdown("Codec benchmark", COLUMNS, rows, header)
        if footer:
            text += "\n" + "\n".join(f"- {line}" for line in footer) + "\n"
        with open(markdown, "w", encoding="utf-8") as f:
            f.write(text)
    return rows


def _summary(row: dict[str, Any]) -> str:
    if "note" in row:
        return row["note"]
    s = (f"enc {row['enc_gbps']:.3f} GB/s, dec {row['dec_gbps']:.3f} GB/s, "
         f"PSNR {row['psnr_db']:.1f} dB")
    if "zfpy_enc_gbps" in row:
        s += (f"; zfpy enc {row['zfpy_enc_gbps']:.3f}, dec {row['zfpy_dec_gbps']:.3f} GB/s, "
              f"identical: {'yes' if row['zfpy_identical'] else 'NO'}")
    return s


def _load_line(label: str) -> str:
    try:
        return label + " " + " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return label + " unknown"


def _notes(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{r['case']}: {r['note']}" for r in rows if "note" in r]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``codecs`` subcommand's options."""
    parser.add_argument("--size-mib", type=float, default=64, help="buffer size in MiB (64)")
    parser.add_argument("--dtype", choices=bench_data.DTYPES, default="float32")
    parser.add_argument("--data", choices=bench_data.KINDS, default="real")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per measurement (5)")
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help="comma-separated codec specs: zfp:RATE[:DIMS], "
                             "bitplane:RATE[:BLOCK_SIZE], cast:bfloat16|float16, none "
                             f"(default {DEFAULT_CASES})")
    parser.add_argument("--threads", type=int, default=None,
                        help="numba threads (default: numba's default)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (0)")
    parser.add_argument("--markdown", metavar="PATH", default=None,
                        help="also write the table as Markdown to PATH")
    from . import codecs_gpu

    codecs_gpu.add_arguments(parser)


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit status (always 0)."""
    if getattr(args, "buffer", "numpy") == "cupy":
        from . import codecs_gpu

        cases = [parse_case(c) for c in args.cases.split(",") if c.strip()]
        codecs_gpu.run(args.size_mib, args.dtype, args.data, args.repeat, cases, args.seed,
                       args.check, args.markdown, argv, sys.stdout, None)
        return 0
    run(size_mib=args.size_mib, dtype=args.dtype, data=args.data, repeat=args.repeat,
        cases=args.cases, threads=args.threads, seed=args.seed, markdown=args.markdown,
        argv=argv)
    return 0
