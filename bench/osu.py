"""``mpiexec -n P python -m mpicomp.bench osu_allreduce`` (and the other ``osu_*``): OSU sweeps.

Subcommands ``osu_allreduce``, ``osu_allgather``, ``osu_alltoall``,
``osu_reduce_scatter``, ``osu_bcast``, ``osu_latency`` and ``osu_bw`` time
one MPI method of an :class:`mpicomp.Comm` over message sizes, following the
conventions of the OSU Micro-Benchmarks (OMB) v7.4: their options (``-m
[MIN:]MAX`` bytes, ``-i`` iterations, ``-x`` warm-up, ``-f`` full, ``-c``
validation, ``-d`` buffers, ``-T`` datatype), their default iteration
counts and loops (``mpicomp.bench.osu_cases``), and their output: ``#``
header lines, a ``# Size`` column header, then rows of ``%-10d`` size and
``%20.2f`` columns, printed by rank 0. mpicomp adds columns after OSU's,
measured in the same run: plain MPI's figure (the same loop on a plain
duplicate of ``MPI.COMM_WORLD``), the speedup (plain / mpicomp), the
compression ratio (raw / wire bytes of the method as ``comm.stats()`` counts
them, summed over the ranks that sent: so Alltoall's raw bytes include the
block a rank keeps, and Bcast's are the root's), the performance model's
prediction (``comm.predict`` after ``comm.calibrate``: the compressed time
when the policy would compress or a codec was given, else the plain time),
and the relative L2 and largest absolute error against the exact result.
``--json`` writes the run and one record per size, ``--plot`` draws it
(``mpicomp.bench.plot``).

The communicator is ``mpicomp.Comm(MPI.COMM_WORLD.Dup(), codec=...,
rate=..., algorithm=..., threshold=..., tolerance=...)`` with the options
given: with no ``--codec`` or ``--tolerance`` it is what
``mpicomp.COMM_WORLD`` gives a user (environment, then the library's default
policy); with either the threshold is 0 (every size compressed) unless
``--threshold`` says otherwise.

Quick run (seconds)::

    mpiexec -n 2 python -m mpicomp.bench osu_allreduce -m 4096:65536 -i 10 -x 2 -f -c
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import sys
from typing import Any, TextIO

import numpy as np

from . import data as bench_data
from .osu_buffers import KINDS as BUFFER_KINDS
from .osu_buffers import BufferError, buffers
from .osu_cases import BENCHMARKS, Benchmark, Check, Env, Timing
from .report import command_line, progress

__all__ = ["DEFAULT_DATA", "NAMES", "Subcommand", "message_sizes", "run", "subcommands",
           "wire_ratio"]

NAMES = tuple(BENCHMARKS)
#: OMB's default largest message (bytes)
DEFAULT_MAX = 1 << 20
#: the data the buffers hold unless --data says otherwise
DEFAULT_DATA = "real" if "real" in bench_data.KINDS else "gradient"
#: -T values: (NumPy dtype, MPI datatype name)
DATATYPES = {"mpi_float": (np.dtype(np.float32), "MPI_FLOAT"),
             "mpi_double": (np.dtype(np.float64), "MPI_DOUBLE")}
_SIZE_W, _W, _NARROW_W = 10, 20, 12


class UsageError(ValueError):
    """A bad option or an unusable setup, reported by rank 0 without a traceback."""


def message_sizes(spec: str | None, itemsize: int) -> list[int]:
    """OSU's ``-m [MIN:]MAX``: ``MIN``, ``2 MIN``, ... up to ``MAX`` bytes.

    MIN defaults to the datatype's size, MAX to 1 MiB (``MIN:`` alone sets MIN).

    >>> message_sizes("1024:8192", 4)
    [1024, 2048, 4096, 8192]
    >>> message_sizes(None, 4)[:3], message_sizes(None, 4)[-1]
    ([4, 8, 16], 1048576)
    """
    lo, hi = itemsize, DEFAULT_MAX
    if spec is not None:
        head, sep, tail = spec.partition(":")
        try:
            if sep:
                lo = int(head) if head.strip() else lo
                hi = int(tail) if tail.strip() else hi
            else:
                hi = int(head)
        except ValueError:
            raise UsageError(
                f"-m {spec!r}: use [MIN:]MAX in bytes, e.g. -m 1024:16777216") from None
    if lo < itemsize or hi < lo:
        raise UsageError(f"-m {spec!r}: need {itemsize} <= MIN <= MAX, got MIN {lo}, MAX {hi}")
    if lo % itemsize:
        raise UsageError(f"-m {spec!r}: MIN must be a multiple of the datatype's "
                         f"{itemsize} bytes, got {lo}")
    out = []
    size = lo
    while size <= hi:
        out.append(size)
        size *= 2
    return out


@dataclasses.dataclass(frozen=True)
class Column:
    heading: str
    key: str
    fmt: str  # "f": %.2f, "e": %.2e, "d": integer, "s": text
    width: int = _W

    def head(self) -> str:
        return f"{self.heading:>{self.width}}"

    def cell(self, row: dict[str, Any]) -> str:
        v = row.get(self.key)
        if v is None:
            return f"{'-':>{self.width}}"
        if self.fmt == "s":
            return f"{v:>{self.width}}"
        if self.fmt == "d":
            return f"{v:{self.width}d}"
        if isinstance(v, float) and not math.isfinite(v):
            return f"{v!s:>{self.width}}"
        return f"{v:{self.width}.2{self.fmt}}"


def columns(bench: Benchmark, full: bool, validate: bool) -> list[Column]:
    """OSU's columns (those that ``-f`` and ``-c`` add included), then mpicomp's."""
    if bench.measures == "bandwidth":
        cols = [Column("Bandwidth (MB/s)", "bandwidth_mbps", "f")]
    else:
        cols = [Column("Avg Latency(us)", "avg_us", "f")]
        if full:
            cols += [Column("Min Latency(us)", "min_us", "f"),
                     Column("Max Latency(us)", "max_us", "f")]
    if full:
        cols.append(Column("Iterations", "iterations", "d", _NARROW_W))
    if validate:
        cols.append(Column("Validation", "validation", "s", _NARROW_W))
    if bench.measures == "bandwidth":
        cols += [Column("Plain BW (MB/s)", "plain_bandwidth_mbps", "f"),
                 Column("Speedup", "speedup", "f"), Column("Ratio", "ratio", "f"),
                 Column("Predicted (MB/s)", "predicted_mbps", "f")]
    else:
        cols += [Column("Plain Avg(us)", "plain_avg_us", "f"),
                 Column("Speedup", "speedup", "f"), Column("Ratio", "ratio", "f"),
                 Column("Predicted(us)", "predicted_us", "f")]
    return cols + [Column("Rel L2", "rel_l2", "e"), Column("Max Abs Err", "max_abs_err", "e")]


def header_line(cols: list[Column]) -> str:
    return f"{'# Size':<{_SIZE_W}}" + "".join(c.head() for c in cols)


def row_line(cols: list[Column], row: dict[str, Any]) -> str:
    return f"{row['size']:<{_SIZE_W}d}" + "".join(c.cell(row) for c in cols)


def _codec_words(pol: Any) -> str:
    cfg = dict(pol.codec.get_config())
    cid = cfg.pop("id")
    words = f"{cid} ({', '.join(f'{k} {v}' for k, v in sorted(cfg.items()))})" if cfg else cid
    if getattr(pol, "auto", False):
        words = f"auto: {words} where the model predicts a gain, else plain MPI"
    if getattr(pol, "tolerance", None):
        value, relative = pol.tolerance
        words += f", tolerance {value:g}{' relative' if relative else ''} per call"
    return words


def wire_ratio(world: Any, stats: dict[str, Any], method: str) -> float | None:
    """raw / wire bytes of ``method`` over the ranks that sent something."""
    st = stats.get(method, {})
    wire = st.get("wire_bytes", 0)
    raw = world.allreduce(st.get("raw_bytes", 0) if wire else 0)
    wire = world.allreduce(wire)
    return raw / wire if wire else None


def _predict(comm: Any, bench: Benchmark, size: int, dtype: np.dtype,
             explicit_codec: bool) -> dict[str, Any]:
    """The model's figures (None without ``comm.predict`` or with codec ``none``)."""
    none = {"predicted_us": None, "predicted_plain_us": None, "predicted_compressed_us": None,
            "predicted_algorithm": None, "predicted_compress": None}
    if not hasattr(comm, "predict") or not comm.resolved_policy().enabled:
        return none
    pred = comm.predict(bench.predict_method, bench.raw_bytes(size, comm.Get_size()),
                        dtype=dtype)
    shown = pred.compressed_s if (pred.compress or explicit_codec) else pred.plain_s
    return {"predicted_us": shown * 1e6, "predicted_plain_us": pred.plain_s * 1e6,
            "predicted_compressed_us": pred.compressed_s * 1e6,
            "predicted_algorithm": pred.algorithm, "predicted_compress": bool(pred.compress)}


def _record(bench: Benchmark, size: int, warmup: int, t: Timing, plain: Timing,
            ratio: float | None, pred: dict[str, Any], check: Check, validate: bool,
            stats: dict[str, Any]) -> dict[str, Any]:
    st = stats.get(bench.method, {})
    row: dict[str, Any] = {
        "size": size, "iterations": t.iterations, "warmup": warmup,
        "avg_us": t.avg_s * 1e6, "min_us": t.min_s * 1e6, "max_us": t.max_s * 1e6,
        "plain_avg_us": plain.avg_s * 1e6, "plain_min_us": plain.min_s * 1e6,
        "plain_max_us": plain.max_s * 1e6,
        "speedup": plain.avg_s / t.avg_s if t.avg_s > 0 else None,
        "ratio": ratio, **pred,
        "rel_l2": check.rel_l2, "max_abs_err": check.max_abs_err,
        "calls": st.get("calls", 0), "compressed_calls": st.get("compressed", 0),
        "path": check.path, "check": check.detail, "check_ok": check.ok,
        "validation": ("Pass" if check.ok else "Fail") if validate else None,
    }
    if bench.measures == "bandwidth":
        row["bandwidth_mbps"] = size / row["avg_us"]
        row["plain_bandwidth_mbps"] = size / row["plain_avg_us"]
        p_us = row["predicted_us"]
        row["predicted_mbps"] = size / p_us if p_us else None
    return row


def _agree_ok(world: Any, error: str | None) -> str | None:
    """The first rank's error, on every rank (so that all ranks stop together)."""
    errors = world.allgather(error)
    return next((e for e in errors if e is not None), None)


@dataclasses.dataclass
class _Setup:
    """The checked options of one run."""

    dtype: np.dtype
    mpi_name: str
    sizes: list[int]
    bufs: Any
    settings: dict[str, Any]
    pol: Any


def _setup(name: str, bench: Benchmark, world: Any, sizes: str | None,
           iterations: int | None, warmup: int | None, buffer: str, datatype: str,
           plot_path: str | None, settings: dict[str, Any]) -> _Setup:
    """Check the options and get the buffers; :class:`UsageError` (or the library's
    ``ValueError``/``TypeError`` for a bad policy) when they cannot be used."""
    import mpicomp
    from mpicomp.policy import resolve

    if datatype not in DATATYPES:
        raise UsageError(f"-T {datatype!r}: use one of {', '.join(DATATYPES)}")
    dtype, mpi_name = DATATYPES[datatype]
    size_list = message_sizes(sizes, dtype.itemsize)
    if world.Get_size() < bench.min_ranks:
        raise UsageError(f"{name} needs at least {bench.min_ranks} ranks, got {world.Get_size()}")
    if (iterations is not None and iterations < 1) or (warmup is not None and warmup < 0):
        raise UsageError(f"need -i >= 1 and -x >= 0, got {iterations}, {warmup}")
    if plot_path and importlib.util.find_spec("matplotlib") is None:
        raise UsageError("--plot needs matplotlib: pip install matplotlib "
                         "(or pip install 'mpicomp[bench]')")
    pol = resolve(mpicomp.Policy(), mpicomp.Policy(**settings))
    bufs = buffers(buffer, world.Get_rank())
    return _Setup(dtype, mpi_name, size_list, bufs, settings, pol)


def _header(name: str, bench: Benchmark, s: _Setup, p: int, data: str, threads: int,
            model_words: str, skipped: list[tuple[int, str]], argv: list[str] | None
            ) -> list[str]:
    """OSU's two header lines, then mpicomp's: the policy, the extra columns, the command."""
    pol = s.pol
    alg = f", algorithm {pol.algorithm}" if bench.method == "Allreduce" else ""
    lines = [
        "",
        f"# mpicomp OSU-style MPI {bench.title} (OMB v7.4 conventions)",
        f"# Datatype: {s.mpi_name}.",
        f"# mpicomp: codec {_codec_words(pol)}, threshold {pol.threshold} B{alg}; {p} ranks; "
        f"buffers {s.bufs.describe()}; data {data} (seed = rank); numba threads per rank "
        f"{threads}",
        "# Plain: the same loop on a plain duplicate of MPI.COMM_WORLD"
        + (" (device buffers: mpicomp with codec none)" if s.bufs.on_device else "")
        + "; Speedup = plain / mpicomp; Ratio = raw / wire bytes (comm.stats()); "
        + model_words + "; errors against the exact result",
        f"# Command: mpiexec -n {p} {command_line(argv)}",
    ]
    if skipped:
        lines.append(f"# Skipped sizes: {', '.join(str(size) for size, _ in skipped)} "
                     f"({skipped[0][1]})")
    return lines


def _progress_line(name: str, bench: Benchmark, row: dict[str, Any], i: int, n: int) -> str:
    if bench.measures == "bandwidth":
        figure = (f"{row['bandwidth_mbps']:.2f} MB/s "
                  f"(plain {row['plain_bandwidth_mbps']:.2f} MB/s)")
    else:
        figure = f"{row['avg_us']:.2f} us (plain {row['plain_avg_us']:.2f} us)"
    return f"{name}: size {row['size']} B ({i}/{n}): {figure}, {row['path']}"


def run(
    name: str,
    sizes: str | None = None,
    iterations: int | None = None,
    warmup: int | None = None,
    full: bool = False,
    validate: bool = False,
    buffer: str = "numpy",
    datatype: str = "mpi_float",
    codec: str | None = None,
    rate: float | None = None,
    algorithm: str | None = None,
    threshold: int | None = None,
    tolerance: str | None = None,
    data: str = DEFAULT_DATA,
    threads: int | None = None,
    json_path: str | None = None,
    plot_path: str | None = None,
    show_progress: bool = False,
    argv: list[str] | None = None,
    out: TextIO | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Run benchmark ``name`` on ``MPI.COMM_WORLD``; rank 0 prints the table.

    Returns ``(exit status, records)`` on every rank: status 1 when ``validate``
    and a check failed on some rank, 2 for an unusable setup (rank 0 says why
    on stderr), else 0; one record per size run (see the module docs).
    """
    from mpi4py import MPI

    import mpicomp

    from .allreduce import setup_threads

    out = sys.stdout if out is None else out
    world = MPI.COMM_WORLD
    rank, p = world.Get_rank(), world.Get_size()
    bench = BENCHMARKS[name]
    named = codec is not None or tolerance is not None
    settings = {"codec": codec, "rate": rate, "algorithm": algorithm, "tolerance": tolerance,
                "threshold": 0 if named and threshold is None else threshold}
    error = None
    try:
        s = _setup(name, bench, world, sizes, iterations, warmup, buffer, datatype, plot_path,
                   settings)
    except (UsageError, BufferError, ValueError, TypeError) as exc:
        error = str(exc)
    error = _agree_ok(world, error)
    if error is not None:
        if rank == 0:
            print(f"{name}: {error}", file=sys.stderr, flush=True)
        return 2, []

    threads_used, _ = setup_threads(world, threads)
    pol = s.pol
    comm = mpicomp.Comm(world.Dup(), **settings)
    # device buffers need mpicomp's plain path (staging when MPI is not CUDA-aware)
    plain = (mpicomp.Comm(world.Dup(), codec="none") if s.bufs.on_device
             else MPI.Intracomm(world.Dup()))
    env = Env(world, comm, plain, s.bufs, s.dtype, data)
    explicit_codec = named and pol.enabled and not getattr(pol, "auto", False)
    if not hasattr(comm, "predict"):
        model_words = "Predicted: - (this mpicomp has no comm.predict)"
    elif not pol.enabled:
        model_words = "Predicted: - (codec none: the model has nothing to predict)"
    else:
        model_words = "Predicted = comm.predict() after comm.calibrate()"
        if hasattr(comm, "calibrate"):
            comm.calibrate()  # collective: keep the measurement out of the timed loops
    skipped = [(size, why) for size in s.sizes if (why := bench.skip(size, env)) is not None]
    run_sizes = [size for size in s.sizes if bench.skip(size, env) is None]
    cols = columns(bench, full, validate)
    show = rank == 0 and (show_progress or sys.stderr.isatty())
    if rank == 0:
        lines = _header(name, bench, s, p, data, threads_used, model_words, skipped, argv)
        print("\n".join([*lines, header_line(cols)]), file=out, flush=True)
        if show:
            progress(f"{name}: {len(run_sizes)} sizes on {p} ranks")

    records = []
    for i, size in enumerate(run_sizes, 1):
        iters, warm = bench.iterations(size)
        iters = iterations if iterations is not None else iters
        warm = warmup if warmup is not None else warm
        state = bench.prepare(env, size)
        t_plain = bench.time(env, plain, state, iters, warm)
        comm.reset_stats()
        t = bench.time(env, comm, state, iters, warm)
        stats = comm.stats()
        ratio = wire_ratio(world, stats, bench.method)
        pred = _predict(comm, bench, size, s.dtype, explicit_codec)
        check = bench.check(env, state)
        row = _record(bench, size, warm, t, t_plain, ratio, pred, check, validate, stats)
        records.append(row)
        del state
        if rank == 0:
            print(row_line(cols, row), file=out, flush=True)
            if show:
                progress(_progress_line(name, bench, row, i, len(run_sizes)))

    failed = [r for r in records if not r["check_ok"]] if validate else []
    if rank == 0:
        for r in failed:
            print(f"# Validation failed at size {r['size']} ({r['path']}): {r['check']}",
                  file=out)
        out.flush()
        result = {"benchmark": name, "title": bench.title, "omb_conventions": "7.4",
                  "ranks": p, "datatype": s.mpi_name, "buffer": s.bufs.kind, "data": data,
                  "policy": {"codec": pol.codec.get_config(),
                             "auto": getattr(pol, "auto", False), "rate": pol.rate,
                             "threshold": pol.threshold, "algorithm": pol.algorithm},
                  "command": f"mpiexec -n {p} {command_line(argv)}",
                  "skipped": [size for size, _ in skipped], "records": records}
        if json_path:
            with open(json_path, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
        if plot_path:
            from .plot import plot_sweep

            plot_sweep(plot_path, result)
    comm.Free()
    plain.Free()
    return (1 if failed else 0), records


def add_arguments(parser: argparse.ArgumentParser, bench: Benchmark) -> None:
    """The options of one ``osu_*`` subcommand (OSU's short names, then mpicomp's)."""
    small, large = bench.small, bench.large
    parser.add_argument("-m", "--message-size", metavar="[MIN:]MAX", default=None,
                        help="message sizes in bytes, powers of two from MIN to MAX "
                             f"(default: the datatype's size to {DEFAULT_MAX})")
    parser.add_argument("-i", "--iterations", type=int, default=None,
                        help=f"timed iterations per size (default {small[0]} up to 8192 B, "
                             f"{large[0]} above)")
    parser.add_argument("-x", "--warmup", type=int, default=None,
                        help=f"untimed warm-up iterations per size (default {small[1]} up to "
                             f"8192 B, {large[1]} above)")
    parser.add_argument("-f", "--full", action="store_true",
                        help="also print min and max latency and the iteration count")
    parser.add_argument("-c", "--validation", action="store_true",
                        help="check every size's result (exit status 1 on a failure)")
    parser.add_argument("-d", "--buffer", choices=BUFFER_KINDS, default="numpy",
                        help="buffer kind: host NumPy, or CUDA device memory (default numpy)")
    parser.add_argument("-T", "--type", dest="datatype", type=_datatype, default="mpi_float",
                        help="mpi_float (default) or mpi_double")
    parser.add_argument("--codec", default=None,
                        help="codec id or JSON config (default: the library's policy, as "
                             "mpicomp.COMM_WORLD; given: threshold 0 unless --threshold)")
    parser.add_argument("--rate", type=float, default=None, help="bits per value")
    parser.add_argument("--algorithm", default=None, help="allreduce algorithm")
    parser.add_argument("--tolerance", default=None,
                        help="the largest error of each call (1e-3, or rel:1e-3): errbound")
    parser.add_argument("--threshold", type=int, default=None,
                        help="bytes below which calls go to plain MPI")
    parser.add_argument("--data", choices=bench_data.KINDS, default=DEFAULT_DATA,
                        help=f"what the buffers hold (default {DEFAULT_DATA})")
    parser.add_argument("--threads", type=int, default=None,
                        help="numba threads per rank (default: usable cores / ranks per node)")
    parser.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                        help="(rank 0) write the run and one record per size as JSON")
    parser.add_argument("--plot", dest="plot_path", metavar="FILE.png", default=None,
                        help="(rank 0) plot latency and speedup against size (matplotlib)")
    parser.add_argument("--progress", action="store_true",
                        help="(rank 0) a progress line per size on stderr (default: only "
                             "when stderr is a terminal, which under mpiexec it rarely is)")


def _datatype(text: str) -> str:
    t = text.strip().lower()
    return t if t.startswith("mpi_") else "mpi_" + t


class Subcommand:
    """One ``osu_*`` subcommand as ``python -m mpicomp.bench`` registers it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bench = BENCHMARKS[name]

    @property
    def summary(self) -> str:
        what = ("bandwidth" if self.bench.measures == "bandwidth" else "latency")
        return (f"OSU-style {self.bench.method} {what} sweep, mpicomp vs plain MPI "
                f"(run under mpiexec{', 2+ ranks' if self.bench.min_ranks > 1 else ''})")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_arguments(parser, self.bench)

    def main(self, args: argparse.Namespace, argv: list[str] | None = None) -> int:
        status, _ = run(
            self.name, sizes=args.message_size, iterations=args.iterations,
            warmup=args.warmup, full=args.full, validate=args.validation,
            buffer=args.buffer, datatype=args.datatype, codec=args.codec, rate=args.rate,
            algorithm=args.algorithm, threshold=args.threshold, tolerance=args.tolerance,
            data=args.data,
            threads=args.threads, json_path=args.json_path, plot_path=args.plot_path,
            show_progress=args.progress, argv=argv)
        return status


def subcommands() -> dict[str, tuple[Subcommand, str]]:
    """The ``osu_*`` entries of ``python -m mpicomp.bench``'s table: name -> (command, summary)."""
    table = {}
    for name in NAMES:
        cmd = Subcommand(name)
        table[name] = (cmd, cmd.summary)
    return table
