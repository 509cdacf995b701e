"""``mpiexec -n 4 python -m mpicomp.bench allreduce-gpu``: compressed Allreduce of a CuPy buffer.

Every rank allocates ``--size-mib`` of float32 gradient-like data on its
GPU (ranks may share one GPU) and runs, in the same job:

* plain MPI ``Allreduce`` of the device buffer (``mpicomp`` with codec
  ``none``: the device buffer goes to a CUDA-aware MPI, or is staged through
  host memory when MPI is not CUDA-aware), the baseline;
* compressed ``Allreduce`` for each ``--cases`` codec spec (the algorithm
  from ``--algorithm``, default ``auto``), once for each device piece size of
  ``--piece-kib`` (default: the library's ``DEVICE_PIECE_BYTES``), so that one
  job measures what a piece costs (its launches, staging copies, message).

Each result is checked against the exact sum (float64, computed on the host
from every rank's data) with the bound of ``mpicomp.algorithms.bounds``
(zfp: relative error only, it has no pointwise bound); the exit status is
1 if a check fails. Times are the slowest rank's, best of ``--repeat``
after a warm-up; the ratio is plain time / compressed time (> 1: compression
paid off). ``comm.stats()`` says which memory path ran.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from . import data as bench_data

__all__ = ["add_arguments", "main"]

DEFAULT_CASES = "bitplane:8.25,bitplane:4.25,zfp:8"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size-mib", type=float, default=256, help="MiB per rank (256)")
    parser.add_argument("--cases", default=DEFAULT_CASES,
                        help=f"codec specs as for 'codecs' (default {DEFAULT_CASES})")
    parser.add_argument("--algorithm", default="auto", help="allreduce algorithm (auto)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per case (5)")
    parser.add_argument("--piece-kib", default="",
                        help="device piece sizes to run every case with, comma-separated "
                             "KiB of wire bytes (default: the library's DEVICE_PIECE_BYTES)")
    parser.add_argument("--markdown", metavar="PATH", default=None,
                        help="(rank 0) also write the table as Markdown to PATH")


def _timed(world: Any, cp: Any, fn: Any, repeat: int) -> float:
    fn()
    cp.cuda.get_current_stream().synchronize()
    best = float("inf")
    for _ in range(repeat):
        world.Barrier()
        t = time.perf_counter()
        fn()
        cp.cuda.get_current_stream().synchronize()
        best = min(best, world.allreduce(time.perf_counter() - t, op=_max()))
    return best


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    import cupy as cp
    from mpi4py import MPI

    import mpicomp
    from mpicomp.algorithms import bounds, common
    from mpicomp.backend.mpi_library import cuda_aware

    from .codecs import parse_case
    from .report import command_line, machine_lines

    world = MPI.COMM_WORLD
    p, r = world.Get_size(), world.Get_rank()
    cp.cuda.Device(r % cp.cuda.runtime.getDeviceCount()).use()
    n = int(args.size_mib * 2**20) // 4
    x_host = bench_data.generate("real", n, np.dtype(np.float32), seed=r)
    exact = np.empty(n, np.float64)
    world.Allreduce(x_host.astype(np.float64), exact)
    g = world.allreduce(float(np.abs(x_host).max()), op=MPI.SUM)
    x = cp.asarray(x_host)
    y = cp.empty_like(x)

    plain = mpicomp.Comm(world, codec="none")
    t_plain = _timed(world, cp, lambda: plain.Allreduce(x, y), args.repeat)
    rows = [("plain MPI (device buffer)", t_plain, 1.0, 0.0, "exact",
             next(iter(plain.stats()["Allreduce"]["memory"])))]
    failed = False
    sizes = [int(v) << 10 for v in args.piece_kib.split(",") if v.strip()]
    runs = [(piece, case) for piece in sizes or [common.DEVICE_PIECE_BYTES]
            for case in [parse_case(c) for c in args.cases.split(",") if c.strip()]]
    for piece, (label, codec) in runs:
        common.DEVICE_PIECE_BYTES = piece  # (the same on every rank: the same arguments)
        mc = mpicomp.Comm(world, codec=codec.get_config(), threshold=0,
                          algorithm=args.algorithm)
        t = _timed(world, cp, lambda mc=mc: mc.Allreduce(x, y), args.repeat)
        got = cp.asnumpy(y).astype(np.float64)
        err = float(np.abs(got - exact).max())
        st = mc.stats()["Allreduce"]
        alg = next(iter(st["algorithms"]), "?")
        consts = bounds.codec_constants(codec, np.dtype(np.float32))
        if consts is None:
            rel = err / float(np.abs(exact).max())
            ok = rel < 2.0 ** -(codec.get_config()["rate"] - 8)
            check = f"rel {rel:.2e} {'ok' if ok else 'FAILED'}"
        else:
            bound = bounds.allreduce_bound(alg, p, consts[0], consts[1], g, np.dtype(np.float32))
            ok = err <= bound
            check = f"{err:.2e} <= {bound:.2e} {'ok' if ok else 'FAILED'}"
        failed |= not world.allreduce(ok, op=MPI.LAND)
        k = common.pieces_of(codec, n // p, np.float32, device=True)
        rows.append((f"{label} ({alg}), pieces of {piece >> 10} KiB ({k} a chunk)", t,
                     t_plain / t, st["ratio"], check, next(iter(st["memory"]))))
    if r == 0:
        aware, how = cuda_aware()
        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        name = name.decode() if isinstance(name, bytes) else name
        header = machine_lines() + [
            f"GPU: {name}; {p} ranks on {cp.cuda.runtime.getDeviceCount()} GPU(s)",
            f"MPI CUDA-aware: {aware} ({how})",
            f"buffer: {args.size_mib:g} MiB float32 per rank; times: slowest rank, "
            f"best of {args.repeat}",
            f"command: mpiexec -n {p} {command_line(argv)}",
        ]
        lines = ["| case | time ms | speedup vs plain | compression | max error vs exact | "
                 "memory path |", "|---|---|---|---|---|---|"]
        for case, t, speed, ratio, check, where in rows:
            lines.append(f"| {case} | {t * 1e3:.2f} | {speed:.2f} | "
                         f"{ratio:.2f} | {check} | {where} |")
        text = "\n".join(f"# {h}" for h in header) + "\n" + "\n".join(lines) + "\n"
        print(text, end="", flush=True)
        if args.markdown:
            with open(args.markdown, "w", encoding="utf-8") as f:
                f.write("## GPU Allreduce\n\n" + "\n".join(f"- {h}" for h in header)
                        + "\n\n" + "\n".join(lines) + "\n")
    return 1 if failed else 0
