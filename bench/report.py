"""Output shared by the benchmarks: the header block and aligned / Markdown tables.

A report is a list of header lines (printed as ``# ...`` comments, as the
OSU micro-benchmarks and mpi4py's ``bench`` do) and a table given as column
specs and row dicts. The same report can be written as plain text for a
terminal or as Markdown.
"""
from __future__ import annotations

import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = [
    "Column",
    "OtherLoad",
    "command_line",
    "format_markdown",
    "format_table",
    "machine_lines",
    "progress",
]


@dataclass(frozen=True)
class Column:
    """A table column: the row key, its heading and how to format a value."""

    key: str
    heading: str
    fmt: str | Callable[[Any], str] = "{}"

    def render(self, row: dict[str, Any]) -> str:
        value = row.get(self.key)
        if value is None:
            return "-"
        if isinstance(value, float) and math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if callable(self.fmt):
            return self.fmt(value)
        return self.fmt.format(value)


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else what ``platform`` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_lines() -> list[str]:
    """Header lines naming the machine, its load and the library versions."""
    import numba
    import numpy

    try:
        from importlib.metadata import version

        import zfpy  # noqa: F401  (only its version is reported)

        zfpy_version = version("zfpy")
    except Exception:  # zfpy is optional for the benchmarks
        zfpy_version = "not installed"
    cores = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = cores
    try:
        load = "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        load = "load average unknown"
    return [
        f"machine: {cpu_model()}, {cores} cores ({usable} usable), "
        f"numba threads {numba.get_num_threads()}, {load}",
        f"python {platform.python_version()}, numpy {numpy.__version__}, "
        f"numba {numba.__version__}, zfpy {zfpy_version}",
    ]


class OtherLoad:
    """CPU time used by *other* processes while this one ran (Linux; else unknown).

    The load average lags by a minute and counts this process too; this
    compares the machine's busy time in /proc/stat with this process's own
    CPU time (all threads), so a benchmark can say how quiet the machine was.

    >>> with OtherLoad() as load:
    ...     pass
    >>> load.cores is None or load.cores >= 0.0
    True
    """

    def __init__(self) -> None:
        self.cores: float | None = None  # average cores busy with other work
        self.seconds = 0.0

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        # user + nice + system + irq + softirq: not idle, iowait or steal
        return (sum(fields[:3]) + sum(fields[5:7])) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> OtherLoad:
        self._t0 = time.perf_counter()
        self._busy0 = self._busy()
        t = os.times()
        self._own0 = t.user + t.system
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        busy1 = self._busy()
        t = os.times()
        own = t.user + t.system - self._own0
        if self._busy0 is not None and busy1 is not None and self.seconds > 0:
            self.cores = max(0.0, (busy1 - self._busy0 - own) / self.seconds)

    def describe(self) -> str:
        if self.cores is None:
            return "other processes' CPU use unknown"
        return f"other processes used {self.cores:.2f} cores on average over {self.seconds:.0f} s"


def command_line(argv: Iterable[str] | None) -> str:
    """The command that reproduces a run of ``python -m mpicomp.bench`` with ``argv``."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", "-m", "mpicomp.bench", *args])


def format_table(columns: list[Column], rows: list[dict[str, Any]], header: list[str]) -> str:
    """Plain text: ``# `` header lines, then right-aligned columns (the first left-aligned)."""
    cells = [[c.heading for c in columns]] + [[c.render(r) for c in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    out = [f"# {h}" for h in header]
    for line in cells:
        first = line[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(line[1:], widths[1:], strict=True)]
        out.append("  ".join([first, *rest]).rstrip())
    return "\n".join(out) + "\n"


def format_markdown(
    title: str, columns: list[Column], rows: list[dict[str, Any]], header: list[str]
) -> str:
    """Markdown: a heading, the header lines as a list, then a pipe table."""
    out = [f"## {title}", ""]
    out += [f"- {h}" for h in header]
    out.append("")
    out.append("| " + " | ".join(c.heading for c in columns) + " |")
    out.append("|" + "|".join(":--" if i == 0 else "--:" for i in range(len(columns))) + "|")
    for r in rows:
        out.append("| " + " | ".join(c.render(r) for c in columns) + " |")
    return "\n".join(out) + "\n"


def progress(message: str, stream: TextIO | None = None) -> None:
    """One progress line on stderr (flushed, so a long run is never silent)."""
    stream = sys.stderr if stream is None else stream
    print(message, file=stream, flush=True)
