"""``mpiexec -n P python -m mpicomp.bench headline``: the headline comparison (``make bench``).

One job measures compressed against plain MPI collectives on float32 real
gradients (``mpicomp.bench.data``, default kind ``real``; rank ``r`` uses seed
``seed + r``, the Bcast root's values are rank 0's):

* ``Allreduce`` of ``--allreduce-size`` (16 MiB) per rank: ``plain``,
  ``bitplane:8.25``, ``bitplane:4.25`` and ``default``;
* ``Allgather`` (each rank's contribution), ``Alltoall`` (each rank's whole
  send buffer, P blocks of ``--size / P``) and ``Bcast`` (root 0's buffer)
  of ``--size`` (4 MiB): ``plain`` and ``bitplane:8.25``.

``plain`` is a plain duplicate of ``MPI.COMM_WORLD``, measured in the same
job; ``CODEC:RATE`` is ``mpicomp.Comm(MPI.COMM_WORLD.Dup(), codec=...,
rate=..., threshold=0)`` (algorithm ``auto``); ``default`` is
``mpicomp.Comm(MPI.COMM_WORLD.Dup())`` with no settings, the library's
default policy (codec ``auto``: compressed only where the calibrated model
predicts a gain), built as ``bench allreduce --algorithms default`` builds
it (:func:`mpicomp.bench.allreduce.build_cases`).

What is sent, and how a result is checked, are the OSU-style benchmarks'
(``mpicomp.bench.osu_cases``); the timing is ``bench allreduce``'s
(:func:`mpicomp.bench.allreduce.timed`: warm-up calls, then timed calls each
after a ``Barrier``, a call's time being the slowest rank's). Per case the
table gives the best and the median time, the speedup (plain's median / the
case's median: above 1 the case is faster than plain MPI), the wire ratio
(raw / wire bytes as ``comm.stats()`` counts them, over the ranks that
sent), the worst rank's relative L2 error against the exact result (sums:
the float64 sum of the inputs) and the check (``ok``: a sum within the error
bound of the algorithm that ran, ``mpicomp.algorithms.bounds``; moved data
bit for bit ``decode(encode(x))``, or ``x`` when the call went plain). The
exit status is 1 when a check failed. ``--plot`` draws the speedups as bars
(:func:`mpicomp.bench.plot.plot_speedups`), ``--json`` writes the rows.

Quick run (seconds)::

    mpiexec -n 2 python -m mpicomp.bench headline --quick --plot headline.png
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .allreduce import (
    JobLoad,
    add_rank_options,
    build_cases,
    load_average,
    mpi_command,
    mpi_lines,
    parse_sizes,
    setup_threads,
    size_label,
    timed,
)
from .osu import wire_ratio
from .osu_buffers import buffers
from .osu_cases import BENCHMARKS, Benchmark, Env
from .report import Column, format_table, machine_lines, progress

__all__ = ["COLUMNS", "DEFAULTS", "QUICK", "add_arguments", "main", "ran_as", "run"]

#: the compressed cases of the Allreduce, and of the other collectives
ALLREDUCE_CASES = "bitplane:8.25,bitplane:4.25"
OTHER_CASES = "bitplane:8.25"
#: the OSU-style benchmarks measured, in table order (their size: see plan())
COLLECTIVES = ("osu_allreduce", "osu_allgather", "osu_alltoall", "osu_bcast")
DEFAULTS = {"allreduce_size": "16M", "size": "4M", "repeat": 5, "warmup": 1, "min_time": 0.5}
QUICK = {"allreduce_size": "1M", "size": "256K", "repeat": 3, "warmup": 1, "min_time": 0.0}


@dataclasses.dataclass
class SeededEnv(Env):
    """The OSU benchmarks' environment with the data seed shifted by ``seed`` (``--seed``)."""

    seed: int = 0

    def values(self, n: int, seed: int) -> np.ndarray:
        return super().values(n, self.seed + seed)


@dataclasses.dataclass(frozen=True)
class Plan:
    """One collective of the run: its benchmark, size and cases."""

    bench: Benchmark
    osu_size: int  #: the size the OSU benchmark takes (Alltoall: one pair's block)
    nbytes: int  #: the size the table shows (Alltoall: a rank's send buffer)
    cases: list[dict[str, Any]]


def plan(allreduce_size: int, size: int, p: int, itemsize: int) -> list[Plan]:
    """The collectives in table order, each with ``plain`` first, then its compressed cases."""
    plain = {"case": "plain", "algorithm": "MPI", "settings": None}
    plans = []
    for name in COLLECTIVES:
        bench = BENCHMARKS[name]
        if bench.method == "Allreduce":
            nbytes, osu_size = allreduce_size, allreduce_size
            # the no-settings case last, after the explicit codecs
            cases = sorted(build_cases(ALLREDUCE_CASES, "auto,default", "", p),
                           key=lambda c: bool(c.get("default")))
        else:
            nbytes, osu_size = size, size
            if bench.method == "Alltoall":
                osu_size = size // p
            cases = build_cases(OTHER_CASES, "auto", "", p)
        osu_size -= osu_size % itemsize
        if osu_size < itemsize:
            raise ValueError(f"{bench.method}: {nbytes} bytes per rank is too small for "
                             f"{p} ranks of float32 values")
        if bench.method == "Alltoall":
            nbytes = osu_size * p
        plans.append(Plan(bench, osu_size, nbytes, [plain, *cases]))
    return plans


def ran_as(path: str) -> str:
    """The table's short form of how a call ran: the algorithm, ``plain`` or ``MPI``.

    >>> ran_as("compressed (ring)"), ran_as("plain (codec auto: one node)"), ran_as("plain MPI")
    ('ring', 'plain', 'MPI')
    """
    if path.startswith("compressed ("):
        return path.removeprefix("compressed (").removesuffix(")")
    return "MPI" if path == "plain MPI" else "plain"


def measure(world: Any, env: Env, item: Plan, case: dict[str, Any], repeat: int, warmup: int,
            min_time: float) -> dict[str, Any]:
    """One row: time the case's calls, then check one more call's result."""
    from mpi4py import MPI

    import mpicomp

    method = item.bench.method
    if case["settings"] is None:
        timed_comm = MPI.Intracomm(world.Dup())
        # the check's call goes through mpicomp with codec none, i.e. plain MPI
        checked = mpicomp.Comm(world.Dup(), codec="none")
    else:
        # the default case keeps the default threshold; the others compress every size
        extra = {} if case.get("default") else {"threshold": 0}
        timed_comm = checked = mpicomp.Comm(world.Dup(), **extra, **case["settings"])
    env = dataclasses.replace(env, comm=checked, plain=world)
    state = item.bench.prepare(env, item.osu_size)
    try:
        reset = getattr(timed_comm, "reset_stats", None)
        times = timed(world, lambda: item.bench.call(timed_comm, state), repeat, warmup,
                      min_time, after_warmup=reset)
        ratio = wire_ratio(world, timed_comm.stats(), method) if reset else None
        check = item.bench.check(env, state)
    finally:
        for c in {id(timed_comm): timed_comm, id(checked): checked}.values():
            c.Free()
    path = "plain MPI" if case["settings"] is None else check.path
    return {
        "collective": method, "size": item.nbytes, "size_label": size_label(item.nbytes),
        "case": case["case"], "path": path, "ran_as": ran_as(path), "calls": len(times),
        "best_ms": min(times) * 1e3, "median_ms": statistics.median(times) * 1e3,
        "ratio": ratio, "rel_l2": check.rel_l2, "max_abs_err": check.max_abs_err,
        "check": "ok" if check.ok else "FAIL", "check_detail": check.detail,
    }


COLUMNS = [
    Column("collective", "collective"),
    Column("size_label", "size/rank"),
    Column("case", "case"),
    Column("ran_as", "ran as"),
    Column("calls", "calls"),
    Column("best_ms", "best ms", "{:.2f}"),
    Column("median_ms", "median ms", "{:.2f}"),
    Column("speedup", "speedup", "{:.2f}"),
    Column("ratio", "ratio", "{:.2f}"),
    Column("rel_l2", "rel L2", "{:.2e}"),
    Column("check", "check"),
]


def _header(world: Any, plans: list[Plan], nthreads: int, local: int, data: str, seed: int,
            repeat: int, warmup: int, min_time: float, where: str | None,
            argv: list[str] | None) -> list[str]:
    from mpicomp.threads import budget

    p = world.Get_size()
    sizes = "; ".join(
        f"{it.bench.method} {size_label(it.nbytes)}"
        + (f" send buffer per rank ({size_label(it.osu_size)} per pair)"
           if it.bench.method == "Alltoall" else
           " from rank 0" if it.bench.method == "Bcast" else " per rank")
        for it in plans)
    lines = machine_lines() + mpi_lines(world, nthreads, local)
    lines[-1] += f", mpicomp codec threads per rank {budget()}"
    if where:
        lines.append(f"where: {where}")
    return lines + [
        f"mpicomp headline: compressed vs plain MPI collectives, {p} ranks; {sizes}",
        f"data '{data}' float32, rank r uses seed {seed} + r (Bcast: rank 0's values)",
        "plain = a plain duplicate of MPI.COMM_WORLD; CODEC:RATE = mpicomp.Comm(codec, rate, "
        "threshold 0), algorithm auto; default = mpicomp.Comm with no settings (codec auto: "
        "the calibrated model decides)",
        f"times: slowest rank per call, a Barrier before each, after {warmup} warm-up call(s); "
        f"best and median of 'calls' calls: {repeat}, or up to {10 * repeat} to fill "
        f"{min_time:g} s; speedup = plain's median / the case's median (> 1: faster than plain)",
        "ratio = raw / wire bytes (comm.stats(), over the ranks that sent); rel L2: worst rank, "
        "against the exact result (sums: in float64); check: sums within the bound of the "
        "algorithm that ran, moved data bit for bit decode(encode(x))",
        f"command: {mpi_command(world, argv)}",
    ]


def run(
    allreduce_size: str = DEFAULTS["allreduce_size"],
    size: str = DEFAULTS["size"],
    repeat: int = DEFAULTS["repeat"],
    warmup: int = DEFAULTS["warmup"],
    min_time: float = DEFAULTS["min_time"],
    data: str = "real",
    seed: int = 0,
    threads: int | None = None,
    where: str | None = None,
    json_path: str | None = None,
    plot_path: str | None = None,
    argv: list[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Run the comparison on ``MPI.COMM_WORLD``; rank 0 prints the table and writes the files.

    Returns ``(exit status, rows)`` on every rank (the figures are reduced
    over the ranks): status 1 when a check failed, else 0.
    """
    from mpi4py import MPI

    out = sys.stdout if out is None else out
    if repeat < 1 or warmup < 0:
        raise ValueError(f"need repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
    if plot_path and importlib.util.find_spec("matplotlib") is None:
        raise ImportError("--plot needs matplotlib: pip install matplotlib "
                          "(or pip install 'mpicomp[bench]')")
    world = MPI.COMM_WORLD
    rank, p = world.Get_rank(), world.Get_size()
    dtype = np.dtype(np.float32)
    sizes = [parse_sizes(s) for s in (allreduce_size, size)]
    if any(len(s) != 1 for s in sizes):
        raise ValueError(f"give one size each, got {allreduce_size!r} and {size!r}")
    plans = plan(sizes[0][0], sizes[1][0], p, dtype.itemsize)
    nthreads, local = setup_threads(world, threads)
    say = (lambda m: progress(m, err)) if rank == 0 else (lambda m: None)
    header = _header(world, plans, nthreads, local, data, seed, repeat, warmup, min_time,
                     where, argv)
    env = SeededEnv(world, None, world, buffers("numpy"), dtype, data, seed)

    rows: list[dict[str, Any]] = []
    total = sum(len(it.cases) for it in plans)
    with JobLoad(world) as job:
        for item in plans:
            plain_ms = None
            for case in item.cases:
                row = measure(world, env, item, case, repeat, warmup, min_time)
                plain_ms = row["median_ms"] if plain_ms is None else plain_ms
                row["speedup"] = plain_ms / row["median_ms"]
                rows.append(row)
                say(f"[{len(rows)}/{total}] {row['collective']} {row['size_label']} "
                    f"{row['case']}: median {row['median_ms']:.2f} ms, speedup "
                    f"{row['speedup']:.2f}, {row['path']}, check {row['check']}")
    failed = [r for r in rows if r["check"] != "ok"]
    if rank == 0:
        print(format_table(COLUMNS, rows, header), end="", file=out)
        for r in rows:
            if r["ran_as"] == "plain":
                print(f"# {r['collective']} {r['case']}: {r['path']}", file=out)
        for r in failed:
            print(f"# check failed: {r['collective']} {r['case']}: {r['check_detail']}",
                  file=out)
        print(f"# during the run: {job.describe()}; {load_average()} at the end", file=out,
              flush=True)
        result = {"benchmark": "headline", "ranks": p, "ranks_per_node": local, "where": where,
                  "data": data, "dtype": dtype.name, "header": header,
                  "command": mpi_command(world, argv), "rows": rows}
        if json_path:
            Path(json_path).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        if plot_path:
            from .plot import plot_speedups

            plot_speedups(plot_path, result)
            say(f"plot written to {plot_path}")
    return (1 if failed else 0), rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``headline`` subcommand's options."""
    parser.add_argument("--allreduce-size", default=None,
                        help=f"Allreduce bytes per rank, K/M/G suffixes "
                             f"(default {DEFAULTS['allreduce_size']})")
    parser.add_argument("--size", default=None,
                        help="bytes per rank of Allgather, Alltoall (the whole send buffer) "
                             f"and Bcast (default {DEFAULTS['size']})")
    parser.add_argument("--repeat", type=int, default=None,
                        help=f"timed calls per case ({DEFAULTS['repeat']})")
    parser.add_argument("--warmup", type=int, default=None,
                        help=f"untimed calls first ({DEFAULTS['warmup']})")
    parser.add_argument("--min-time", type=float, default=None,
                        help="more timed calls (up to 10x --repeat) for short calls, to fill "
                             f"this many seconds per case ({DEFAULTS['min_time']})")
    parser.add_argument("--where", default=None,
                        help="where the job runs (e.g. the simulated cluster's shape), for the "
                             "header and the plot's title")
    parser.add_argument("--json", dest="json_path", metavar="FILE", default=None,
                        help="(rank 0) write the run and its rows as JSON")
    parser.add_argument("--plot", dest="plot_path", metavar="FILE.png", default=None,
                        help="(rank 0) a bar chart of each case's speedup over plain MPI")
    add_rank_options(parser, QUICK)


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit status (1: a check failed)."""
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k) is not None}
    settings = {**DEFAULTS, **(QUICK if args.quick else {}), **given}
    status, _ = run(**settings, data=args.data, seed=args.seed, threads=args.threads,
                    where=args.where, json_path=args.json_path, plot_path=args.plot_path,
                    argv=argv)
    return status
