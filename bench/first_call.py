"""``python -m mpicomp.bench first-call``: how long a new job's first compressed Allreduce takes.

A kernel missing from Numba's on-disk cache compiles at its first call
while the other ranks wait (``python -m mpicomp warmup``, run by the
README's set-up, fills the cache). For each codec this starts a new job of
``--ranks`` ranks (``mpiexec``), which times its first compressed
``Allreduce`` of 1 MiB of float32 and float64 and then a second one; the
table gives the slowest rank's times. Target: the first call at most 1 s
for every codec (on a warm cache). ``--cache-dir DIR`` runs the jobs with
``NUMBA_CACHE_DIR=DIR`` (an empty folder: the cold compile, every rank of
the node needing the same kernels at once).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["add_arguments", "main"]

CODECS = ["bitplane:16.25", "bitplane:8.25", "zfp:8", "zfp:16:3", "cast:float16",
          "cast:bfloat16"]
TARGET_S = 1.0


def _policy(case: str) -> dict:
    name, *rest = case.split(":")
    if name == "cast":
        return {"codec": {"id": "cast", "dtype": rest[0] if rest else "bfloat16"}}
    if name == "zfp" and len(rest) == 2:
        return {"codec": {"id": "zfp", "rate": float(rest[0]), "dims": int(rest[1])}}
    return {"codec": name, "rate": float(rest[0])} if rest else {"codec": name}


def _one_job(case: str, algorithm: str) -> None:
    """Inside a job: time the first and the second compressed Allreduce, print JSON on rank 0."""
    from mpi4py import MPI

    import mpicomp

    comm = mpicomp.Comm(MPI.COMM_WORLD, threshold=0, algorithm=algorithm, **_policy(case))
    times = {}
    for dtype in (np.float32, np.float64):
        x = np.linspace(-1.0, 1.0, (1 << 20) // np.dtype(dtype).itemsize).astype(dtype)
        y = np.empty_like(x)
        for label in ("first", "second"):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(x, y)
            dt = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
            times[f"{np.dtype(dtype).name} {label}"] = dt
    st = comm.stats()["Allreduce"]
    if comm.Get_rank() == 0:
        print(json.dumps({"case": case, "times": times, "compressed": st["compressed"],
                          "calls": st["calls"]}), flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--codecs", default=",".join(CODECS),
                        help=f"comma-separated NAME[:RATE[:DIMS]] ({','.join(CODECS)})")
    parser.add_argument("--ranks", type=int, default=2, help="ranks of each job (2)")
    parser.add_argument("--cache-dir", default=None,
                        help="NUMBA_CACHE_DIR of the jobs (default: as the environment says)")
    parser.add_argument("--algorithm", default="ring",
                        help="the allreduce's algorithm (ring; auto adds the model's "
                             "calibration probe to the first call unless the per-user cache "
                             "or MPICOMP_CALIBRATION holds a fresh one: python -m mpicomp "
                             "calibrate)")
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)  # inside one job


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    if args.job is not None:
        _one_job(args.job, args.algorithm)
        return 0
    mpiexec = Path(sys.executable).parent / "mpiexec"
    launcher = str(mpiexec) if mpiexec.is_file() else "mpiexec"
    env = dict(os.environ)
    if args.cache_dir:
        env["NUMBA_CACHE_DIR"] = args.cache_dir
    print(f"# first compressed Allreduce of a new job ({args.ranks} ranks, 1 MiB, algorithm "
          f"{args.algorithm}, slowest rank), "
          f"Numba cache: {args.cache_dir or env.get('NUMBA_CACHE_DIR') or 'default'}")
    print(f"# {'Codec':<16}{'f32 first s':>12}{'f32 second s':>14}{'f64 first s':>12}"
          f"{'f64 second s':>14}  target <= {TARGET_S:g} s")
    worst = 0.0
    for case in args.codecs.split(","):
        cmd = [launcher, "-n", str(args.ranks), sys.executable, "-m", "mpicomp.bench",
               "first-call", "--job", case, "--algorithm", args.algorithm]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return proc.returncode
        rec = json.loads(proc.stdout.strip().splitlines()[-1])
        if rec["compressed"] != rec["calls"]:
            print(f"{case}: only {rec['compressed']} of {rec['calls']} calls compressed",
                  file=sys.stderr)
            return 1
        t = rec["times"]
        worst = max(worst, t["float32 first"], t["float64 first"])
        print(f"  {case:<16}{t['float32 first']:>12.3f}{t['float32 second']:>14.4f}"
              f"{t['float64 first']:>12.3f}{t['float64 second']:>14.4f}", flush=True)
    print(f"# slowest first call {worst:.3f} s: target {'met' if worst <= TARGET_S else 'MISSED'}")
    return 0
