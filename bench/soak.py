"""Soak: thousands of mixed compressed operations, checked, with memory and resources watched.

``mpiexec -n 4 python -m mpicomp.bench soak --ops 10000``: every operation
is one of Allreduce (ring, recursive doubling, allgather algorithms),
Iallreduce, Allgather, Alltoall, Bcast, Reduce_scatter_block, Isend/Recv,
with a codec drawn from bitplane, zfp and the casts and a size from 1 KiB
to 4 MiB (the same plan on every rank, from ``--seed``). Each result is
compared with plain MPI on the same data within the codec's bound (zfp:
a relative error measured for its rate). After ``--warmup`` operations
the resident memory (VmRSS), mpicomp's threads and the communicators it
made are recorded; at the end they must not have grown by more than
``--rss-growth`` (5%), nor the threads and communicators at all. Progress
goes to stderr; rank 0 prints a summary; the exit status is 1 on any
failure, on every rank.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np
from mpi4py import MPI

__all__ = ["add_arguments", "main", "run"]

CODECS = [
    ({"id": "bitplane", "rate": 8.25}, None),
    ({"id": "bitplane", "rate": 16.25}, None),
    ({"id": "zfp", "rate": 16}, 1e-3),   # no pointwise bound: a relative error measured here
    ({"id": "cast", "dtype": "bfloat16"}, None),
    ({"id": "cast", "dtype": "float16"}, None),
]
KINDS = ("Allreduce:ring", "Allreduce:recursive_doubling", "Allreduce:allgather", "Iallreduce",
         "Allgather", "Alltoall", "Bcast", "Reduce_scatter_block", "p2p")
SIZES = (1 << 8, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20)  # float32 values: 1 KiB .. 4 MiB


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _threads() -> int:
    return sum(t.name.startswith("mpicomp") for t in threading.enumerate())


def _limit(codec_cfg: dict, measured: float | None, g: float, summands: int) -> float:
    from mpicomp.algorithms import bounds
    from mpicomp.codecs import get_codec

    consts = bounds.codec_constants(get_codec(codec_cfg), np.dtype(np.float32))
    c, a = consts if consts is not None else (measured or 0.0, 0.0)
    return (summands + 1) * (c * g + a) * 1.01 + summands * 1.2e-7 * g


def run(ops: int, warmup: int, seed: int, rss_growth: float, max_values: int,
        progress: bool = True) -> dict[str, object]:
    import mpicomp

    world = MPI.COMM_WORLD
    p, r = world.Get_size(), world.Get_rank()
    plain = world.Dup()
    comms = {i: mpicomp.Comm(world.Dup(), codec=cfg, threshold=0)
             for i, (cfg, _) in enumerate(CODECS)}
    plan = np.random.default_rng(seed)
    largest = max(s for s in SIZES if s <= max_values)
    # warm-up: every kind with every codec at the largest size (pools, worker threads), then
    # more of the random plan; the baseline is taken after it
    combos = [(k, c) for k in range(len(KINDS)) for c in range(len(CODECS))]
    warmup = max(warmup, len(combos))
    ops += len(combos)
    kinds = np.concatenate([[k for k, _ in combos], plan.choice(len(KINDS), ops - len(combos))])
    codecs = np.concatenate([[c for _, c in combos],
                             plan.choice(len(CODECS), ops - len(combos))])
    sizes = np.concatenate([[largest] * len(combos),
                            plan.choice([s for s in SIZES if s <= max_values], ops - len(combos))])
    failures: list[str] = []
    baseline: tuple[int, int] | None = None
    rss_peak_after_warmup = 0
    started = time.perf_counter()
    for i in range(ops):
        if i == warmup:
            world.Barrier()
            baseline = (_rss_kib(), _threads())
        kind = KINDS[int(kinds[i])]
        cfg, measured = CODECS[int(codecs[i])]
        mc = comms[int(codecs[i])]
        n = int(sizes[i]) // p * p
        x = np.random.default_rng(seed * 1_000_003 + i * 131 + r).standard_normal(n)
        x = x.astype(np.float32)
        summands = 1
        if kind.startswith("Allreduce") or kind == "Iallreduce":
            y, ref = np.empty_like(x), np.empty_like(x)
            if kind == "Iallreduce":
                mc.Iallreduce(x, y).Wait()
            else:
                mc.Allreduce(x, y, algorithm=kind.split(":")[1])
            plain.Allreduce(x, ref)
            summands = p
        elif kind == "Allgather":
            y, ref = np.empty(n * p, np.float32), np.empty(n * p, np.float32)
            mc.Allgather(x, y)
            plain.Allgather(x, ref)
        elif kind == "Alltoall":
            y, ref = np.empty_like(x), np.empty_like(x)
            mc.Alltoall(x, y)
            plain.Alltoall(x, ref)
        elif kind == "Bcast":
            y, ref = x.copy(), x.copy()
            mc.Bcast(y, root=i % p)
            plain.Bcast(ref, root=i % p)
        elif kind == "Reduce_scatter_block":
            y, ref = np.empty(n // p, np.float32), np.empty(n // p, np.float32)
            mc.Reduce_scatter_block(x, y)
            plain.Reduce_scatter_block(x, ref)
            summands = p
        else:
            y = np.empty_like(x)
            req = mc.Isend(x, (r + 1) % p, tag=i % 30000)
            mc.Recv(y, (r - 1) % p, i % 30000)
            req.Wait()
            ref = np.random.default_rng(seed * 1_000_003 + i * 131 + (r - 1) % p)
            ref = ref.standard_normal(n).astype(np.float32)
        g = summands * float(np.abs(ref).max() + 1.0) if ref.size else 1.0
        err = float(np.abs(y.astype(np.float64) - ref).max()) if ref.size else 0.0
        if not err <= _limit(cfg, measured, g, summands):
            failures.append(f"op {i} {kind} {cfg} n={n}: error {err:.3g}")
        if baseline is not None:
            rss_peak_after_warmup = max(rss_peak_after_warmup, _rss_kib())
        if progress and r == 0 and (i + 1) % max(ops // 50, 1) == 0:
            rate = (i + 1) / (time.perf_counter() - started)
            print(f"\rsoak: {i + 1}/{ops} operations, {rate:.0f}/s, "
                  f"RSS {_rss_kib() / 1024:.0f} MiB, {len(failures)} failures",
                  end="", file=sys.stderr, flush=True)
    world.Barrier()
    if progress and r == 0:
        print(file=sys.stderr)
    end_rss, end_threads = _rss_kib(), _threads()
    for mc in comms.values():
        mc.Free()
    plain.Free()
    after_free_threads = _threads()
    if baseline is None:
        baseline = (end_rss, end_threads)
    growth = end_rss / baseline[0] - 1.0 if baseline[0] else 0.0
    if warmup < ops and growth > rss_growth:
        failures.append(f"resident memory grew {growth:.1%} after warm-up "
                        f"({baseline[0]} -> {end_rss} KiB)")
    if end_threads > baseline[1]:
        failures.append(f"mpicomp threads grew from {baseline[1]} to {end_threads}")
    if after_free_threads:
        failures.append(f"{after_free_threads} mpicomp threads left after Free")
    return {"rank": r, "ops": ops, "warmup": warmup, "seconds": time.perf_counter() - started,
            "rss_kib": (baseline[0], end_rss, rss_peak_after_warmup), "growth": growth,
            "threads": (baseline[1], end_threads, after_free_threads), "failures": failures}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ops", type=int, default=10_000, help="operations (10000)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="operations before the memory baseline (default: ops/10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rss-growth", type=float, default=0.05,
                        help="largest allowed growth of resident memory after warm-up (0.05)")
    parser.add_argument("--max-mib", type=float, default=4.0,
                        help="largest buffer per rank in MiB (4)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def main(args: argparse.Namespace, argv: list[str]) -> int:
    warmup = args.warmup if args.warmup is not None else max(args.ops // 10, 1)
    max_values = int(args.max_mib * (1 << 20)) // 4
    res = run(args.ops, warmup, args.seed, args.rss_growth, max_values, not args.quiet)
    world = MPI.COMM_WORLD
    every = world.gather(res, root=0)
    failed = world.allreduce(len(res["failures"]), op=MPI.SUM)
    if world.Get_rank() == 0:
        assert every is not None
        print(f"# soak: {res['ops']} mixed compressed operations on {world.Get_size()} ranks "
              f"(the first {res['warmup']} a warm-up: every kind and codec at the largest size, "
              f"then the plan), seed {args.seed}; command: python -m mpicomp.bench soak "
              + " ".join(argv[1:]))
        print("rank  seconds  RSS after warm-up MiB  RSS end MiB  growth  threads (warm, end, "
              "after Free)  failures")
        for e in every:
            b, end, _ = e["rss_kib"]
            print(f"{e['rank']:4d}  {e['seconds']:7.1f}  {b / 1024:21.1f}  {end / 1024:11.1f}  "
                  f"{e['growth']:+6.1%}  {str(e['threads']):>27s}  {len(e['failures'])}")
            for f in e["failures"][:10]:
                print(f"  rank {e['rank']}: {f}")
        print("# soak: " + ("OK" if failed == 0 else f"FAILED ({failed} failures)"))
    return 1 if failed else 0
