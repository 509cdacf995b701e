"""Convergence study: data-parallel training with compressed gradient reduction.

``mpiexec -n 4 python -m mpicomp.bench train``: the MLP of
:mod:`mpicomp.bench.gradients` (64-512-256-10, 167,178 parameters, float32)
trained on scikit-learn's digits by minibatch SGD, each rank on its own
minibatches (32 samples per rank and step, a per-rank shuffle), the
gradients averaged by a :class:`mpicomp.training.GradientReducer` per case:
plain MPI; bitplane at about 8, 4 and 2 bits per value; zfp at rate 8;
cast bfloat16; each without error feedback, with classic feedback and with
LoCo-style feedback. Every case starts from the same weights and sees the
same minibatches (the same seeds). Printed per case (rank 0): the final
training loss and accuracy on the whole data set, their gap to plain, the
bytes each rank sent for the gradients (``comm.stats()``) against plain's,
and the time per step; whether the parameters are the same bits on every
rank. ``--plot FILE.png``: the loss curves; ``--json FILE``: the records.
``--buffer cupy`` keeps the data, the parameters and the gradients on the
GPU as CuPy arrays, so the reducer packs, compensates and averages them
on the device.

Memory over a long run (a soak: ``--steps 1000``): each record has the
rank's resident memory (VmRSS) and, with ``--buffer cupy``, CuPy's device
memory pool (bytes it holds from the driver) after the first
:data:`SETTLED` steps and at the end; the table prints their growth (rank 0).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = ["CASES", "SETTLED", "add_arguments", "main", "run_case"]

#: steps after which a run's memory counts as settled (the buffers and pools made)
SETTLED = 10

_CODECS = {
    "bitplane:8.25": {"codec": "bitplane", "rate": 8.25},
    "bitplane:4.25": {"codec": "bitplane", "rate": 4.25},
    "bitplane:2.25": {"codec": "bitplane", "rate": 2.25},
    "zfp:8": {"codec": "zfp", "rate": 8},
    "cast:bfloat16": {"codec": {"id": "cast", "dtype": "bfloat16"}},
}
#: "plain" and CODEC+FEEDBACK for every codec and feedback
CASES = ["plain"] + [f"{c}+{f}" for c in _CODECS for f in ("none", "classic", "loco")]


def _settings(case: str, algorithm: str) -> tuple[dict[str, Any], str]:
    if case == "plain":
        return {"codec": "none"}, "none"
    codec, _, feedback = case.partition("+")
    if codec not in _CODECS or feedback not in ("none", "classic", "loco"):
        raise ValueError(f"case must be 'plain' or CODEC+FEEDBACK with CODEC in "
                         f"{list(_CODECS)} and FEEDBACK none/classic/loco, got {case!r}")
    return {**_CODECS[codec], "algorithm": algorithm, "threshold": 0}, feedback


def _array_module(buffer: str) -> Any:
    if buffer == "numpy":
        return np
    if buffer != "cupy":
        raise ValueError(f"--buffer must be numpy or cupy, got {buffer!r}")
    try:
        import cupy
    except ImportError as e:
        raise ValueError("--buffer cupy needs CuPy and a CUDA GPU (pip install cupy-cuda12x)"
                         ) from e
    return cupy


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def run_case(comm: Any, case: str, steps: int, lr: float, batch: int, seed: int,
             algorithm: str, eval_every: int, beta: float,
             buffer: str = "numpy") -> dict[str, Any]:
    """Train one case; every rank returns the same record (losses computed from the
    replicated parameters). ``buffer``: ``numpy``, or ``cupy`` (everything on the GPU)."""
    from mpicomp.training import GradientReducer

    from .gradients import _one_blas_thread, init_params, load_digits_data, loss_and_grads

    xp = _array_module(buffer)
    x_all, y_all = (xp.asarray(a) for a in load_digits_data())
    x32 = x_all.astype(np.float32)
    r = comm.Get_rank()
    params = [xp.asarray(a.astype(np.float32)) for a in init_params()]
    names = [f"layer{k // 2 + 1}.{'weight' if k % 2 == 0 else 'bias'}"
             for k in range(len(params))]
    settings, feedback = _settings(case, algorithm)
    reducer = GradientReducer(comm, error_feedback=feedback, beta=beta, **settings)
    comm.reset_stats()
    order = np.random.default_rng(seed * 1000 + r)
    perm = order.permutation(len(y_all))
    pos = 0
    curve: list[tuple[int, float]] = []
    started = time.perf_counter()
    reduce_seconds = 0.0
    memory: dict[str, list[int]] = {}
    with _one_blas_thread():
        for step in range(steps):
            if pos + batch > len(perm):
                perm, pos = order.permutation(len(y_all)), 0
            idx = xp.asarray(perm[pos: pos + batch])
            pos += batch
            _, grads = loss_and_grads(params, x32[idx], y_all[idx])
            named = {n: g.astype(np.float32) for n, g in zip(names, grads)}
            _sync(xp)
            t = time.perf_counter()
            reducer.reduce(named)
            _sync(xp)
            reduce_seconds += time.perf_counter() - t
            for k, n in enumerate(names):
                params[k] -= np.float32(lr) * named[n]
            if step % eval_every == 0 or step == steps - 1:
                loss, _ = loss_and_grads(params, x32, y_all)
                curve.append((step, float(loss)))
            if step == min(SETTLED, steps) - 1 or step == steps - 1:
                for kind, value in _memory(xp).items():
                    memory.setdefault(kind, []).append(value)
        _sync(xp)
        elapsed = time.perf_counter() - started
        final_loss, _ = loss_and_grads(params, x32, y_all)
        h = x32
        for k in range(0, len(params), 2):
            h = h @ params[k].T + params[k + 1]
            if k < len(params) - 2:
                h = xp.maximum(h, 0)
        accuracy = float(xp.mean(xp.argmax(h, axis=1) == y_all))
    digest = hashlib.blake2b(b"".join(_host(a).tobytes() for a in params),
                             digest_size=8).hexdigest()
    identical = len(set(comm.allgather(digest))) == 1
    st = comm.stats().get("Iallreduce", {})
    return {"case": case, "feedback": feedback, "settings": json.loads(json.dumps(
        settings, default=str)), "final_loss": float(final_loss), "accuracy": accuracy,
        "curve": curve, "wire_bytes": int(st.get("wire_bytes", 0)),
        "raw_bytes": int(st.get("raw_bytes", 0)), "ms_per_step": 1e3 * elapsed / steps,
        "reduce_ms_per_step": 1e3 * reduce_seconds / steps, "identical": identical,
        "residual_bytes": reducer.feedback.nbytes(), "buffer": buffer,
        "memory": {kind: {"settled": v[0], "end": v[-1]} for kind, v in memory.items()}}


def _memory(xp: Any) -> dict[str, int]:
    """This rank's resident bytes, and CuPy's device pool's (``--buffer cupy``)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
    if xp is not np:
        out["device_pool"] = int(xp.get_default_memory_pool().total_bytes())
    return out


def _sync(xp: Any) -> None:
    """Wait for the GPU (CuPy) so that timings cover the work."""
    if xp is not np:
        xp.cuda.get_current_stream().synchronize()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated: plain, CODEC+none|classic|loco (default: all)")
    parser.add_argument("--steps", type=int, default=300, help="SGD steps (300)")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate (0.05)")
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step (32)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beta", type=float, default=0.8, help="LoCo moving average (0.8)")
    parser.add_argument("--algorithm", default="allgather",
                        help="allreduce algorithm of the compressed cases (allgather: each "
                             "rank's gradient quantized once, the error the feedback sees)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--buffer", default="numpy", choices=["numpy", "cupy"],
                        help="numpy (default), or cupy: data, parameters and gradients on the "
                             "GPU, reduced there")
    parser.add_argument("--plot", help="write the loss curves to this PNG")
    parser.add_argument("--json", help="write the records to this JSON file")


def main(args: argparse.Namespace, argv: list[str]) -> int:
    import mpicomp

    comm = mpicomp.Comm(MPI.COMM_WORLD.Dup())
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        _settings(c, args.algorithm)  # a bad case: an error before any training
    _array_module(args.buffer)
    records = []
    r = comm.Get_rank()
    for i, case in enumerate(cases):
        if r == 0:
            print(f"\rtrain: case {i + 1}/{len(cases)} {case} ...", end="", file=sys.stderr,
                  flush=True)
        records.append(run_case(comm, case, args.steps, args.lr, args.batch, args.seed,
                                args.algorithm, args.eval_every, args.beta, args.buffer))
    if r == 0:
        print(file=sys.stderr)
        _report(records, args, argv, comm.Get_size())
        if args.json:
            with open(args.json, "w") as f:
                json.dump(records, f, indent=1)
        if args.plot:
            _plot(records, args.plot, comm.Get_size())
    ok = all(rec["identical"] for rec in records)
    return 0 if ok else 1


def _report(records: list[dict[str, Any]], args: argparse.Namespace, argv: list[str],
            p: int) -> None:
    plain = next((rec for rec in records if rec["case"] == "plain"), None)
    print(f"# train: MLP 64-512-256-10 on digits, {p} ranks x {args.batch} samples per step, "
          f"{args.steps} steps, lr {args.lr}, seed {args.seed}, algorithm {args.algorithm}, "
          f"LoCo beta {args.beta}, buffers {args.buffer}")
    print("# command: python -m mpicomp.bench train " + " ".join(argv[1:]))
    print(f"{'case':24s} {'final loss':>10s} {'vs plain':>9s} {'accuracy':>8s} "
          f"{'wire MiB':>9s} {'vs plain':>8s} {'ms/step':>8s} {'reduce ms':>9s} identical  "
          f"memory growth after step {SETTLED} (rank 0)")
    for rec in records:
        gap = (f"{rec['final_loss'] / plain['final_loss'] - 1:+8.1%}" if plain else "       -")
        wire = (f"{rec['wire_bytes'] / max(plain['wire_bytes'], 1):8.3f}" if plain else "       -")
        print(f"{rec['case']:24s} {rec['final_loss']:10.4f} {gap:>9s} {rec['accuracy']:8.3f} "
              f"{rec['wire_bytes'] / 2**20:9.1f} {wire:>8s} {rec['ms_per_step']:8.2f} "
              f"{rec['reduce_ms_per_step']:9.2f} {'yes' if rec['identical'] else 'NO ':9s}  "
              f"{_growth(rec['memory'])}")


def _growth(memory: dict[str, dict[str, int]]) -> str:
    """``rss +X MiB (of Y), device_pool +Z MiB (of W)``: each kind's growth from the settled
    point to the end."""
    return ", ".join(f"{kind} {(m['end'] - m['settled']) / 2**20:+.1f} MiB "
                     f"(of {m['settled'] / 2**20:.1f})" for kind, m in memory.items())


def _plot(records: list[dict[str, Any]], path: str, p: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# --plot: matplotlib is not installed", file=sys.stderr)
        return
    codecs = sorted({rec["case"].split("+")[0] for rec in records if rec["case"] != "plain"})
    fig, axes = plt.subplots(1, max(len(codecs), 1), figsize=(4.2 * max(len(codecs), 1), 3.6),
                             sharey=True, squeeze=False)
    plain = next((rec for rec in records if rec["case"] == "plain"), None)
    styles = {"none": "-", "classic": "--", "loco": ":"}
    for ax, codec in zip(axes[0], codecs):
        if plain:
            s, l = zip(*plain["curve"])
            ax.plot(s, l, color="black", lw=2, label="plain")
        for rec in records:
            if rec["case"].split("+")[0] == codec:
                s, l = zip(*rec["curve"])
                ax.plot(s, l, styles[rec["feedback"]], lw=1.5,
                        label=f"feedback {rec['feedback']}")
        ax.set_title(codec)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("training loss (whole data set)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Data-parallel SGD on digits, {p} ranks: compressed gradient allreduce")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
