"""``mpiexec -n P python -m mpicomp.bench overhead``: what the drop-in costs on calls that go plain.

A user who swaps ``MPI.COMM_WORLD`` for ``mpicomp.COMM_WORLD`` and changes
nothing else must not get a slower program. On one node the default sends
every call on host memory to plain MPI, so all mpicomp can add is the cost of
deciding that. The cost is largest against the shortest calls: a 4-byte
``Allreduce`` takes about 3 us. OSU's loop (``osu_allreduce``) times each
call alone, between barriers, and varies by more than that cost, so this
benchmark times tight loops instead:

* for each size: ``calls`` back-to-back ``comm.Allreduce(x, y)`` on
  ``MPI.COMM_WORLD``, then on ``mpicomp.COMM_WORLD``, each loop after a
  ``Barrier``;
* the two loops alternate ``--rounds`` times;
* per loop the time per call is rank 0's;
* the table gives each side's median over the rounds and their ratio.

``mpicomp.COMM_WORLD`` first makes one call of every size (not timed), as a
program's first calls would: that settles its default (on one node: plain
for every size). The target: at most 5% over plain at every size (or 0.5 us,
whichever is larger: ``--slack``).

Sizes are bytes (``--sizes``) or elements (``--counts 0,1,3,5,8,64``: odd and
empty buffers too), of every dtype mpi4py maps (``--dtypes``: float16/32/64,
signed and unsigned integers, bool, complex; ``all``); the reductions of
bool buffers use ``MPI.LOR`` (MPI defines no SUM for them), in place ``MAX``
as for the others but ``LOR``. The ``[buf,BYTE]`` spec form sends any
buffer as raw bytes.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from . import data as bench_data
from .allreduce import (
    add_rank_options,
    mpi_command,
    mpi_lines,
    parse_sizes,
    setup_threads,
    size_label,
)
from .report import Column, format_table, machine_lines, progress

__all__ = ["add_arguments", "main", "run"]

DEFAULT_SIZES = "4,64,1K,8K,64K,1M"
QUICK = {"sizes": "4,64K", "rounds": 2, "seconds": 0.02}
#: the most a call may cost over plain MPI's (the issue's target) ...
TARGET = 1.05
#: ... or this many microseconds over it, whichever is larger
SLACK_US = 0.5
#: the dtypes ``--dtypes all`` times: every NumPy dtype mpi4py maps to an MPI datatype
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64", "bool", "complex64", "complex128")


def _pair(comm: Any) -> int | None:
    """This rank's partner in the point-to-point loops (0-1, 2-3, ...; None: the odd one out)."""
    r = comm.Get_rank()
    peer = r ^ 1
    return peer if peer < comm.Get_size() else None


def _round_trip(send: str, recv: str) -> Callable[[Any, np.ndarray, np.ndarray], None]:
    """A ping-pong of ``x`` between the two ranks of a pair, by ``send`` and ``recv``."""
    def call(comm: Any, x: np.ndarray, y: np.ndarray) -> None:
        peer = _pair(comm)
        if peer is None:
            return
        turns = ((send, x), (recv, y))
        for method, buf in turns if comm.Get_rank() % 2 == 0 else turns[::-1]:
            req = getattr(comm, method)(buf, peer, 0)  # Isend/Irecv: a request
            if req is not None:
                req.Wait()
    return call


def _sendrecv(comm: Any, x: np.ndarray, y: np.ndarray) -> None:
    peer = _pair(comm)
    if peer is not None:
        comm.Sendrecv(x, peer, 0, y, peer, 0)


def _probe_recv(comm: Any, x: np.ndarray, y: np.ndarray) -> None:
    """A round trip whose receives first ``Probe`` the message (heat's cdist does)."""
    peer = _pair(comm)
    if peer is None:
        return
    if comm.Get_rank() % 2 == 0:
        comm.Send(x, peer, 0)
    comm.Probe(peer, 0)
    comm.Recv(y, peer, 0)
    if comm.Get_rank() % 2 == 1:
        comm.Send(x, peer, 0)


def _sendrecv_replace(comm: Any, x: np.ndarray, y: np.ndarray) -> None:
    peer = _pair(comm)
    if peer is not None:
        comm.Sendrecv_replace(y, peer, 0, peer, 0)


def _iallreduce(comm: Any, x: np.ndarray, y: np.ndarray) -> None:
    comm.Iallreduce(x, y, _sum(x)).Wait()


def _array(spec: Any) -> np.ndarray:
    return spec[0] if isinstance(spec, list) else spec


def _sum(x: Any) -> Any:
    """The op a reduction of ``x`` uses: SUM, LOR for bool (MPI has no SUM for it)."""
    return MPI.LOR if _array(x).dtype == np.bool_ else MPI.SUM


def _max(x: Any) -> Any:
    return MPI.LOR if _array(x).dtype == np.bool_ else MPI.MAX


#: what one call of each method is (x: this rank's data, y: a receive buffer as long, or
#: ``size`` times as long for the methods of GATHERS, where Scatter and the Reduce_scatters
#: send it)
CALLS: dict[str, Callable[[Any, np.ndarray, np.ndarray], None]] = {
    "Allreduce": lambda c, x, y: c.Allreduce(x, y, _sum(x)),
    "Iallreduce": _iallreduce,
    "Bcast": lambda c, x, y: c.Bcast(x, root=0),
    "Allgather": lambda c, x, y: c.Allgather(x, y),
    "Alltoall": lambda c, x, y: c.Alltoall(x, y),
    "Reduce": lambda c, x, y: c.Reduce(x, y, _sum(x), root=0),
    "Gather": lambda c, x, y: c.Gather(x, y, root=0),
    "Scatter": lambda c, x, y: c.Scatter(y, x, root=0),
    "Allgatherv": lambda c, x, y: c.Allgatherv(x, _vspec(y, c.Get_size())),
    "Reduce_scatter": lambda c, x, y: c.Reduce_scatter(y, x, None, _sum(x)),
    "Reduce_scatter_block": lambda c, x, y: c.Reduce_scatter_block(y, x, _sum(x)),
    "Ibcast": lambda c, x, y: c.Ibcast(x, root=0).Wait(),
    "Iallgather": lambda c, x, y: c.Iallgather(x, y).Wait(),
    "Ialltoall": lambda c, x, y: c.Ialltoall(x, y).Wait(),
    # in place: the receive buffer is the data (MAX keeps its values as they are)
    "Allreduce/IN_PLACE": lambda c, x, y: c.Allreduce(MPI.IN_PLACE, y, _max(y)),
    "Allgather/IN_PLACE": lambda c, x, y: c.Allgather(MPI.IN_PLACE, y),
    "Send/Recv": _round_trip("Send", "Recv"),
    "Isend/Irecv": _round_trip("Isend", "Irecv"),
    "Sendrecv": _sendrecv,
    "Probe/Recv": _probe_recv,
    "Sendrecv_replace": _sendrecv_replace,
}
#: the buffer spec forms mpi4py accepts (``--specs``): each turns an array into that form
#: (``n``: the count the spec names, per rank where the method splits the buffer)
SPECS: dict[str, Callable[[np.ndarray, int], Any]] = {
    "bare": lambda a, n: a,
    "[buf,dtype]": lambda a, n: [a, _datatype(a)],
    "[buf,count,dtype]": lambda a, n: [a, n, _datatype(a)],
    "[buf,count,displ,dtype]": lambda a, n: [a, n, 0, _datatype(a)],
    "[buf,char]": lambda a, n: [a, a.dtype.char],
    "[buf,count,char]": lambda a, n: [a, n, a.dtype.char],
}


def _datatype(a: np.ndarray) -> Any:
    return MPI._typedict[a.dtype.char]  # (the predefined datatype, as mpi4py maps it)


def _vspec(y: Any, p: int) -> Any:
    """Allgatherv's receive v-spec in the form of ``y``'s spec (counts, and its datatype)."""
    if isinstance(y, np.ndarray):
        return [y, [y.size // p] * p]
    a, *rest = y
    return [a, [a.size // p] * p, rest[-1]]


GATHERS = ("Allgather", "Allgather/IN_PLACE", "Gather", "Iallgather", "Scatter", "Reduce_scatter",
           "Reduce_scatter_block", "Allgatherv")
#: methods whose ``y`` holds one part per rank, a spec counting one part
PER_RANK_Y = ("Allgather", "Gather", "Iallgather", "Scatter", "Reduce_scatter_block")
#: methods whose buffer is cut into one block per rank
SPLITS = ("Alltoall", "Ialltoall")
DEFAULT_METHODS = "Allreduce"


def _loop(comm: Any, call: Callable[[Any, np.ndarray, np.ndarray], None], x: np.ndarray,
          y: np.ndarray, calls: int) -> float:
    """Seconds per call of ``calls`` back-to-back calls (after a Barrier)."""
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call(comm, x, y)
    return (time.perf_counter() - start) / calls


def _spec_pair(wrap: Callable[[np.ndarray, int], Any], a: np.ndarray, scale: int, block: int,
               y_parts: int) -> tuple[Any, Any]:
    """``x`` (over ``a``) and ``y`` (``scale`` times as long) in one spec form."""
    y = np.empty(scale * a.size, a.dtype)
    return wrap(a, a.size // block), wrap(y, y.size // y_parts)


def _choose(option: str, value: str, choices: dict[str, Any], sep: str) -> list[str]:
    """The names in ``value`` (``sep``-separated, or ``all``), each one of ``choices``."""
    names = [m.strip() for m in value.split(sep) if m.strip()]
    if names == ["all"]:
        return list(choices)
    bad = [m for m in names if m not in choices]
    if bad or not names:
        raise ValueError(f"{option}: {bad or value!r}; choose from "
                         f"{(sep + ' ').join(choices)} or all")
    return names


def _values(data: str, n: int, dtype: np.dtype, seed: int) -> np.ndarray:
    """``n`` values of ``dtype``: the data set for float32/float64, else small values that
    every dtype holds (their sums too)."""
    if dtype.name in ("float32", "float64"):
        return bench_data.generate(data, n, dtype, seed=seed)
    small = (np.arange(n) + seed) % 3
    return (small % 2 == 1) if dtype == np.bool_ else small.astype(dtype)


def _counts(text: str) -> list[int]:
    """``"0,1,3,1K"`` -> element counts (K/M: binary multiples); 0 allowed."""
    out = []
    for item in (t.strip().upper() for t in text.split(",")):
        if not item:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(item[-1], 1)
        digits = item[:-1] if scale > 1 else item
        if not digits.isdigit():
            raise ValueError(f"--counts: bad count {item!r}: use e.g. 0, 3, 64 or 1K")
        out.append(int(digits) * scale)
    if not out:
        raise ValueError("--counts: no counts given")
    return out


def run(sizes: str, rounds: int, seconds: float, data: str, seed: int, threads: int | None,
        argv: list[str] | None, methods: str = DEFAULT_METHODS,
        codec: str | None = None, specs: str = "bare", dtypes: str = "float32",
        counts: str | None = None, slack_us: float = SLACK_US) -> list[dict[str, Any]]:
    """Time both loops at each size of each dtype of each method; rank 0 prints the table
    and the worst case; returns its rows (rank 0). ``counts`` (elements) replaces
    ``sizes`` (bytes). ``codec``: the mpicomp side names it (calls below its threshold go
    plain), else it is ``mpicomp.COMM_WORLD`` with no settings."""
    from mpi4py import MPI

    import mpicomp

    world = MPI.COMM_WORLD
    drop_in = mpicomp.COMM_WORLD if codec is None else mpicomp.Comm(world, codec=codec)
    side = "no settings" if codec is None else f"codec={codec!r}"
    threads, local = setup_threads(world, threads)
    names = _choose("--methods", methods, CALLS, ",")
    forms = _choose("--specs", specs, SPECS, ";")
    kinds = [np.dtype(d) for d in _choose("--dtypes", dtypes, dict.fromkeys(DTYPES), ",")]
    r, p = world.Get_rank(), world.Get_size()
    rows = []
    for name, form, dt in ((n, f, d) for n in names for f in forms for d in kinds):
        call, scale, wrap = CALLS[name], p if name in GATHERS else 1, SPECS[form]
        # Alltoall splits its buffer among the ranks: whole multiples of p values
        block = p if name in SPLITS else 1
        elements = (_counts(counts) if counts is not None
                    else [max(b // dt.itemsize, 1) for b in parse_sizes(sizes)])
        arrays = [_values(data, -(-n // block) * block, dt, seed + r) for n in elements]
        # a spec's count, as mpi4py reads it: per rank for the buffer a method splits among
        # the ranks (Scatter's send, the gathers' receive, both of Alltoall), else the whole
        y_parts = p if name in PER_RANK_Y or name in SPLITS else 1
        for a in arrays:  # the program's first calls: they settle the default
            call(drop_in, *_spec_pair(wrap, a, scale, block, y_parts))
        for a in arrays:
            x, y = _spec_pair(wrap, a, scale, block, y_parts)
            once = _loop(world, call, x, y, 50)
            calls = world.bcast(max(int(seconds / max(once, 1e-7)), 50), root=0)
            plain, ours = [], []
            for _ in range(rounds):
                plain.append(_loop(world, call, x, y, calls))
                ours.append(_loop(drop_in, call, x, y, calls))
            t_plain, t_ours = statistics.median(plain), statistics.median(ours)
            rows.append({"method": name, "spec": form, "dtype": dt.name, "count": a.size,
                         "size": size_label(a.nbytes), "calls": calls,
                         "plain_us": t_plain * 1e6, "mpicomp_us": t_ours * 1e6,
                         "ratio": t_ours / t_plain, "over_us": (t_ours - t_plain) * 1e6})
            if r == 0:
                progress(f"overhead: {name} {form} {dt.name} {size_label(a.nbytes)} done")
    stats = drop_in.stats()
    paths = {m: s["fallbacks"] for m, s in stats.items() if s.get("fallbacks")}
    if r == 0:
        header = machine_lines() + mpi_lines(world, threads, local) + [
            f"{', '.join(names)} of {', '.join(d.name for d in kinds)} data (float32/64: "
            f"'{data}', rank r: seed {seed} + r), "
            f"MPI.COMM_WORLD (plain) vs mpicomp ({side}), tight loops of "
            f"'calls' calls alternated over {rounds} rounds; us per call: rank 0's, median "
            "over the rounds; a point-to-point call is one round trip between ranks 0-1, 2-3 ...",
            f"how mpicomp's calls went: {paths}",
            f"command: {mpi_command(world, argv)}",
        ]
        columns = [Column("method", "method"), Column("spec", "spec"), Column("dtype", "dtype"),
                   Column("count", "count"), Column("size", "size"), Column("calls", "calls"),
                   Column("plain_us", "plain us", "{:.3f}"),
                   Column("mpicomp_us", "mpicomp us", "{:.3f}"),
                   Column("ratio", "mpicomp/plain", "{:.3f}"),
                   Column("over_us", "over us", "{:+.3f}")]
        print(format_table(columns, rows, header))
        print(verdict_line(rows, slack_us))
    return rows


def verdict_line(rows: list[dict[str, Any]], slack_us: float = SLACK_US) -> str:
    """The worst row against the target: at most TARGET x plain or ``slack_us`` over it,
    whichever is larger (the worst: the row furthest past its own allowance)."""
    def excess(row: dict[str, Any]) -> float:
        return row["mpicomp_us"] - max(row["plain_us"] * TARGET, row["plain_us"] + slack_us)

    worst = max(rows, key=excess)
    verdict = "met" if excess(worst) <= 0 else "NOT met"
    return (f"# target: at most {TARGET:.2f}x plain or {slack_us:g} us over it at every size; "
            f"worst {worst['ratio']:.3f}x, {worst['over_us']:+.3f} us ({worst['method']} "
            f"{worst['spec']} {worst['dtype']} {worst['count']} values, {worst['size']}): "
            f"{verdict}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``overhead`` subcommand's options."""
    parser.add_argument("--sizes", default=None,
                        help=f"bytes per call, K/M suffixes ({DEFAULT_SIZES})")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternations of the plain and mpicomp loops (7)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="about how long each loop runs (0.1)")
    parser.add_argument("--methods", default=DEFAULT_METHODS,
                        help=f"comma-separated, or all: {', '.join(CALLS)} ({DEFAULT_METHODS})")
    parser.add_argument("--specs", default="bare",
                        help=f"semicolon-separated buffer spec forms, or all: {'; '.join(SPECS)} "
                             "(bare)")
    parser.add_argument("--counts", default=None,
                        help="elements per call instead of --sizes, K/M suffixes; 0 allowed "
                             "(e.g. 0,1,3,5,8,64,1K)")
    parser.add_argument("--dtypes", default="float32",
                        help=f"comma-separated, or all: {', '.join(DTYPES)} (float32)")
    parser.add_argument("--slack", type=float, default=SLACK_US,
                        help=f"microseconds over plain that always meet the target ({SLACK_US})")
    parser.add_argument("--codec", default=None,
                        help="the mpicomp side names this codec (calls below its threshold "
                             "go plain; default: mpicomp.COMM_WORLD with no settings)")
    add_rank_options(parser, QUICK)


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Entry point of the subcommand; returns the exit status (always 0)."""
    quick = QUICK if args.quick else {}
    run(sizes=args.sizes or quick.get("sizes", DEFAULT_SIZES),
        rounds=args.rounds or quick.get("rounds", 7),
        seconds=args.seconds or quick.get("seconds", 0.1), data=args.data, seed=args.seed,
        threads=args.threads, argv=argv, methods=args.methods, codec=args.codec,
        specs=args.specs, dtypes=args.dtypes, counts=args.counts, slack_us=args.slack)
    return 0
