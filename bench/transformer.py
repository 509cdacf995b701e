"""Transformer study: hybrid-parallel training over compressed collectives.

``mpiexec -n 4 python -m mpicomp.bench transformer``: the byte-level GPT of
:mod:`mpicomp.bench.gpt` trained on the standard library's own sources
(:mod:`mpicomp.bench.stdlib_text`; held-out files for validation) in every
layout of 4 ranks and with every policy, one run after another in one job:

layouts (``parallel_groups``: tensor-parallel ranks are neighbours)
    ``dp4`` (data parallel, replicated: ``DistributedOptimizer``),
    ``dp4-sharded`` (``ShardedOptimizer``: gradients reduce-scattered during backward,
    parameters allgathered), ``dp2xtp2``, ``dp2xpp2`` and ``tp2xpp2``
    (Megatron-LM tensor parallelism, ``PipelineStage`` with 1F1B over
    ``--micro-batches``);
policies
    ``plain`` (codec none everywhere), ``bf16`` (the cast codec, bfloat16,
    on every group) and ``bf16-net`` (bfloat16 on every group but a
    tensor-parallel pair that shares a host, whose traffic goes in the model's
    float32 through shared memory, as Megatron sends activations in the
    model's dtype; run only in layouts with tensor parallelism, elsewhere it
    is ``bf16``): the practitioner's baselines; ``naive`` (one aggressive
    setting, bitplane 4.25, on every group, without error feedback);
    ``hybrid`` (data-parallel gradients bitplane 4.25 with LoCo error
    feedback, 6.25 where the data-parallel group has fewer than 4 ranks, whose
    average halves less of the codec's noise; norms and tensors under 4096
    values plain; a sharded optimizer's parameters each step's change at
    bitplane 3.25; tensor- and pipeline-parallel activations and gradients
    bitplane 16.25, tensor-parallel traffic plain where the pair shares a
    host: shared memory is no slow link, and any codec, a cast included,
    costs more core time there than it saves).

Data-parallel gradients are reduced during backward (``DistributedOptimizer(
overlap=True)``, the sharded optimizer's hooks) under every policy, but in
pipeline layouts (several backward passes a step: reduced at the step).

Every run starts from the same weights (``--seed``), sees the same global
batch at every step (each data-parallel replica its slice of it), takes the
same ``--steps`` Adam steps (betas 0.9 and ``--beta2``; linear warm-up, then
cosine decay to a tenth) and is
evaluated on the same held-out sequences. Printed per run (rank 0): tokens
per second and the speedup over plain in the same layout; the step split
into compute (forward, backward, optimizer), communication (inside the
communicators' calls, waits for other ranks included, codecs excluded) and
codec (encode and decode in those calls, error-feedback round trips); the
bytes each rank hands MPI per step in its data-, tensor- and
pipeline-parallel group (``comm.stats()``); the final training loss (on a
fixed sample of training sequences) and validation loss, and their gap to
plain's; whether the parameters ended the same bits on every replica (and
the tensor-parallel ranks' unsplit parameters on every rank of the group).
The first ``--skip`` steps are not timed (a new job loads its kernels).

``--json FILE`` keeps the records; ``--report A.json [B.json ...]`` (no MPI)
reads records back, prints the table and, with ``--plot PREFIX``, writes
``PREFIX-loss.png`` (validation loss curves per layout) and
``PREFIX-throughput.png`` (tokens/s per layout, policy and link rate).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time
from typing import Any

import numpy as np

from .report import command_line, machine_lines, progress

__all__ = ["LAYOUTS", "POLICIES", "add_arguments", "main", "policy_settings", "runs_in"]

#: layout: (data-, tensor-, pipeline-parallel ranks, sharded optimizer)
LAYOUTS = {
    "dp4": (4, 1, 1, False),
    "dp4-sharded": (4, 1, 1, True),
    "dp2xtp2": (2, 2, 1, False),
    "dp2xpp2": (2, 1, 2, False),
    "tp2xpp2": (1, 2, 2, False),
}
POLICIES = ("plain", "bf16", "bf16-net", "naive", "hybrid")
#: the practitioner's baselines: each policy is compared to the fastest of them per layout
BASELINES = ("plain", "bf16", "bf16-net")
#: policies that differ from another only where tensor parallelism is: not run elsewhere
TP_ONLY = ("bf16-net",)
PLAIN = {"codec": "none"}
BF16 = {"codec": {"id": "cast", "dtype": "bfloat16"}, "threshold": 0}
AGGRESSIVE = {"codec": "bitplane", "rate": 4.25, "threshold": 0}
#: hybrid's data-parallel gradients where fewer than :data:`AVERAGED` ranks average them
MODERATE = {"codec": "bitplane", "rate": 6.25, "threshold": 0}
AVERAGED = 4
MILD = {"codec": "bitplane", "rate": 16.25, "threshold": 0}
#: a sharded optimizer's parameter allgather under the hybrid policy: each step's change
#: of the parameters (``gather_deltas``: the master values less the replicas', so what a
#: gather lost goes with the next step's; the replicas stay within one step's codec
#: error of the master values)
PARAMS = {"codec": "bitplane", "rate": 3.25, "threshold": 0}
#: gradient (and sharded parameter) buckets, MiB, each policy's faster choice in every
#: layout (docs/decisions.md): plain's small ones (about a third of the model's 3.3 MiB a
#: bucket, so that backward overlaps them: native nonblocking MPI), one bucket for the
#: policies whose calls go through mpicomp's codecs, bf16 included (fewer agreements and
#: codec calls competing with backward for the cores)
SMALL_BUCKETS, BIG_BUCKETS = 1.0, 25.0
#: gradients of fewer values than this go plain under the hybrid policy
SMALL_TENSOR = 4096


def _small(name: str, array: Any) -> bool:
    return array.size < SMALL_TENSOR


def runs_in(layout: str, policy: str) -> bool:
    """Whether the study runs ``policy`` in ``layout`` (:data:`TP_ONLY` policies only where
    there is tensor parallelism: elsewhere they are another policy)."""
    return policy not in TP_ONLY or LAYOUTS[layout][1] > 1


def policy_settings(policy: str, local_tp: bool = False, dp: int = 4) -> dict[str, Any]:
    """The settings of each kind of traffic under ``policy`` (``local_tp``: the
    tensor-parallel ranks share a host, their traffic shared memory; ``dp``: the ranks of
    the data-parallel group)."""
    if policy == "plain":
        return {"tp": PLAIN, "pp": PLAIN, "grad": PLAIN, "feedback": "none", "rules": [],
                "params": PLAIN, "param_deltas": False, "bucket_mib": SMALL_BUCKETS}
    if policy in ("bf16", "bf16-net"):
        tp = PLAIN if policy == "bf16-net" and local_tp else BF16
        return {"tp": tp, "pp": BF16, "grad": BF16, "feedback": "none", "rules": [],
                "params": BF16, "param_deltas": False, "bucket_mib": BIG_BUCKETS}
    if policy == "naive":
        return {"tp": AGGRESSIVE, "pp": AGGRESSIVE, "grad": AGGRESSIVE, "feedback": "none",
                "rules": [], "params": AGGRESSIVE, "param_deltas": False,
                "bucket_mib": BIG_BUCKETS}
    if policy == "hybrid":
        return {"tp": PLAIN if local_tp else MILD, "pp": MILD,
                "grad": AGGRESSIVE if dp >= AVERAGED else MODERATE,
                "feedback": "loco", "rules": [("*norm*", PLAIN), (_small, PLAIN)],
                "params": PARAMS, "param_deltas": True, "bucket_mib": BIG_BUCKETS}
    raise ValueError(f"policy must be one of {list(POLICIES)}, got {policy!r}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help=f"comma-separated, of {','.join(LAYOUTS)} (all)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma-separated, of {','.join(POLICIES)} (all)")
    parser.add_argument("--steps", type=int, default=600, help="Adam steps per run (600)")
    parser.add_argument("--skip", type=int, default=10, help="untimed first steps (10)")
    parser.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (1e-3)")
    parser.add_argument("--beta2", type=float, default=0.95, help="Adam's beta2 (0.95)")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up steps (30)")
    parser.add_argument("--global-batch", type=int, default=32,
                        help="sequences per step over all replicas (32)")
    parser.add_argument("--micro-batches", type=int, default=4,
                        help="micro-batches per pipeline step (4)")
    parser.add_argument("--context", type=int, default=64, help="bytes per sequence (64)")
    parser.add_argument("--d", type=int, default=128, help="model width (128)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (4)")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (4)")
    parser.add_argument("--eval-every", type=int, default=50,
                        help="steps between evaluations (50)")
    parser.add_argument("--eval-seqs", type=int, default=64,
                        help="validation (and training-sample) sequences (64)")
    parser.add_argument("--train-mib", type=float, default=4.0,
                        help="MiB of training text (4)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (0)")
    parser.add_argument("--seeds", type=int, default=3,
                        help="seeds per layout and policy: --seed, --seed + 1, ... (3)")
    parser.add_argument("--bucket-mib", type=float, default=None,
                        help="gradient buckets of at most this many MiB in every policy "
                             "(default: each policy's own, see policy_settings)")
    parser.add_argument("--param-rate", type=float, default=None,
                        help="the bitplane parameter gathers (naive, hybrid) at this "
                             "rate (default: each policy's own, see policy_settings)")
    parser.add_argument("--grad-rate", type=float, default=None,
                        help="the bitplane data-parallel gradients (naive, hybrid) at this "
                             "rate (default: each policy's own, see policy_settings)")
    parser.add_argument("--grad-algorithm", default=None,
                        help="the data-parallel gradients' allreduce (or reduce-scatter) "
                             "algorithm (default: each policy's own, see policy_settings)")
    parser.add_argument("--tp-rate", type=float, default=None,
                        help="the tensor-parallel traffic of the compressing policies (naive, "
                             "hybrid) bitplane at this rate (default: each policy's own)")
    parser.add_argument("--no-rules", action="store_true",
                        help="no gradient goes plain under a policy's rules (hybrid's norms "
                             "and small tensors take the gradients' setting)")
    parser.add_argument("--feedback", choices=("none", "classic", "loco"), default=None,
                        help="the error feedback of the policies that have one (hybrid) "
                             "(default: each policy's own)")
    parser.add_argument("--val-kib", type=int, default=256,
                        help="KiB of held-out text the final validation loss scores (256)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (1)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the model, its batches and the optimizers' buffers live "
                             "(cpu; cuda: every rank on its node-local GPU, CUDA tensors "
                             "through mpicomp's device path)")
    parser.add_argument("--label", default="", help="the network, for the report (e.g. '1 Gbit/s')")
    parser.add_argument("--json", help="write the records to this JSON file")
    parser.add_argument("--markdown", help="(rank 0) also write the table as Markdown")
    parser.add_argument("--plot", metavar="PREFIX",
                        help="write PREFIX-loss.png and PREFIX-throughput.png")
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="no training: the table (and plots) of earlier --json files")


# -- one run -----------------------------------------------------------------------------

def _hash(params: list[Any]) -> str:
    h = hashlib.sha256()
    for p in params:
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def _unsplit_names(module: Any) -> list[str]:
    """The parameters tensor parallelism does not split: the same on every rank of the
    tensor-parallel group (all but the parallel layers' weights and column biases)."""
    import mpicomp.torch as mt

    out = []
    for prefix, m in module.named_modules():
        for name, _ in m.named_parameters(prefix=prefix, recurse=False):
            if not isinstance(m, (mt.ColumnParallelLinear, mt.RowParallelLinear)) or (
                    isinstance(m, mt.RowParallelLinear) and name.endswith(".bias")):
                out.append(name)
    return out


def _batch(text: np.ndarray, starts: np.ndarray, context: int,
           device: Any = "cpu") -> tuple[Any, Any]:
    import torch

    idx = starts[:, None] + np.arange(context + 1)[None, :]
    seq = torch.from_numpy(text[idx].astype(np.int64)).to(device)
    return seq[:, :-1], seq[:, 1:]


def _device(args: argparse.Namespace, host: Any) -> Any:
    """``--device`` as a torch device: this rank's GPU among its node's (by its rank on the
    node) for ``cuda``, made current (PyTorch's and CuPy's)."""
    import torch

    if args.device == "cpu":
        return torch.device("cpu")
    device = torch.device("cuda", host.Get_rank() % torch.cuda.device_count())
    torch.cuda.set_device(device)
    try:  # (mpicomp's device work runs on CuPy's current device where CuPy is)
        import cupy
    except ImportError:
        return device
    cupy.cuda.Device(device.index).use()
    return device


def _lr(step: int, args: argparse.Namespace) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    done = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))


def link_tx_bytes() -> int | None:
    """Bytes this simulated host's link has sent (``eth0`` in ``/proc/net/dev``, which
    shows this process's network namespace): what really left the host, TCP/IP included,
    the same way for every policy; None outside :mod:`netcluster <bench.netcluster>`."""
    if not os.environ.get("NETCLUSTER_NS_PREFIX"):
        return None
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == "eth0":
                return int(counters.split()[8])  # (8 receive counters, then transmit)
    return None


def _wire_and_codec(comm: Any) -> tuple[int, float]:
    stats = comm.stats()
    return (sum(s["wire_bytes"] for s in stats.values()),
            sum(s["codec_seconds"] for s in stats.values()))


def run(world: Any, layout: str, policy: str, args: argparse.Namespace, data: dict[str, Any],
        clock: Any) -> dict[str, Any]:
    """Train one layout under one policy; the record (the same on every rank)."""
    import torch
    from mpi4py import MPI

    import mpicomp.torch as mt
    from mpicomp.training import parallel_groups

    from . import gpt

    dp, tp, pp, sharded = LAYOUTS[layout]
    host = world.Split_type(MPI.COMM_TYPE_SHARED)  # (tensor-parallel ranks are neighbours)
    local_tp = tp > 1 and host.Get_size() % tp == 0
    s = policy_settings(policy, local_tp, dp)
    if args.tp_rate is not None and policy not in BASELINES:  # (exploring)
        s = {**s, "tp": {"codec": "bitplane", "rate": args.tp_rate, "threshold": 0}}
    g = parallel_groups(world, dp=dp, tp=tp, pp=pp,
                        policies={"dp": PLAIN, "tp": s["tp"], "pp": s["pp"]})
    device = _device(args, host)
    torch.manual_seed(args.seed)
    config = gpt.GPTConfig(context=args.context, d=args.d, heads=args.heads, layers=args.layers)
    model = gpt.GPT(config).to(device)
    parameters = gpt.count_parameters(model)  # the whole model's, before the split
    model = gpt.split_tensors(model, g.tp)
    module = gpt.stage_of(model, g.pp_rank, pp) if pp > 1 else model
    stage = mt.PipelineStage(module, g.pp) if pp > 1 else None
    first, last = g.pp_rank == 0, g.pp_rank == pp - 1
    named = list(module.named_parameters())
    grad = dict(s["grad"])
    if args.grad_rate is not None and grad.get("codec") == "bitplane":  # (exploring)
        grad["rate"] = args.grad_rate
    if args.grad_algorithm is not None and grad.get("codec") not in (None, "none"):
        grad["algorithm"] = args.grad_algorithm
    if args.param_rate is not None and s["params"].get("codec") == "bitplane":  # (exploring)
        s = {**s, "params": {**s["params"], "rate": args.param_rate}}
    if args.feedback is not None and s["feedback"] != "none":
        s = {**s, "feedback": args.feedback}
    bucket_mib = args.bucket_mib if args.bucket_mib is not None else s["bucket_mib"]
    if sharded:
        opt = mt.ShardedOptimizer(named, torch.optim.Adam, comm=g.dp, lr=args.lr,
                                  betas=(0.9, args.beta2), bucket_mib=bucket_mib,
                                  error_feedback=s["feedback"], param_settings=s["params"],
                                  gather_deltas=s["param_deltas"], **grad)
        # (gradients reduce-scatter during backward: their starts and waits are the comm)
        clock.wrap(g.dp, "Ireduce_scatter_block", "comm")
        clock.wrap(opt.grads, "complete_oldest", "comm")
        # (parameters allgather during the next forward, bucket by bucket, as Megatron's
        # overlap_param_gather: their starts and waits are the comm)
        opt.gather_during_forward(module)
        clock.wrap(g.dp, "Iallgather", "comm")
        clock.wrap(opt, "finish_param_gather", "comm")
    elif dp > 1:
        rules = [] if args.no_rules else list(s["rules"])
        if tp > 1:  # the unsplit parameters' gradients in buckets of their own, by one
            unsplit = set(_unsplit_names(module))  # algorithm on every group (see rules)
            rules.append((lambda name, a: name in unsplit,
                          {"bucket": "unsplit", "algorithm": "ring"}))
        # overlapped with backward as DDP does (a pipeline's several backward passes a step
        # reduce at the step)
        opt = mt.DistributedOptimizer(torch.optim.Adam([p for _, p in named], lr=args.lr,
                                                       betas=(0.9, args.beta2)),
                                      named_parameters=named, comm=g.dp, overlap=pp == 1,
                                      bucket_mib=bucket_mib,
                                      error_feedback=s["feedback"], rules=rules, **grad)
        clock.wrap(opt, "synchronize", "comm")
        clock.wrap(g.dp, "Iallreduce", "comm")
    else:
        opt = torch.optim.Adam([p for _, p in named], lr=args.lr, betas=(0.9, args.beta2))
    if tp > 1:
        for method in ("Allreduce", "Allgather", "Reduce_scatter_block"):
            clock.wrap(g.tp, method, "comm")
    if pp > 1:
        for method in ("Isend", "Recv", "isend", "recv", "bcast"):
            clock.wrap(g.pp, method, "comm")

    rows = args.global_batch // dp  # this replica's sequences per step
    mine = slice(g.dp_rank * rows, (g.dp_rank + 1) * rows)
    text, val_text = data["train"], data["val"]

    def loss_of(x: Any, y: Any, train: bool) -> float:
        if stage is not None:
            call = stage.step if train else stage.evaluate
            return call(x if first else None, y if last else None, gpt.loss_fn,
                        micro_batches=args.micro_batches)
        if train:
            loss = gpt.loss_fn(model(x), y)
            loss.backward()
            return float(loss.detach())
        with torch.no_grad():
            return float(gpt.loss_fn(model(x), y))

    def evaluate(starts: np.ndarray, source: np.ndarray) -> float:
        """The mean loss of the sequences at ``starts`` (each replica its share, in chunks of
        the global batch)."""
        mine = starts[g.dp_rank::dp]
        chunk = max(args.global_batch // dp, 1)
        total = 0.0
        for at in range(0, mine.size, chunk):
            x, y = _batch(source, mine[at:at + chunk], args.context, device)
            total += loss_of(x, y, False) * x.shape[0]
        return g.dp.allreduce(total) / g.dp.allreduce(mine.size)

    # the final validation: every window of ``context`` bytes in the first --val-kib KiB
    val_starts = np.arange(0, min(val_text.size, args.val_kib << 10) - args.context - 1,
                           args.context)
    val_starts = val_starts[:val_starts.size // args.global_batch * args.global_batch]

    eval_starts = np.linspace(0, val_text.size - args.context - 2, args.eval_seqs).astype(int)
    train_sample = np.random.default_rng([args.seed, 1]).integers(
        0, text.size - args.context - 1, args.eval_seqs)
    groups = {"dp": g.dp, "tp": g.tp, "pp": g.pp}
    timed = {"wall": 0.0, "compute": 0.0, "comm": 0.0, "codec": 0.0, "cpu": 0.0}
    wire0: dict[str, int] = {}
    link = 0  # bytes this host's link sent in the timed steps (the simulated cluster)
    curve, val_curve = [], []
    for step in range(args.steps):
        if step == args.skip:
            wire0 = {k: _wire_and_codec(c)[0] for k, c in groups.items()}
        codec0 = sum(_wire_and_codec(c)[1] for c in groups.values())
        evaluating = (step + 1) % args.eval_every == 0 or step == args.steps - 1
        clock.take()
        tx = link_tx_bytes()
        # one step, from its batch to its loss on every rank: transfers overlapped with the
        # next step (a sharded optimizer's parameter gathers) stay inside the timed steps
        t, cpu = time.perf_counter(), time.process_time()
        for group in opt.param_groups:
            group["lr"] = _lr(step, args)
        starts = np.random.default_rng([args.seed, 0, step]).integers(
            0, text.size - args.context - 1, args.global_batch)
        x, y = _batch(text, starts[mine], args.context, device)
        opt.zero_grad()
        loss = loss_of(x, y, True)
        opt.step()
        with clock.region("comm"):  # (the loss every step, as a training log has it)
            curve.append(g.dp.allreduce(loss) / dp)
        if sharded and evaluating:  # (the evaluation is not timed: its parameters are)
            opt.finish_param_gather()
        if device.type == "cuda":  # (the step's queued GPU work is the step's)
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - t
        cpu = time.process_time() - cpu  # (every thread of this rank)
        regions = clock.take()
        if tx is not None and step >= args.skip:
            link += link_tx_bytes() - tx
        in_calls = sum(_wire_and_codec(c)[1] for c in groups.values()) - codec0
        if step >= args.skip:
            codec = regions.get("codec", 0.0) + in_calls
            comm = regions.get("comm", 0.0) - in_calls
            timed["wall"] += wall
            timed["codec"] += codec
            timed["comm"] += comm
            timed["compute"] += wall - codec - comm
            timed["cpu"] += cpu
        if evaluating:
            val_curve.append((step + 1, evaluate(eval_starts, val_text)))
            if world.Get_rank() == 0:
                progress(f"transformer: {layout} {policy} step {step + 1}/{args.steps} "
                         f"loss {curve[-1]:.4f} val {val_curve[-1][1]:.4f}")
    n_timed = args.steps - args.skip
    wire = {k: (_wire_and_codec(c)[0] - wire0[k]) / n_timed if c.Get_size() > 1 else 0.0
            for k, c in groups.items()}
    final_train = evaluate(train_sample, text)
    final_val = evaluate(val_starts, val_text)
    # identical replicas: the same bits on every rank with this tensor and pipeline rank;
    # the parameters tensor parallelism does not split, the same on the whole tp group
    params = [p for _, p in module.named_parameters()]
    if sharded:
        opt.finish_param_gather()
    kept = set(_unsplit_names(module))
    whole = [p for name, p in module.named_parameters() if name in kept]
    seen = world.allgather((g.dp_rank, g.tp_rank, g.pp_rank, _hash(params), _hash(whole)))
    replicas: dict[tuple[int, int], set[str]] = {}  # by (tp rank, pp rank): every dp rank
    unsplit: dict[tuple[int, int], set[str]] = {}  # by (dp rank, pp rank): every tp rank
    for d, t, q, full, kept in seen:
        replicas.setdefault((t, q), set()).add(full)
        unsplit.setdefault((d, q), set()).add(kept)
    identical = all(len(v) == 1 for v in (*replicas.values(), *unsplit.values()))
    per_rank = world.allgather({k: v / n_timed for k, v in timed.items()})
    mean = {k: float(np.mean([r[k] for r in per_rank])) for k in timed}
    wires = world.allgather(wire)
    # the host's link per rank: its bytes over the ranks the host runs
    links = world.allgather(link / n_timed / host.Get_size() if link_tx_bytes() is not None
                            else None)
    record = {
        "layout": layout, "policy": policy, "label": args.label, "dp": dp, "tp": tp, "pp": pp,
        "sharded": sharded, "local_tp": local_tp, "settings": json.loads(json.dumps(
            s, default=lambda o: f"fewer than {SMALL_TENSOR} values")),
        "steps": args.steps, "timed_steps": n_timed,
        "tokens_per_step": args.global_batch * args.context,
        "step_s": mean["wall"], "compute_s": mean["compute"], "comm_s": mean["comm"],
        "codec_s": mean["codec"], "cpu_s": mean["cpu"],
        "tokens_per_s": args.global_batch * args.context / mean["wall"],
        "wire_mib_per_step": {k: float(np.mean([w[k] for w in wires])) / (1 << 20)
                              for k in groups},
        "link_mib_per_step": (float(np.mean(links)) / (1 << 20) if None not in links
                              else None),
        "train_curve": curve, "val_curve": val_curve,
        "final_train_loss": final_train, "final_val_loss": final_val,
        "val_bytes": int(val_starts.size * (args.context + 1)), "seed": args.seed,
        "identical": bool(identical),
        "parameters": parameters, "device": args.device,
    }
    g.free()
    host.Free()
    return record


# -- the report --------------------------------------------------------------------------

def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (network, layout, policy): means over the seeds and their spread (half
    the range), tokens/s against the best baseline of the layout (the faster of
    :data:`BASELINES`), the validation loss against float32 plain of the same seed."""
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        runs.setdefault((r["label"], r["layout"], r["policy"]), []).append(r)

    def mean(rs: list[dict[str, Any]], key: str) -> float:
        return float(np.mean([r[key] for r in rs]))

    def spread(values: list[float]) -> float:
        return (max(values) - min(values)) / 2 if values else 0.0

    rows = []
    for (label, layout, policy), rs in runs.items():
        baselines = {b: mean(runs[(label, layout, b)], "tokens_per_s") for b in BASELINES
                     if (label, layout, b) in runs}
        best = max(baselines, key=baselines.get) if baselines else None
        plain = {r["seed"]: r["final_val_loss"] for r in runs.get((label, layout, "plain"), [])}
        gaps = [(r["final_val_loss"] / plain[r["seed"]] - 1) * 100 for r in rs
                if r["seed"] in plain]
        tokens = [r["tokens_per_s"] for r in rs]
        wire = {k: float(np.mean([r["wire_mib_per_step"][k] for r in rs]))
                for k in ("dp", "tp", "pp")}
        rows.append({
            "label": label, "layout": layout, "policy": policy, "seeds": len(rs),
            "tokens_per_s": float(np.mean(tokens)), "tokens_spread": spread(tokens),
            "vs_best": float(np.mean(tokens)) / baselines[best] if best else None,
            "best": best,
            "step_s": mean(rs, "step_s"),
            "ms": "/".join(f"{mean(rs, k) * 1e3:.0f}" for k in ("compute_s", "comm_s",
                                                                 "codec_s")),
            "cpu": (mean(rs, "cpu_s") if all("cpu_s" in r for r in rs) else None),
            "wire": "/".join(f"{wire[k]:.2f}" if wire[k] else "-" for k in ("dp", "tp", "pp")),
            "link": (float(np.mean([r["link_mib_per_step"] for r in rs]))
                     if all(r.get("link_mib_per_step") is not None for r in rs) else None),
            "final_val_loss": mean(rs, "final_val_loss"),
            "val_spread": spread([r["final_val_loss"] for r in rs]),
            "val_gap": float(np.mean(gaps)) if gaps else None,
            "gap_spread": spread(gaps),
            "identical": all(r["identical"] for r in rs),
        })
    return rows


def table(records: list[dict[str, Any]], header: list[str]) -> str:
    from .report import Column, format_markdown

    columns = [
        Column("label", "network"), Column("layout", "layout"), Column("policy", "policy"),
        Column("seeds", "seeds"),
        Column("tokens_per_s", "tokens/s", "{:.0f}"),
        Column("tokens_spread", "±", "{:.0f}"),
        Column("vs_best", "vs best baseline", "{:.2f}x"),
        Column("best", "(baseline)"),
        Column("step_s", "step ms", lambda v: f"{v * 1e3:.0f}"),
        Column("ms", "compute/comm/codec ms"),
        Column("cpu", "CPU ms", lambda v: "-" if v is None else f"{v * 1e3:.0f}"),
        Column("wire", "MiB/step dp/tp/pp"),
        Column("link", "link MiB/step", lambda v: "-" if v is None else f"{v:.2f}"),
        Column("final_val_loss", "val loss", "{:.4f}"),
        Column("val_gap", "val vs plain", "{:+.2f}%"),
        Column("gap_spread", "±", "{:.2f}"),
        Column("identical", "identical", lambda v: "yes" if v else "NO"),
    ]
    return format_markdown("Transformer study", columns, summary(records), header)


def plot(records: list[dict[str, Any]], prefix: str) -> list[str]:
    from .plot import _pyplot

    plt = _pyplot()
    layouts = [k for k in LAYOUTS if any(r["layout"] == k for r in records)]
    labels = list(dict.fromkeys(r["label"] for r in records))
    colors = {"plain": "black", "bf16": "tab:green", "bf16-net": "tab:olive", "naive": "tab:red",
              "hybrid": "tab:blue"}
    first = min(r.get("seed", 0) for r in records)
    fig, axes = plt.subplots(2, len(layouts), figsize=(4 * len(layouts), 6), sharey="row",
                             sharex=True, squeeze=False)
    for col, layout in enumerate(layouts):
        # (the first seed's curves, of the first network that ran the layout)
        label = next(v for v in labels if any(r["layout"] == layout and r["label"] == v
                                              for r in records))
        runs = {r["policy"]: r for r in records
                if r["layout"] == layout and r["label"] == label
                and r.get("seed", 0) == first}
        base = dict(runs["plain"]["val_curve"]) if "plain" in runs else None
        for policy, r in runs.items():
            steps, vals = zip(*r["val_curve"], strict=True)
            axes[0][col].plot(steps, vals, color=colors.get(policy), label=policy)
            if base is not None:  # the gap to plain at the same step, in percent
                axes[1][col].plot(steps, [(v / base[k] - 1) * 100 for k, v in zip(
                    steps, vals, strict=True)], color=colors.get(policy), label=policy)
        axes[0][col].set_title(layout)
        axes[1][col].set_xlabel("step")
        for row in (0, 1):
            axes[row][col].grid(alpha=0.3)
    axes[0][0].set_ylabel("validation loss (nats/byte)")
    axes[1][0].set_ylabel("validation loss vs plain (%)")
    _legend(axes[0][0], axes[0])
    fig.tight_layout()
    loss_png = f"{prefix}-loss.png"
    fig.savefig(loss_png, dpi=120)
    plt.close(fig)
    ran = {label: [k for k in layouts if any(r["layout"] == k and r["label"] == label
                                             for r in records)] for label in labels}
    fig, axes = plt.subplots(1, len(labels), squeeze=False,
                             figsize=(2 + 3 * sum(map(len, ran.values())), 3.6),
                             gridspec_kw={"width_ratios": [len(ran[v]) for v in labels]})
    for ax, label in zip(axes[0], labels, strict=True):
        drawn = [v for v in POLICIES if any(r["policy"] == v and r["label"] == label
                                            for r in records)]
        width = 0.8 / len(drawn)
        for i, policy in enumerate(drawn):  # (means over the seeds)
            ys = [float(np.mean([r["tokens_per_s"] for r in records if r["layout"] == k
                                 and r["policy"] == policy and r["label"] == label] or [0.0]))
                  for k in ran[label]]
            ax.bar(np.arange(len(ran[label])) + (i - (len(drawn) - 1) / 2) * width, ys,
                   width, label=policy, color=colors.get(policy))
        ax.set_xticks(np.arange(len(ran[label])), ran[label])
        ax.set_ylabel("tokens/s")
        ax.set_title(f"4 ranks, {label}" if label else "4 ranks")
        ax.grid(axis="y", alpha=0.3)
    _legend(axes[0][0], axes[0])
    fig.tight_layout()
    bars_png = f"{prefix}-throughput.png"
    fig.savefig(bars_png, dpi=120)
    plt.close(fig)
    return [loss_png, bars_png]


def _legend(ax: Any, axes: Any) -> None:
    """``ax``'s legend of every policy drawn on any of ``axes`` (once each)."""
    handles: dict[str, Any] = {}
    for a in axes:
        for handle, name in zip(*a.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, handle)
    ax.legend(list(handles.values()), list(handles), fontsize="small", framealpha=0.9)


def _finish(records: list[dict[str, Any]], args: argparse.Namespace, argv: list[str],
            header: list[str]) -> None:
    text = table(records, [h.removeprefix("# ") for h in header])
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.plot:
        for path in plot(records, args.plot):
            progress(f"transformer: wrote {path}")


def main(args: argparse.Namespace, argv: list[str]) -> int:
    if args.report:
        records = []
        for path in args.report:
            with open(path) as f:
                records += json.load(f)
        _finish(records, args, argv, [f"# transformer study: {len(records)} runs from "
                                      f"{', '.join(args.report)}"])
        return 0
    import torch

    import mpicomp
    from mpicomp.backend.host import HOST

    from . import stdlib_text
    from .step_clock import StepClock

    layouts = [v.strip() for v in args.layouts.split(",") if v.strip()]
    policies = [v.strip() for v in args.policies.split(",") if v.strip()]
    for v in layouts:
        if v not in LAYOUTS:
            raise SystemExit(f"--layouts: unknown layout {v!r} (known: {', '.join(LAYOUTS)})")
    for v in policies:
        policy_settings(v)
    if not 0 <= args.skip < args.steps:
        raise SystemExit(f"--skip must be in [0, --steps), got {args.skip} (steps {args.steps})")
    for flag in ("eval_every", "eval_seqs", "val_kib", "seeds", "threads"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device cuda: this PyTorch ({torch.__version__}) sees no CUDA "
                         "device")
    world = mpicomp.Comm(mpicomp.COMM_WORLD)
    if world.Get_size() != 4:
        raise SystemExit(f"the transformer study runs on 4 ranks, got {world.Get_size()}")
    if args.global_batch % 4 or (args.global_batch // 2) % args.micro_batches \
            or args.global_batch % args.micro_batches:
        raise SystemExit("--global-batch must be a multiple of 4 and, per pipeline replica, "
                         f"of --micro-batches: got {args.global_batch} and "
                         f"{args.micro_batches}")
    torch.set_num_threads(args.threads)
    train, val, about = stdlib_text.corpus(int(args.train_mib * (1 << 20)), 256 << 10)
    clock = StepClock()
    clock.wrap(HOST, "roundtrip", "codec")  # error feedback's round trips
    records = []
    for layout in layouts:
        for seed in range(args.seed, args.seed + args.seeds):
            for policy in policies:
                if not runs_in(layout, policy):
                    continue
                if world.Get_rank() == 0:
                    progress(f"transformer: {layout} {policy} seed {seed} ...")
                records.append(run(world, layout, policy, argparse.Namespace(
                    **{**vars(args), "seed": seed}), {"train": train, "val": val}, clock))
            if world.Get_rank() == 0 and args.json:
                with open(args.json, "w") as f:  # after every run: a long job keeps its runs
                    json.dump(records, f, indent=1)
    if world.Get_rank() == 0:
        r = records[0]
        header = [f"# transformer study: GPT {args.layers} blocks, d {args.d}, {args.heads} "
                  f"heads, context {args.context}, {r['parameters']:,} parameters; "
                  f"{args.global_batch} sequences per step, {args.steps} Adam steps "
                  f"(lr {args.lr:g}, betas 0.9/{args.beta2:g}, {args.warmup} warm-up, "
                  f"cosine to 10%), seed {args.seed}",
                  f"# data: {about['files']} standard-library sources, "
                  f"{about['train_bytes']:,} training bytes, {about['val_bytes']:,} held out",
                  f"# network: {args.label or 'as launched'}; times: mean over ranks of "
                  f"steps {args.skip + 1}-{args.steps}",
                  *machine_lines(), f"# command: {command_line(argv)}"]
        _finish(records, args, argv, header)
    return 0 if all(r["identical"] for r in records) else 1
