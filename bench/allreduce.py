"""``mpiexec -n P python -m mpicomp.bench allreduce``: compressed vs plain MPI Allreduce.

For each message size (float32 values of gradient-like data,
``mpicomp.bench.data``; rank ``r`` uses seed ``seed + r``) and each case:

* ``plain``: ``MPI.COMM_WORLD.Allreduce``, the baseline, measured in the
  same job;
* ``CODEC`` x ``ALGORITHM``: ``mpicomp.Comm(MPI.COMM_WORLD.Dup(), codec=...,
  rate=..., algorithm=..., threshold=0).Allreduce``; the ``homomorphic``
  algorithm depends on the rate only, so it runs once per rate of
  ``--homomorphic-rates`` (``homomorphic:RATE(k=FIELD BITS)``) and is
  skipped, with a note, when that rate cannot hold the sum of P ranks.

Timing: ``--warmup`` untimed calls, then ``--repeat`` timed calls (more,
up to 10x, when they would take less than ``--min-time``), each after a
``Barrier``; a call's time is the slowest rank's, and the table gives the
best and the median of these. ``vs plain`` is median / plain's
median (below 1: faster than plain MPI). Wire bytes, compression ratio
(raw / wire bytes, as ``comm.stats()`` counts them) and the codec / MPI
seconds split are per call, averaged over the ranks (MPI seconds include
waiting for other ranks; the agreement step is in neither). Errors are the
worst rank's, against the sum of the float32 inputs taken in float64 (an
``MPI_Allreduce`` of float64 copies: exact but for float64 rounding).

Quick run (seconds)::

    mpiexec -n 2 python -m mpicomp.bench allreduce --quick
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numba
import numpy as np

from . import data as bench_data
from .codecs import parse_case
from .metrics import error_stats
from .report import Column, OtherLoad, command_line, format_table, machine_lines, progress

__all__ = ["DEFAULT_CASES", "add_arguments", "main", "parse_sizes", "run"]

DEFAULT_SIZES = "256K,4M,64M"
DEFAULT_CASES = "bitplane:4.25,bitplane:8.25,bitplane:16.25,cast:bfloat16,zfp:8,zfp:16"
DEFAULT_ALGORITHMS = "allgather,ring,direct,recursive_doubling,homomorphic"
#: "default" in --algorithms adds the case a user gets with no settings at all
#: (codec auto: compressed only where the calibrated model predicts a gain)
DEFAULT_HOMOMORPHIC_RATES = "4.25,8.25,16.25"
QUICK = {"sizes": "64K", "repeat": 2, "warmup": 1, "min_time": 0.0,
         "cases": "bitplane:8.25,cast:bfloat16,zfp:8", "homomorphic_rates": "8.25"}

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_sizes(text: str) -> list[int]:
    """``"256K,4M,64MiB"`` -> sizes in bytes (binary multiples).

    >>> parse_sizes("256K, 4MiB,1024")
    [262144, 4194304, 1024]
    """
    sizes = []
    for item in text.split(","):
        item = item.strip().upper()
        if not item:
            continue
        digits = item.rstrip("KMGIB")
        unit = item[len(digits):]
        try:
            value = float(digits)
        except ValueError:
            value = -1.0
        if unit not in _UNITS or not value > 0:
            raise ValueError(f"bad size {item!r}: use e.g. 65536, 256K, 4M or 64MiB")
        sizes.append(int(value * _UNITS[unit]))
    if not sizes:
        raise ValueError("no sizes given")
    return sizes


def size_label(nbytes: int) -> str:
    """``262144`` -> ``"256 KiB"``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


# -- what the MPI benchmarks share --------------------------------------------
def setup_threads(world: Any, threads: int | None) -> tuple[int, int]:
    """Numba threads per rank: ``threads``, else usable cores / ranks on this node (>= 1).

    Also asks OpenMP's idle workers to sleep (``OMP_WAIT_POLICY=PASSIVE``
    unless set): ranks sharing cores must not spin against each other.
    Returns ``(threads, ranks on this node)``.
    """
    from mpi4py import MPI

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_size()
    node.Free()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if threads is None:
        threads = max(1, cores // local)
    threads = max(1, min(threads, numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(threads)
    return threads, local


def mpi_lines(world: Any, threads: int, local: int) -> list[str]:
    """Header lines naming mpi4py, the MPI library and the rank layout."""
    import mpi4py
    from mpi4py import MPI

    library = MPI.Get_library_version().strip().splitlines()[0].strip()
    library = " ".join(library.split())
    return [
        f"mpi4py {mpi4py.__version__}, {library} (MPI {'.'.join(map(str, MPI.Get_version()))})",
        f"{world.Get_size()} ranks ({local} on this node), numba threads per rank {threads}, "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}",
    ]


def mpi_command(world: Any, argv: list[str] | None) -> str:
    return f"mpiexec -n {world.Get_size()} {command_line(argv)}"


class JobLoad:
    """CPU used by processes outside this MPI job while it ran (Linux; else unknown).

    Every rank's own CPU time (all threads) is summed and subtracted from the
    machine's busy time, so the ranks of the job do not count as load.
    """

    def __init__(self, world: Any) -> None:
        self.world = world
        self.cores: float | None = None
        self.seconds = 0.0

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    def __enter__(self) -> JobLoad:
        self.world.Barrier()
        self._t0 = time.perf_counter()
        self._busy0 = OtherLoad._busy()
        self._own0 = self._own()
        return self

    def __exit__(self, *exc: object) -> None:
        own = self.world.allreduce(self._own() - self._own0)
        busy1 = OtherLoad._busy()
        self.seconds = time.perf_counter() - self._t0
        if self._busy0 is not None and busy1 is not None and self.seconds > 0:
            self.cores = max(0.0, (busy1 - self._busy0 - own) / self.seconds)

    def describe(self) -> str:
        if self.cores is None:
            return "CPU use outside this job unknown"
        return (f"processes outside this job used {self.cores:.2f} cores on average "
                f"over {self.seconds:.0f} s")


def load_average() -> str:
    try:
        return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "load average unknown"


def timed(world: Any, fn: Callable[[], Any], repeat: int, warmup: int, min_time: float = 0.0,
          after_warmup: Callable[[], Any] | None = None) -> list[float]:
    """Per-call times of ``fn`` (each the slowest rank's), each call after a Barrier.

    ``repeat`` calls, or more (up to ``10 * repeat``) when the last warm-up
    call says that ``repeat`` calls would take less than ``min_time`` seconds.
    """
    from mpi4py import MPI

    t_last = 0.0
    for _ in range(warmup):
        world.Barrier()
        t0 = time.perf_counter()
        fn()
        t_last = time.perf_counter() - t0
    if min_time > 0 and warmup > 0:
        t_last = world.allreduce(t_last, op=MPI.MAX)
        repeat = max(repeat, min(10 * repeat, int(min_time / max(t_last, 1e-9))))
    if after_warmup is not None:
        after_warmup()
    times = np.empty(repeat)
    for i in range(repeat):
        world.Barrier()
        t0 = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t0
    world.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    return times.tolist()


# -- the benchmark ------------------------------------------------------------
def build_cases(cases: str, algorithms: str, homomorphic_rates: str, p: int
                ) -> list[dict[str, Any]]:
    """The compressed cases: ``{"case", "algorithm", "settings" or "skip"}``, in run order."""
    from mpicomp.algorithms.homomorphic import choose_format
    from mpicomp.policy import ALGORITHMS

    algs = [a.strip().replace("-", "_") for a in algorithms.split(",") if a.strip()]
    for a in algs:
        if a not in ALGORITHMS and a != "default":
            raise ValueError(f"unknown algorithm {a!r}; use some of "
                             f"{[*ALGORITHMS, 'default']}")
    parsed = [parse_case(c) for c in cases.split(",") if c.strip()]
    out = []
    if "default" in algs:
        # what a user gets with mpicomp.COMM_WORLD and no settings: the model decides
        out.append({"case": "default", "algorithm": "model", "settings": {}, "default": True})
    for alg in algs:
        if alg in ("homomorphic", "default"):
            continue
        for label, codec in parsed:
            config = codec.get_config()
            rate = config.pop("rate", None)
            if config["id"] == "none":
                raise ValueError("codec 'none' is the plain path; it is not a case here")
            out.append({"case": label, "algorithm": alg,
                        "settings": {"codec": config, "rate": rate, "algorithm": alg}})
    if "homomorphic" in algs:
        for rate in sorted({float(r) for r in homomorphic_rates.split(",") if r.strip()}):
            case = {"case": f"homomorphic:{rate:g}", "algorithm": "homomorphic"}
            try:
                fmt = choose_format(rate, p)
            except ValueError as exc:
                case["skip"] = str(exc)
            else:
                case["case"] += f"(k={fmt.k})"
                case["settings"] = {"codec": "bitplane", "rate": rate, "algorithm": "homomorphic"}
            out.append(case)
    return out


def _mean(world: Any, value: float) -> float:
    return world.allreduce(value) / world.Get_size()


def _errors(world: Any, ref: np.ndarray, out: np.ndarray) -> dict[str, float]:
    from mpi4py import MPI

    s = error_stats(ref, out)
    return {"max_abs_err": world.allreduce(s["max_abs_err"], op=MPI.MAX),
            "rel_l2": world.allreduce(s["rel_l2"], op=MPI.MAX)}


def measure(world: Any, case: dict[str, Any], x: np.ndarray, ref: np.ndarray, repeat: int,
            warmup: int, min_time: float = 0.0) -> dict[str, Any]:
    """One row: times, stats and errors of one case on one buffer."""
    import mpicomp

    row: dict[str, Any] = {"case": case["case"], "algorithm": case["algorithm"]}
    if "skip" in case:
        row["note"] = "skipped: " + case["skip"]
        return row
    out = np.empty_like(x)
    if case["settings"] is None:
        times = timed(world, lambda: world.Allreduce(x, out), repeat, warmup, min_time)
    else:
        # the default case keeps the default threshold; the others compress every size
        extra = {} if case.get("default") else {"threshold": 0}
        comm = mpicomp.Comm(world.Dup(), **extra, **case["settings"])
        try:
            times = timed(world, lambda: comm.Allreduce(x, out), repeat, warmup, min_time,
                          after_warmup=comm.reset_stats)
            st = comm.stats()["Allreduce"]
        finally:
            comm.Free()
        calls = st["calls"]
        if case.get("default"):
            ran = sorted(st["algorithms"]) or ["plain"]
            row["algorithm"] = "model: " + "/".join(ran)
        row.update(
            wire_kib=_mean(world, st["wire_bytes"] / calls) / 1024,
            ratio=_mean(world, st["ratio"]),
            codec_ms=_mean(world, st["codec_seconds"] / calls) * 1e3,
            mpi_ms=_mean(world, st["mpi_seconds"] / calls) * 1e3,
        )
        if st["compressed"] != calls:
            row["note"] = f"plain MPI in {calls - st['compressed']} of {calls} calls: " + ", ".join(
                sorted(st["fallbacks"]))
    row.update(calls=len(times), best_ms=min(times) * 1e3,
               median_ms=statistics.median(times) * 1e3)
    row.update(_errors(world, ref, out))
    return row


def _sci(v: float) -> str:
    return f"{v:.2e}"


COLUMNS = [
    Column("case", "case"),
    Column("algorithm", "algorithm"),
    Column("calls", "calls"),
    Column("best_ms", "best ms", "{:.2f}"),
    Column("median_ms", "median ms", "{:.2f}"),
    Column("vs_plain", "vs plain", "{:.2f}"),
    Column("wire_kib", "wire KiB/rank", "{:.1f}"),
    Column("ratio", "ratio", "{:.2f}"),
    Column("codec_ms", "codec ms", "{:.2f}"),
    Column("mpi_ms", "MPI ms", "{:.2f}"),
    Column("max_abs_err", "max abs err", _sci),
    Column("rel_l2", "rel L2", _sci),
]


def run(
    sizes: str = DEFAULT_SIZES,
    cases: str = DEFAULT_CASES,
    algorithms: str = DEFAULT_ALGORITHMS,
    homomorphic_rates: str = DEFAULT_HOMOMORPHIC_RATES,
    repeat: int = 5,
    warmup: int = 1,
    min_time: float = 0.5,
    data: str = "real",
    seed: int = 0,
    threads: int | None = None,
    argv: list[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Run the benchmark on ``MPI.COMM_WORLD``; rank 0 prints the tables.

    Returns the rows (on every rank: the figures are reduced over ranks),
    each with ``size`` (bytes) and the column keys that apply; a skipped or
    partly plain case has ``note``.
    """
    from mpi4py import MPI

    out = sys.stdout if out is None else out
    if repeat < 1 or warmup < 0:
        raise ValueError(f"need repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
    world = MPI.COMM_WORLD
    rank, p = world.Get_rank(), world.Get_size()
    size_list = parse_sizes(sizes)
    case_list = [{"case": "plain", "algorithm": "MPI", "settings": None}]
    case_list += build_cases(cases, algorithms, homomorphic_rates, p)
    nthreads, local = setup_threads(world, threads)
    say = (lambda m: progress(m, err)) if rank == 0 else (lambda m: None)
    dt = np.dtype(np.float32)

    header = machine_lines() + mpi_lines(world, nthreads, local) + [
        f"data '{data}' float32, rank r uses seed {seed} + r; errors vs the float64 sum of "
        "the inputs (worst rank)",
        f"times: slowest rank per call, a Barrier before each, after {warmup} warm-up call(s); "
        f"best and median of 'calls' calls: {repeat}, or up to {10 * repeat} to fill "
        f"{min_time:g} s; vs plain = median / plain MPI's median",
        "wire KiB/rank, ratio (raw/wire), codec ms, MPI ms: per call from comm.stats(), "
        "mean over ranks",
        f"command: {mpi_command(world, argv)}",
    ]
    if rank == 0:
        print("\n".join(f"# {h}" for h in header), file=out, flush=True)

    rows: list[dict[str, Any]] = []
    with JobLoad(world) as job:
        for nbytes in size_list:
            n = max(1, nbytes // dt.itemsize)
            x = bench_data.generate(data, n, dt, seed=seed + rank)
            ref = x.astype(np.float64)
            world.Allreduce(MPI.IN_PLACE, ref, op=MPI.SUM)
            size_rows = []
            with JobLoad(world) as load:
                for i, case in enumerate(case_list, 1):
                    row = measure(world, case, x, ref, repeat, warmup, min_time)
                    row["size"] = n * dt.itemsize
                    size_rows.append(row)
                    say(f"[{size_label(n * dt.itemsize)} {i}/{len(case_list)}] "
                        f"{row['case']} {row['algorithm']}: " + (
                            f"median {row['median_ms']:.2f} ms" if "median_ms" in row
                            else row.get("note", "")))
            plain = size_rows[0]["median_ms"]
            for row in size_rows:
                if "median_ms" in row:
                    row["vs_plain"] = row["median_ms"] / plain
            rows += size_rows
            if rank == 0:
                sub = [f"size {size_label(n * dt.itemsize)} = {n} float32 values per rank; "
                       f"{load.describe()}; {load_average()}"]
                print("#", file=out)
                print(format_table(COLUMNS, size_rows, sub), end="", file=out)
                for row in size_rows:
                    if "note" in row:
                        print(f"# {row['case']} {row['algorithm']}: {row['note']}", file=out)
                out.flush()
            del x, ref
    if rank == 0:
        print(f"# during the run: {job.describe()}; {load_average()} at the end", file=out,
              flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``allreduce`` subcommand's options."""
    parser.add_argument("--sizes", default=None,
                        help=f"comma-separated message sizes in bytes per rank, K/M/G suffixes "
                             f"(default {DEFAULT_SIZES})")
    parser.add_argument("--cases", default=None,
                        help="comma-separated codec specs: zfp:RATE[:DIMS], "
                             "bitplane:RATE[:BLOCK_SIZE], cast:bfloat16|float16 "
                             f"(default {DEFAULT_CASES})")
    parser.add_argument("--algorithms", default=DEFAULT_ALGORITHMS,
                        help=f"comma-separated algorithms (default {DEFAULT_ALGORITHMS}); "
                             "homomorphic runs once per --homomorphic-rates; default adds "
                             "the no-settings case (the model decides)")
    parser.add_argument("--homomorphic-rates", default=None,
                        help="comma-separated rates of the homomorphic algorithm "
                             f"(default {DEFAULT_HOMOMORPHIC_RATES})")
    parser.add_argument("--repeat", type=int, default=None, help="timed calls per case (5)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls first (1)")
    parser.add_argument("--min-time", type=float, default=None,
                        help="more timed calls (up to 10x --repeat) for short calls, to fill "
                             "this many seconds per case (0.5)")
    add_rank_options(parser, QUICK)


def add_rank_options(parser: argparse.ArgumentParser, quick: dict[str, Any]) -> None:
    """Options shared by the benchmarks that run on MPI ranks (data, seed, threads, quick)."""
    parser.add_argument("--data", choices=bench_data.KINDS, default="real")
    parser.add_argument("--seed", type=int, default=0, help="data seed of rank 0 (0)")
    parser.add_argument("--threads", type=int, default=None,
                        help="numba threads per rank (default: usable cores / ranks per node)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a tiny run for CI: {quick} unless given")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit status (always 0)."""
    quick = QUICK if args.quick else {}
    run(sizes=args.sizes or quick.get("sizes", DEFAULT_SIZES),
        cases=args.cases or quick.get("cases", DEFAULT_CASES),
        algorithms=args.algorithms,
        homomorphic_rates=args.homomorphic_rates or quick.get("homomorphic_rates",
                                                               DEFAULT_HOMOMORPHIC_RATES),
        repeat=args.repeat if args.repeat is not None else quick.get("repeat", 5),
        warmup=args.warmup if args.warmup is not None else quick.get("warmup", 1),
        min_time=args.min_time if args.min_time is not None else quick.get("min_time", 0.5),
        data=args.data, seed=args.seed, threads=args.threads, argv=argv)
    return 0
