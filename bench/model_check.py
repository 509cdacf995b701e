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

``--calibration FILE`` (a calibration the job saved with
``MPICOMP_CALIBRATION=FILE``) adds, for an ``osu_allreduce`` file, the
terms of the ring's prediction per size (:func:`mpicomp.model.ring_terms`):
the agreement and fixed cost ``g``, the wire ``W``, the codec ``C`` and what
the pipeline hides of them, to see which term a miss comes from.

``--spread`` (several files of the same command) adds, per size, the slowest
file's measured mean over the fastest's, plain and compressed: one prediction
can be within ``--target`` of two measurements only where this is at most
``(1 + target) / (1 - target)`` (1.67 at 25%).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

__all__ = ["add_arguments", "main", "ring_rows", "rows", "spread_rows"]

#: the OSU header's datatype -> the dtype the benchmark ran on
DTYPES = {"MPI_FLOAT": np.float32, "MPI_DOUBLE": np.float64}


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


def ring_rows(doc: dict[str, Any], cal: Any) -> list[dict[str, Any]]:
    """Per record of an ``osu_allreduce`` file: the ring's terms (microseconds) from ``cal``,
    the calibration its job ran on."""
    from mpicomp.algorithms.common import pieces_of, screens_in_encoder
    from mpicomp.calibration import speed_key
    from mpicomp.codecs import get_codec
    from mpicomp.model import ring_terms

    if doc["benchmark"] != "osu_allreduce":
        raise ValueError(f"--calibration: the ring's terms are an Allreduce's; "
                         f"this file holds {doc['benchmark']}")
    if cal.layout.size != doc["ranks"]:
        raise ValueError(f"--calibration: the calibration is of {cal.layout.size} ranks, "
                         f"the benchmark ran on {doc['ranks']}")
    codec, dtype = get_codec(doc["policy"]["codec"]), np.dtype(DTYPES[doc["datatype"]])
    on_device = doc.get("buffer", "numpy") != "numpy"
    key = speed_key(codec, dtype, on_device)
    if key not in cal.codecs:
        raise ValueError(f"--calibration: it holds no speed of {key!r} "
                         f"(it has {sorted(cal.codecs)})")
    e, d = cal.codecs[key]
    out = []
    for rec in doc["records"]:
        n = rec["size"]
        count = n // dtype.itemsize
        rho = codec.encoded_nbytes(count, dtype) / n
        k = pieces_of(codec, count // cal.layout.size, dtype)
        terms = ring_terms(cal, n, rho, e, d, k, screens_in_encoder(codec, on_device))
        out.append({"size": n, "k": k, **{t: v * 1e6 for t, v in terms.items()}})
    return out


def spread_rows(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size that every file measured: the slowest mean over the fastest, plain and
    compressed (``avg_us``, ``plain_avg_us``)."""
    kinds = {(d["benchmark"], d["ranks"]) for d in docs}
    if len(kinds) != 1:
        raise ValueError(f"--spread: the files are of different runs {sorted(kinds)}")
    by_size = [{r["size"]: r for r in d["records"]} for d in docs]
    sizes = sorted(set.intersection(*(set(b) for b in by_size)))
    out = []
    for n in sizes:
        plain = [b[n]["plain_avg_us"] for b in by_size]
        comp = [b[n]["avg_us"] for b in by_size]
        out.append({"size": n, "plain": max(plain) / min(plain),
                    "compressed": max(comp) / min(comp)})
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("files", nargs="+", help="JSON files written by osu_* --json")
    ap.add_argument("--from", dest="start", type=int, default=1 << 20,
                    help="judge sizes of at least this many bytes (1048576)")
    ap.add_argument("--target", type=float, default=0.25,
                    help="largest |predicted / measured - 1| allowed (0.25)")
    ap.add_argument("--calibration", metavar="FILE",
                    help="a calibration saved by the job (MPICOMP_CALIBRATION=FILE): print "
                         "the ring allreduce's terms per size too")
    ap.add_argument("--spread", action="store_true",
                    help="several files of one command: print per size the slowest file's "
                         "measured mean over the fastest's")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    worst, docs = 0.0, []
    for path in args.files:
        with open(path) as f:
            doc = json.load(f)
        docs.append(doc)
        try:
            overlap, terms = _terms(doc, args.calibration) if args.calibration else (0.0, [])
        except (OSError, ValueError, KeyError) as e:
            print(f"model_check: {path}: {e}", file=sys.stderr)
            return 2
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
        if terms:
            print(f"# the ring's terms (us) from {args.calibration}: overlap "
                  f"{overlap:.2f}; ring = g + W + C - hidden")
            print("| size | pieces | g | W | C | hidden | ring |")
            print("|---|---|---|---|---|---|---|")
            for r in terms:
                print(f"| {r['size']} | {r['k']} | {r['g']:.0f} | {r['W']:.0f} | {r['C']:.0f} "
                      f"| {r['hidden']:.0f} | {r['ring']:.0f} |")
    if args.spread:
        try:
            spread = spread_rows(docs)
        except ValueError as e:
            print(f"model_check: {e}", file=sys.stderr)
            return 2
        bound = (1 + args.target) / (1 - args.target)
        print(f"# spread over {len(docs)} files: slowest mean / fastest; one prediction is "
              f"within {args.target:.0%} of both only up to {bound:.2f}x")
        print("| size | plain | compressed |")
        print("|---|---|---|")
        for r in spread:
            print(f"| {r['size']} | {r['plain']:.2f}x | {r['compressed']:.2f}x |")
    met = worst <= args.target
    print(f"# worst |error| from {args.start} B: {worst:.0%} (target {args.target:.0%}: "
          f"{'met' if met else 'NOT met'})")
    return 0 if met else 1


def _terms(doc: dict[str, Any], path: str) -> tuple[float, list[dict[str, Any]]]:
    """The overlap of the calibration file at ``path``, and :func:`ring_rows` from it."""
    from mpicomp.model import Calibration

    with open(path) as f:
        cal = Calibration.from_dict(json.load(f), path)
    return cal.overlap, ring_rows(doc, cal)
