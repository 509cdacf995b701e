"""Error feedback on a held-out check: replicated and sharded gradient reduction, compressed.

``mpiexec -n 4 python -m mpicomp.bench ef-check [--rates 4.25,2.25] [--seeds 3]``

A byte-level MLP (the 8 previous bytes of the standard library's sources
to the next byte: embedding 32, two hidden layers of 512, 400 K
parameters) trains ``--steps`` Adam steps on every rank's 64 sequences,
every configuration from the same weights and batches, then is scored on
4096 held-out positions (:mod:`.stdlib_text`'s validation files). The
configurations: float32 plain; the replicated reducer
(``DistributedOptimizer``) without feedback and with LoCo; the sharded
optimizer with the direct reduce-scatter (no, LoCo and classic feedback)
and with the ring (no and LoCo feedback), gradients bitplane at each
``--rate``. Printed per rate: each configuration's validation loss against
plain's, mean over the seeds and each seed's.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from .report import progress

#: (label, optimizer kind, error feedback, reduce-scatter algorithm)
CONFIGS = [("plain", "plain", "none", ""),
           ("replicated, no feedback", "replicated", "none", ""),
           ("replicated, LoCo", "replicated", "loco", ""),
           ("sharded, direct, no feedback", "sharded", "none", "allgather"),
           ("sharded, direct, LoCo", "sharded", "loco", "allgather"),
           ("sharded, direct, classic", "sharded", "classic", "allgather"),
           ("sharded, ring, no feedback", "sharded", "none", "ring"),
           ("sharded, ring, LoCo", "sharded", "loco", "ring")]
CONTEXT = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", default="4.25,2.25", help="bitplane rates (4.25,2.25)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds (3)")
    parser.add_argument("--steps", type=int, default=60, help="Adam steps (60)")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam's lr (3e-3)")
    parser.add_argument("--json", help="write the results to this JSON file")


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Embedding(256, 32), torch.nn.Flatten(), torch.nn.Linear(CONTEXT * 32, 512),
        torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))


def _batch(text: np.ndarray, starts: np.ndarray) -> tuple[Any, Any]:
    import torch

    seq = torch.from_numpy(text[starts[:, None] + np.arange(CONTEXT + 1)].astype(np.int64))
    return seq[:, :CONTEXT], seq[:, CONTEXT]


def run(config: tuple[str, str, str, str], rate: float, seed: int, args: argparse.Namespace,
        data: tuple[np.ndarray, np.ndarray]) -> float:
    """One configuration's validation loss (the same on every rank)."""
    import torch
    from mpi4py import MPI

    import mpicomp
    import mpicomp.torch as mt

    _, kind, feedback, algorithm = config
    comm = mpicomp.Comm(MPI.COMM_WORLD)
    p, r = comm.Get_size(), comm.Get_rank()
    model = _model()
    grad = {"codec": "bitplane", "rate": rate, "threshold": 0}
    if kind == "sharded":
        opt = mt.ShardedOptimizer(model.parameters(), torch.optim.Adam, comm=comm, lr=args.lr,
                                  error_feedback=feedback, algorithm=algorithm, bucket_mib=1,
                                  **grad)
    else:
        settings = {"codec": "none"} if kind == "plain" else {**grad,
                                                               "error_feedback": feedback}
        opt = mt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=args.lr),
                                      named_parameters=model.named_parameters(), comm=comm,
                                      **settings)
    train, val = data
    for step in range(args.steps):
        starts = np.random.default_rng([seed, step]).integers(0, train.size - CONTEXT - 1,
                                                              64 * p)
        x, y = _batch(train, starts[r * 64:(r + 1) * 64])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        x, y = _batch(val, np.linspace(0, val.size - CONTEXT - 2, 4096).astype(int))
        return float(torch.nn.functional.cross_entropy(model(x), y))


def main(args: argparse.Namespace, argv: list[str]) -> int:
    import torch
    from mpi4py import MPI

    from . import stdlib_text

    torch.set_num_threads(1)
    rank = MPI.COMM_WORLD.Get_rank()
    train, val, _ = stdlib_text.corpus(1 << 21, 1 << 18)
    results: dict[str, dict[str, list[float]]] = {}
    for rate in (float(v) for v in args.rates.split(",")):
        losses: dict[str, list[float]] = {c[0]: [] for c in CONFIGS}
        for seed in range(args.seeds):
            for config in CONFIGS:
                losses[config[0]].append(run(config, rate, seed, args, (train, val)))
                if rank == 0:
                    progress(f"ef-check: bitplane {rate} seed {seed} {config[0]}: "
                             f"{losses[config[0]][-1]:.4f}")
        results[str(rate)] = losses
        if rank == 0:
            base = np.array(losses["plain"])
            print(f"bitplane {rate}: validation loss against float32 plain, {args.seeds} seeds")
            for label, values in losses.items():
                rel = (np.array(values) / base - 1) * 100
                print(f"  {label:30s} {np.mean(values):.4f} {rel.mean():+.2f}% "
                      f"(seeds {', '.join(f'{v:+.2f}' for v in rel)})")
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "lr": args.lr, "results": results}, f, indent=1)
    return 0
