"""The job-wide statistics summary that ``python -m mpicomp --stats`` prints at exit.

Every rank merges the tables of its live communicators (``comm.stats()`` of
each, by method), rank 0 gathers them and prints one row per method:
calls, the share compressed, raw bytes, bytes on the wire, what compression
saved, codec and MPI seconds (the mean over ranks), and the reasons calls
went plain. Counts and bytes are summed over ranks.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from mpi4py import MPI

from .stats import live_tables

__all__ = ["format_summary", "job_summary", "rank_totals"]

_SUMMED = ("calls", "compressed", "raw_bytes", "wire_bytes", "codec_seconds", "mpi_seconds")
MIB = float(1 << 20)


def rank_totals() -> dict[str, dict[str, Any]]:
    """This rank's counters by method, summed over its live communicators."""
    return _merged(table.as_dict() for table in live_tables())


def _merged(tables: Iterable[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Counters by method, summed over ``tables`` (fallback reasons counted together)."""
    out: dict[str, dict[str, Any]] = {}
    for table in tables:
        for method, row in table.items():
            acc = out.setdefault(method, {k: 0 for k in _SUMMED} | {"fallbacks": Counter()})
            for k in _SUMMED:
                acc[k] += row[k]
            acc["fallbacks"].update(row["fallbacks"])
    return out


def format_summary(per_rank: list[dict[str, dict[str, Any]]]) -> str:
    """The table for the counters of every rank (one dict per rank, from :func:`rank_totals`)."""
    nranks = len(per_rank)
    job = _merged(per_rank)
    lines = [f"# mpicomp job summary: {nranks} rank(s); calls and bytes summed over ranks, "
             "seconds the mean per rank",
             f"# {'Method':<20}{'Calls':>10}{'Compressed':>12}{'Raw MiB':>12}{'Wire MiB':>12}"
             f"{'Saved MiB':>12}{'Codec s':>10}{'MPI s':>10}  Plain MPI (reason: calls)"]
    for method in sorted(job):
        r = job[method]
        share = 100.0 * r["compressed"] / r["calls"] if r["calls"] else 0.0
        reasons = "; ".join(f"{why}: {n}" for why, n in r["fallbacks"].most_common(3))
        if len(r["fallbacks"]) > 3:
            reasons += f"; {len(r['fallbacks']) - 3} more"
        lines.append(
            f"  {method:<20}{r['calls']:>10}{share:>11.1f}%{r['raw_bytes'] / MIB:>12.2f}"
            f"{r['wire_bytes'] / MIB:>12.2f}{(r['raw_bytes'] - r['wire_bytes']) / MIB:>12.2f}"
            f"{r['codec_seconds'] / nranks:>10.3f}{r['mpi_seconds'] / nranks:>10.3f}  {reasons}")
    if not job:
        lines.append("  (no buffer-method calls through mpicomp)")
    return "\n".join(lines)


def job_summary(comm: MPI.Intracomm = MPI.COMM_WORLD, root: int = 0) -> str | None:
    """Collective: the summary on ``root`` (None elsewhere)."""
    gathered = comm.gather(rank_totals(), root=root)
    return format_summary(gathered) if gathered is not None else None
