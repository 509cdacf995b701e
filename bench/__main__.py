"""``python -m mpicomp.bench SUBCOMMAND [options]``: the benchmarks' command line.

Each subcommand is one module of ``mpicomp.bench``, listed with a one-line
summary in :data:`SUBCOMMANDS` (``python -m mpicomp.bench --help`` prints
them); the ones that compare collectives run under ``mpiexec``.
"""
from __future__ import annotations

import argparse
import sys

from . import (
    accuracy,
    allreduce,
    allreduce_gpu,
    codecs,
    ef_check,
    errbound_ab,
    field_rd,
    first_call,
    headline,
    model_check,
    osu,
    overhead,
    overlap,
    rate_distortion,
    soak,
    train,
    transformer,
)

SUBCOMMANDS = {
    "codecs": (codecs, "codec encode/decode speed and error on one buffer"),
    "accuracy": (accuracy, "bitplane vs zfp 1D/3D PSNR at equal bits per value"),
    "rate-distortion": (rate_distortion, "errbound's bits per value at bitplane's PSNR, and "
                                         "both codecs' speeds"),
    "field-rd": (field_rd, "errbound with shape= on 2-D and 3-D fields (py-pde's Gray-Scott, "
                           "the wave equation) against SZ3 and zfp at SZ3's PSNR, and speeds"),
    "errbound-ab": (errbound_ab, "errbound's kernels at another commit against this tree's, "
                                 "in one process: same bytes, speed ratio"),
    "allreduce": (allreduce, "compressed vs plain MPI Allreduce: time, bytes, error "
                             "(run under mpiexec)"),
    "headline": (headline, "the headline comparison (make bench): compressed vs plain "
                           "Allreduce, Allgather, Alltoall and Bcast in one job, a table and "
                           "a PNG (run under mpiexec)"),
    "overlap": (overlap, "compute/communication overlap of Iallreduce, compressed and plain "
                         "(run under mpiexec)"),
    "overhead": (overhead, "what mpicomp.COMM_WORLD's default adds to calls that go plain: "
                           "tight Allreduce loops against MPI.COMM_WORLD (run under mpiexec)"),
    "allreduce-gpu": (allreduce_gpu, "compressed vs plain Allreduce of CuPy buffers, checked "
                                     "against the exact sum (run under mpiexec, needs a GPU)"),
    **osu.subcommands(),
    "train": (train, "convergence study: data-parallel SGD on digits with compressed, "
                     "error-fed-back gradient reduction (run under mpiexec)"),
    "transformer": (transformer, "transformer study: GPT training in data-, tensor- and "
                                 "pipeline-parallel layouts of 4 ranks, plain, naive and hybrid "
                                 "compression (run under mpiexec -n 4)"),
    "ef-check": (ef_check, "error feedback on a held-out check: replicated and sharded "
                           "reduction of compressed gradients against plain (run under "
                           "mpiexec -n 4)"),
    "soak": (soak, "thousands of mixed compressed operations checked against plain MPI, "
                   "memory and threads watched (run under mpiexec)"),
    "first-call": (first_call, "how long a new job's first compressed Allreduce takes, per "
                               "codec (each in a job of its own; the kernel cache's effect)"),
    "model_check": (model_check, "the performance model's predictions beside measurements, "
                                 "from osu_* --json files"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mpicomp.bench", description="mpicomp benchmarks"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (module, summary) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=summary, description=summary)
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    module, _ = SUBCOMMANDS[args.command]
    return module.main(args, argv)


if __name__ == "__main__":
    sys.exit(main())
