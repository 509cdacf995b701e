"""``python -m mpicomp``: run an unchanged program with ``MPI.COMM_WORLD`` compressing.

::

    mpiexec -n 4 python -m mpicomp [options] prog.py [args]
    mpiexec -n 4 python -m mpicomp [options] -m module [args]
    mpiexec -n 4 python -m mpicomp [options] -c "command" [args]

Before the program starts, ``mpi4py.MPI.COMM_WORLD`` is replaced by
``mpicomp.COMM_WORLD`` (so ``from mpi4py import MPI; MPI.COMM_WORLD`` in the
program compresses), the options become the ``MPICOMP_*`` settings of the
process (so communicators the program makes with ``mpicomp.Comm`` follow
them too), and the program sees ``sys.argv``, ``sys.path[0]`` and
``__main__`` as ``python prog.py`` (``-m``, ``-c``) would give them. An
uncaught exception, or a non-zero ``sys.exit`` on any rank, ends the whole
job (as ``python -m mpi4py`` does; with ``MPICOMP_ABORT_ON_ERROR=0`` only that
rank). With ``--stats``, rank 0 prints the job-wide summary
(:mod:`mpicomp.summary`) when every rank's program has returned.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
import types
import zipfile
from collections.abc import Sequence

from mpi4py import MPI

__all__ = ["main", "parse"]

#: option -> the environment variable it sets
SETTINGS = {
    "codec": "MPICOMP_CODEC",
    "rate": "MPICOMP_RATE",
    "threshold": "MPICOMP_THRESHOLD",
    "algorithm": "MPICOMP_ALGORITHM",
    "tolerance": "MPICOMP_TOLERANCE",
}

USAGE = ("python -m mpicomp [options] (prog.py | -m module | -c command) [args ...]\n"
         "       python -m mpicomp warmup [--help]\n"
         "       mpiexec -n N python -m mpicomp calibrate [--force]")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m mpicomp", usage=USAGE,
        description="Run an unchanged MPI program with mpi4py's COMM_WORLD replaced by "
                    "mpicomp's (docs/usage.md).")
    ap.add_argument("--codec", help="MPICOMP_CODEC: auto (default), none, bitplane, zfp, cast, "
                                    "or a JSON codec config")
    ap.add_argument("--rate", help="MPICOMP_RATE: bits per value")
    ap.add_argument("--threshold", help="MPICOMP_THRESHOLD: smallest buffer compressed "
                                        "(bytes, K/M/G suffixes)")
    ap.add_argument("--algorithm", help="MPICOMP_ALGORITHM: the compressed allreduce's algorithm")
    ap.add_argument("--tolerance", help="MPICOMP_TOLERANCE: the largest error of a collective "
                    "(1e-3 absolute, rel:1e-3 relative to the largest input magnitude)")
    ap.add_argument("--debug", action="store_true", help="MPICOMP_DEBUG=1: one line per call")
    ap.add_argument("--stats", action="store_true",
                    help="rank 0 prints a job-wide summary per method at exit")
    return ap


class Target:
    """What to run: ``kind`` is "path", "module" or "command"; ``args`` its arguments."""

    def __init__(self, kind: str, what: str, args: list[str]) -> None:
        self.kind, self.what, self.args = kind, what, args


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, Target]:
    """Split ``argv`` into mpicomp's options and the program with its arguments."""
    argv = list(argv)
    ours: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-c"):
            if i + 1 >= len(argv):
                _parser().error(f"argument {a} needs a value")
            target = Target("module" if a == "-m" else "command", argv[i + 1], argv[i + 2:])
            break
        if a == "--":
            if i + 1 >= len(argv):
                _parser().error("no program after --")
            target = Target("path", argv[i + 1], argv[i + 2:])
            break
        if not a.startswith("-"):
            target = Target("path", a, argv[i + 1:])
            break
        ours.append(a)
        if a in ("-h", "--help", "--debug", "--stats") or "=" in a:
            i += 1
        else:
            if i + 1 < len(argv):
                ours.append(argv[i + 1])
            i += 2
    else:
        opts = _parser().parse_args(ours)  # prints help for -h; errors on a bad option
        _parser().error("no program given (prog.py, -m module or -c command)")
    opts = _parser().parse_args(ours)
    return opts, target


def _apply(opts: argparse.Namespace) -> None:
    """The options as the process's MPICOMP_* settings, checked as the environment is."""
    for name, var in SETTINGS.items():
        value = getattr(opts, name)
        if value is not None:
            os.environ[var] = value
    if opts.debug:
        os.environ["MPICOMP_DEBUG"] = "1"
    from .policy import environment_policy

    environment_policy()  # a bad value: the same ValueError on every rank, before the program


def _run(target: Target) -> None:
    if target.kind == "path":
        sys.argv[:] = [target.what, *target.args]
        if os.path.isfile(target.what) and not zipfile.is_zipfile(target.what):
            sys.path[0] = os.path.dirname(os.path.realpath(target.what))
        else:
            del sys.path[0]  # run_path puts a directory or zip archive there itself
        runpy.run_path(target.what, run_name="__main__")
    elif target.kind == "module":
        sys.argv[:] = [target.what, *target.args]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        runpy.run_module(target.what, run_name="__main__", alter_sys=True)
    else:
        sys.argv[:] = ["-c", *target.args]
        sys.path[0] = ""
        main_module = sys.modules["__main__"]
        module = sys.modules["__main__"] = types.ModuleType("__main__")
        module.__dict__["__builtins__"] = __builtins__
        code = compile(target.what, "<string>", "exec")
        try:
            exec(code, module.__dict__)  # noqa: S102 - running the user's -c command is the point
        finally:
            sys.modules["__main__"] = main_module


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback as ``python prog.py`` prints it: without this module's and runpy's frames."""
    tb = exc.__traceback__
    skip = (__file__, runpy.__file__)
    while tb is not None and (tb.tb_frame.f_code.co_filename in skip
                              or tb.tb_frame.f_code.co_filename == "<frozen runpy>"):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _abort(status: int, why: str) -> None:
    """End the job (every rank, as mpicomp's fail-fast does unless it is turned off), or
    this process in a one-rank job."""
    from . import failfast

    if MPI.COMM_WORLD.Get_size() > 1 and failfast.enabled():
        failfast.abort_job(why, status)
    sys.exit(status)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "warmup":
        from .warmup import main as warmup_main

        warmup_main(args[1:])
        return
    if args and args[0] == "calibrate":
        calibrate(args[1:])
        return
    opts, target = parse(args)
    _apply(opts)

    import mpicomp

    from .comm import reread_environment

    reread_environment(mpicomp.COMM_WORLD)  # the settings just applied
    world = MPI.COMM_WORLD
    MPI.COMM_WORLD = mpicomp.COMM_WORLD
    try:
        _run(target)
    except SystemExit as stop:
        code = stop.code
        if code not in (None, 0):
            if not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
            _abort(code, f"sys.exit({stop.code!r}) on rank {world.Get_rank()}")
    except BaseException as exc:  # noqa: BLE001 - any escape ends the job, as mpi4py's runner
        _print_user_traceback(exc)
        _abort(1, f"an uncaught exception on rank {world.Get_rank()}")
    finally:
        MPI.COMM_WORLD = world
    if opts.stats:
        from .summary import job_summary

        if MPI.Is_finalized():
            print("mpicomp --stats: the program finalized MPI; no summary", file=sys.stderr)
            return
        text = job_summary(world)
        if text is not None:
            print(text, flush=True)


def calibrate(argv: list[str]) -> None:
    """``mpiexec -n N python -m mpicomp calibrate [--force]``: measure this layout's
    calibration (or find it in the cache, fresh) and save it where later jobs look."""
    import time

    import mpicomp

    from .calibration_file import ENV, file_for

    ap = argparse.ArgumentParser(prog="python -m mpicomp calibrate",
                                 description=calibrate.__doc__.split("\n\n")[0])
    ap.add_argument("--force", action="store_true", help="measure even if a fresh one is saved")
    ap.add_argument("--quiet", action="store_true", help="print nothing")
    opts = ap.parse_args(argv)
    comm = mpicomp.COMM_WORLD
    start = time.perf_counter()
    cal = comm.calibrate(force=opts.force)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    path, _ = file_for(cal.layout)
    if comm.Get_rank() == 0 and not opts.quiet:
        print(f"# mpicomp calibrate: {cal.layout.describe()}, {cal.source} in {seconds:.2f} s; "
              f"file: {path or 'none (' + ENV + '=off)'}")
