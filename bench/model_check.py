"""The performance model against measurements: a table from OSU-style JSON records.

``python -m mpicomp.bench model_check FILE.json [FILE.json ...]`` reads the
``--json`` output of the OSU-style benchmarks (:mod:`mpicomp.bench.osu`),
whose records hold, per size, the measured average latency of the plain
MPI call and of the compressed one and the model's predictions of both
(``comm.predict`` after ``comm.calibrate``, in the same job), and prints
per size the predictions beside the measurements with the relative error
``predicted / measured - 1``; then the worst error from ``--from`` bytes up
(1 MiB by default) against the target ``--target`` (25%). Exit status 1
when the target is missed, so a script can tell.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_arguments", "main", "rows"]


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per record: size, measured and predicted plain and compressed microseconds, errors."""
    out = []
    for rec in doc["records"]:
        plain_p, comp_p = rec.get("predicted_plain_us"), rec.get("predicted_compressed_us")
        if plain_p is None or comp_p is None:
            continue
        out.append({
            "size": rec["size"],
            "plain_us": rec["plain_avg_us"], "plain_pred_us": plain_p,
            "plain_err": plain_p / rec["plain_avg_us"] - 1,
            "comp_us": rec["avg_us"], "comp_pred_us": comp_p,
            "comp_err": comp_p / rec["avg_us"] - 1,
            "algorithm": rec.get("predicted_algorithm"),
            "compressed_calls": rec.get("compressed_calls"), "calls": rec.get("calls"),
        })
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("files", nargs="+", help="JSON files written by osu_* --json")
    ap.add_argument("--from", dest="start", type=int, default=1 << 20,
                    help="judge sizes of at least this many bytes (1048576)")
    ap.add_argument("--target", type=float, default=0.25,
                    help="largest |predicted / measured - 1| allowed (0.25)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    worst = 0.0
    for path in args.files:
        with open(path) as f:
            doc = json.load(f)
        print(f"# {doc['benchmark']}, {doc['ranks']} ranks, policy {json.dumps(doc['policy'])}")
        print(f"# command: {doc['command']}")
        print("| size | plain us | predicted | error | compressed us | predicted | error "
              "| algorithm |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows(doc):
            print(f"| {r['size']} | {r['plain_us']:.0f} | {r['plain_pred_us']:.0f} "
                  f"| {r['plain_err']:+.0%} | {r['comp_us']:.0f} | {r['comp_pred_us']:.0f} "
                  f"| {r['comp_err']:+.0%} | {r['algorithm']} |")
            if r["size"] >= args.start:
                worst = max(worst, abs(r["plain_err"]), abs(r["comp_err"]))
    met = worst <= args.target
    print(f"# worst |error| from {args.start} B: {worst:.0%} (target {args.target:.0%}: "
          f"{'met' if met else 'NOT met'})")
    return 0 if met else 1
