"""``mpiexec -n P python -m mpicomp.bench overlap``: does an Iallreduce progress during compute?

For one buffer (float32 gradient-like data, ``mpicomp.bench.data``) and each
path, ``compressed`` (``mpicomp.Comm(..., threshold=0).Iallreduce``, whose
work runs on the communicator's worker thread) and ``plain``
(``MPI.COMM_WORLD.Iallreduce``, progressed by MPI alone):

* ``t_comm``: the blocking ``Allreduce`` of that path;
* ``t_compute``: a compute kernel in the calling thread, sized to about
  ``t_comm``. ``numpy``: ``np.sin`` over a 1 MiB array, repeatedly (one
  thread, releases the GIL, needs a core); ``sleep``: ``time.sleep`` (needs
  no core: shows whether the request progresses at all without MPI calls);
* ``t_both``: ``req = Iallreduce(...)``; compute; ``mpicomp.Request.Waitall([req])``.

``overlap = (t_comm + t_compute - t_both) / min(t_comm, t_compute)``: 1 when
the communication is hidden entirely, 0 when the two run one after the
other, negative when doing both costs more than doing them in turn. Each
time is the median over ``--repeat`` runs of the slowest rank, a Barrier
before each run. When the ranks and their threads outnumber the cores,
compute and communication compete for CPU, which bounds the overlap: the
header gives the core count.

Quick run::

    mpiexec -n 2 python -m mpicomp.bench overlap --quick
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from . import data as bench_data
from .allreduce import (
    JobLoad,
    add_rank_options,
    load_average,
    mpi_command,
    mpi_lines,
    parse_sizes,
    setup_threads,
    size_label,
    timed,
)
from .codecs import parse_case
from .report import Column, format_table, machine_lines, progress

__all__ = ["add_arguments", "main", "overlap", "run"]

COMPUTE_KINDS = ("numpy", "sleep")
QUICK = {"size": "1M", "repeat": 2}

#: values of the numpy compute kernel's array (1 MiB of float32)
_KERNEL_N = 1 << 18


def overlap(t_comm: float, t_compute: float, t_both: float) -> float:
    """The fraction of the shorter activity hidden behind the other.

    >>> overlap(1.0, 1.0, 1.0), overlap(1.0, 1.0, 2.0)
    (1.0, 0.0)
    """
    return (t_comm + t_compute - t_both) / min(t_comm, t_compute)


class Compute:
    """A compute kernel of ``kind`` whose duration is set by :meth:`calibrate`."""

    def __init__(self, kind: str) -> None:
        if kind not in COMPUTE_KINDS:
            raise ValueError(f"compute must be one of {list(COMPUTE_KINDS)}, got {kind!r}")
        self.kind = kind
        self.iters = 1
        self.seconds = 0.0
        self._a = np.linspace(0.0, 100.0, _KERNEL_N, dtype=np.float32)
        self._b = np.empty_like(self._a)

    def __call__(self) -> None:
        if self.kind == "sleep":
            time.sleep(self.seconds)
            return
        a, b = self._a, self._b
        for _ in range(self.iters):
            np.sin(a, out=b)

    def calibrate(self, world: Any, seconds: float) -> None:
        """Size the kernel to about ``seconds`` (the same on every rank)."""
        from mpi4py import MPI

        self.seconds = seconds
        if self.kind == "sleep":
            return
        self.iters = 8
        per_iter = min(self._time() for _ in range(3)) / self.iters
        self.iters = max(1, round(seconds / world.allreduce(per_iter, op=MPI.MAX)))
        # once more at the estimated size, timed as the benchmark times it
        took = statistics.median(timed(world, self, 3, 0))
        self.iters = max(1, round(self.iters * seconds / took))

    def _time(self) -> float:
        t0 = time.perf_counter()
        self()
        return time.perf_counter() - t0


def _wait(req: Any) -> None:
    import mpicomp

    mpicomp.Request.Waitall([req])  # takes mpicomp's and plain requests; re-raises failures


def measure_path(world: Any, path: str, allreduce: Callable[[], Any],
                 iallreduce: Callable[[], Any], computes: list[str], repeat: int
                 ) -> list[dict[str, Any]]:
    """Rows of one path (``compressed`` or ``plain``), one per compute kind."""
    t_comm = statistics.median(timed(world, allreduce, repeat, 1))
    rows = []
    for kind in computes:
        compute = Compute(kind)
        compute.calibrate(world, t_comm)
        t_compute = statistics.median(timed(world, compute, repeat, 1))

        def both(compute: Compute = compute) -> None:
            req = iallreduce()
            compute()
            _wait(req)

        t_both = statistics.median(timed(world, both, repeat, 1))
        rows.append({"path": path, "compute": kind, "t_comm_ms": t_comm * 1e3,
                     "t_compute_ms": t_compute * 1e3, "t_both_ms": t_both * 1e3,
                     "serial_ms": (t_comm + t_compute) * 1e3,
                     "overlap": overlap(t_comm, t_compute, t_both)})
    return rows


COLUMNS = [
    Column("path", "path"),
    Column("compute", "compute"),
    Column("t_comm_ms", "t_comm ms", "{:.2f}"),
    Column("t_compute_ms", "t_compute ms", "{:.2f}"),
    Column("serial_ms", "sum ms", "{:.2f}"),
    Column("t_both_ms", "t_both ms", "{:.2f}"),
    Column("overlap", "overlap", "{:.2f}"),
]


def run(
    size: str = "16M",
    case: str = "bitplane:8.25",
    algorithm: str = "auto",
    computes: str = "numpy,sleep",
    repeat: int = 5,
    data: str = "real",
    seed: int = 0,
    threads: int | None = None,
    argv: list[str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Run the benchmark on ``MPI.COMM_WORLD``; rank 0 prints the table; returns the rows."""
    from mpi4py import MPI

    import mpicomp

    out = sys.stdout if out is None else out
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    kinds = [k.strip() for k in computes.split(",") if k.strip()]
    for k in kinds:
        if k not in COMPUTE_KINDS:
            raise ValueError(f"compute must be some of {list(COMPUTE_KINDS)}, got {k!r}")
    (nbytes,) = parse_sizes(size)
    label, codec = parse_case(case)
    config = codec.get_config()
    rate = config.pop("rate", None)
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    nthreads, local = setup_threads(world, threads)
    say = (lambda m: progress(m, err)) if rank == 0 else (lambda m: None)

    dt = np.dtype(np.float32)
    n = max(1, nbytes // dt.itemsize)
    x = bench_data.generate(data, n, dt, seed=seed + rank)
    res = np.empty_like(x)
    comm = mpicomp.Comm(world.Dup(), codec=config, rate=rate, algorithm=algorithm, threshold=0)
    rows: list[dict[str, Any]] = []
    try:
        with JobLoad(world) as job:
            rows += measure_path(world, "compressed", lambda: comm.Allreduce(x, res),
                                 lambda: comm.Iallreduce(x, res), kinds, repeat)
            say(f"overlap: compressed done ({rows[-1]['t_comm_ms']:.1f} ms per Allreduce)")
            rows += measure_path(world, "plain", lambda: world.Allreduce(x, res),
                                 lambda: world.Iallreduce(x, res), kinds, repeat)
            say(f"overlap: plain done ({rows[-1]['t_comm_ms']:.1f} ms per Allreduce)")
        st = comm.stats()
    finally:
        comm.Free()
    algs = sorted(set(st.get("Allreduce", {}).get("algorithms", {}))
                  | set(st.get("Iallreduce", {}).get("algorithms", {})))
    fallbacks = sorted(set(st.get("Allreduce", {}).get("fallbacks", {}))
                       | set(st.get("Iallreduce", {}).get("fallbacks", {})))
    for r in rows:
        r["case"] = label if r["path"] == "compressed" else "MPI"

    header = machine_lines() + mpi_lines(world, nthreads, local) + [
        f"buffer {size_label(n * dt.itemsize)} = {n} float32 values per rank, data '{data}' "
        f"(rank r: seed {seed} + r); compressed = {label}, algorithm {algorithm} "
        f"(ran: {', '.join(algs) or 'none'}), threshold 0",
        f"times: median of {repeat} runs (slowest rank, a Barrier before each, after a "
        "warm-up); compute sized to t_comm of its path; numpy = np.sin over 1 MiB, repeated",
        "overlap = (t_comm + t_compute - t_both) / min(t_comm, t_compute): 1 = communication "
        "hidden, 0 = none",
        f"command: {mpi_command(world, argv)}",
    ]
    if rank == 0:
        print(format_table(COLUMNS, rows, header), end="", file=out)
        if fallbacks:
            print(f"# NOTE: some compressed calls went to plain MPI: {', '.join(fallbacks)}",
                  file=out)
        print(f"# during the run: {job.describe()}; {load_average()} at the end", file=out,
              flush=True)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``overlap`` subcommand's options."""
    parser.add_argument("--size", default=None,
                        help="buffer bytes per rank, K/M/G suffixes (default 16M)")
    parser.add_argument("--case", default="bitplane:8.25",
                        help="codec spec of the compressed path (bitplane:8.25)")
    parser.add_argument("--algorithm", default="auto", help="allreduce algorithm (auto)")
    parser.add_argument("--compute", default="numpy,sleep",
                        help="comma-separated compute kernels: numpy, sleep (both)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per figure (5)")
    add_rank_options(parser, QUICK)


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit status (always 0)."""
    quick = QUICK if args.quick else {}
    run(size=args.size or quick.get("size", "16M"), case=args.case, algorithm=args.algorithm,
        computes=args.compute,
        repeat=args.repeat if args.repeat is not None else quick.get("repeat", 5),
        data=args.data, seed=args.seed, threads=args.threads, argv=argv)
    return 0
