"""Plots of the benchmarks' sweeps (matplotlib, Agg backend: no display needed).

:func:`plot_sweep` draws an ``osu_*`` run (the dict its ``--json`` file
holds): on top, mpicomp's and plain MPI's latency (or bandwidth) against
message size on log-log axes, with the model's prediction dashed where
there is one; below, the speedup (plain / mpicomp) against size, with a
line at 1.0 (above it mpicomp is faster). :func:`plot_speedups` draws a
``headline`` run (the dict its ``--json`` file holds): one bar per
compressed case, its speedup over plain MPI, grouped by collective.
"""
from __future__ import annotations

import textwrap
from typing import Any

__all__ = ["plot_speedups", "plot_sweep"]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install matplotlib "
                          "(or pip install 'mpicomp[bench]')") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _size_label(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def _codec_label(run: dict[str, Any]) -> str:
    pol = run["policy"]
    cfg = dict(pol["codec"])
    cid = cfg.pop("id")
    label = cid + (f" rate {cfg['rate']:g}" if "rate" in cfg else "")
    if pol.get("auto"):
        label = f"auto ({label} where the model predicts a gain)"
    if cid != "none":
        label += f", threshold {_size_label(pol['threshold'])}"
    return label


def plot_sweep(path: str, run: dict[str, Any]) -> None:
    """Write the plot of one ``osu_*`` run (its JSON dict) to ``path`` (PNG by its suffix)."""
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, NullFormatter

    records = [r for r in run["records"] if r.get("avg_us")]
    sizes = [r["size"] for r in records]
    bandwidth = "bandwidth_mbps" in (records[0] if records else {})
    if bandwidth:
        mine, plain, pred = "bandwidth_mbps", "plain_bandwidth_mbps", "predicted_mbps"
        ylabel = "bandwidth (MB/s)"
    else:
        mine, plain, pred = "avg_us", "plain_avg_us", "predicted_us"
        ylabel = "average latency (us)"

    fig, (top, bottom) = plt.subplots(
        2, 1, sharex=True, figsize=(8, 7), gridspec_kw={"height_ratios": [3, 2]})
    top.plot(sizes, [r[mine] for r in records], "o-", color="C0", label="mpicomp")
    top.plot(sizes, [r[plain] for r in records], "s-", color="C1", label="plain MPI")
    predicted = [(s, r[pred]) for s, r in zip(sizes, records, strict=True) if r.get(pred)]
    if predicted:
        top.plot(*zip(*predicted, strict=True), "--", color="C0", alpha=0.6,
                 label="mpicomp, model's prediction")
    top.set_xscale("log", base=2)
    top.set_yscale("log")
    top.set_ylabel(ylabel)
    top.grid(True, which="major", alpha=0.3)
    top.legend(loc="upper left" if not bandwidth else "lower right")

    speedup = [(s, r["speedup"]) for s, r in zip(sizes, records, strict=True) if r.get("speedup")]
    if speedup:
        bottom.plot(*zip(*speedup, strict=True), "o-", color="C2", label="plain / mpicomp")
    bottom.axhline(1.0, color="black", linewidth=1, linestyle=":", label="1.0 (same as plain)")
    bottom.set_yscale("log")
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bottom.yaxis.set_minor_formatter(NullFormatter())
    bottom.set_ylabel("speedup (> 1: mpicomp faster)")
    bottom.set_xlabel("message size (bytes)")
    bottom.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _size_label(v)))
    bottom.grid(True, which="major", alpha=0.3)
    bottom.legend(loc="best")
    for label in bottom.get_xticklabels():
        label.set_rotation(30)

    fig.suptitle(f"{run['benchmark']}: {run['ranks']} ranks, {run['datatype']}, "
                 f"{run['buffer']} buffers, {run['data']} data\ncodec {_codec_label(run)}",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_speedups(path: str, run: dict[str, Any]) -> None:
    """Write the bar chart of one ``headline`` run (its JSON dict) to ``path``.

    One bar per row that is not ``plain``: its speedup (plain's median / its
    median), labelled with the figure; a line at 1.0 is plain MPI.
    """
    plt = _pyplot()

    rows = [r for r in run["rows"] if r["case"] != "plain" and r.get("speedup")]
    collectives = list(dict.fromkeys(r["collective"] for r in rows))
    cases = list(dict.fromkeys(r["case"] for r in rows))
    colors = {c: f"C{i}" for i, c in enumerate(cases)}
    fig, ax = plt.subplots(figsize=(max(7.0, 1.0 + 1.1 * len(rows)), 5.5))
    x, gap = 0.0, 0.6
    ticks, labels, drawn = [], [], set()
    for coll in collectives:
        for r in (r for r in rows if r["collective"] == coll):
            label = None if r["case"] in drawn else r["case"]
            drawn.add(r["case"])
            bar = ax.bar(x, r["speedup"], width=0.8, color=colors[r["case"]], label=label)
            ax.bar_label(bar, labels=[f"{r['speedup']:.2f}x"], fontsize=8, padding=2)
            ticks.append(x)
            labels.append(f"{coll}\n{r['size_label']}\n{r['case']}"
                          + (f"\n({r['ran_as']})" if r["case"] == "default" else ""))
            x += 1.0
        x += gap
    ax.axhline(1.0, color="black", linewidth=1, linestyle=":", label="plain MPI (1.0)")
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("speedup over plain MPI (> 1: mpicomp faster)")
    # head room above the tallest bar for its figure and a one-row legend
    ax.set_ylim(0, max([1.0, *(r["speedup"] for r in rows)]) * 1.3)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncol=len(cases) + 1)
    title = [f"mpicomp vs plain MPI: {run['ranks']} ranks ({run['ranks_per_node']} per node), "
             f"{run['data']} {run['dtype']} data, median of timed calls"]
    if run.get("where"):
        title += textwrap.wrap(run["where"], 90)
    ax.set_title("\n".join(title), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
