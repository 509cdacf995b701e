#!/usr/bin/env python3
"""Run the test suite serially and under ``mpiexec -n 2, 3, 4``; print one honest summary.

Stages (``--stages``, default ``serial,2,3,4,sim2,mpi4py``; ``sim3`` on request):

* ``serial``: ``python -m pytest --with-mpi tests`` (MPI singletons); every
  test runs. On a machine of 2 cores or more, two pytest processes run side
  by side (``--serial-jobs``), each on a share of the test files
  (``serial.0``, ``serial.1``: split by ``SERIAL_FILE_S``, the files' measured
  times); one process where test paths, ``-k`` or ``-m`` are given.
* ``N``: ``mpiexec -n N python -m pytest --with-mpi -m mpi tests``; only the
  tests marked ``@pytest.mark.mpi`` run, on every rank.
* ``simN``: like ``N`` with ``NUMBA_ENABLE_CUDASIM=1`` (Numba's CUDA
  simulator) and only the tests marked ``device``: device buffers through
  the communicator, on a machine without a GPU. Cases marked ``exhaustive``
  (beyond a set that holds every pair of a test's parameters) only with
  ``--sim-all`` (``make test-device``).
* ``mpi4py``: mpi4py's own test suite (downloaded from PyPI for the
  installed version) on 2 and 3 ranks (``--mpi4py-ranks``) with ``MPI.COMM_WORLD`` replaced by
  ``mpicomp.COMM_WORLD``, under three policies
  (``tests/conformance/mpi4py_suite.py``); each test that passes with plain
  MPI and not with mpicomp counts as a failure.

Every rank writes a JSON report (see ``tests/conftest.py``). The run fails
(exit status 1) when any rank of any stage has a failed test or an error,
when a rank never reports or does not finish (crash, hang), when a stage
times out, when mpiexec or pytest exits non-zero without a test failure to
explain it, or when a stage runs no tests at all. Ranks other than 0 write
their output to a log (printed when that rank fails) and run with ``-q``.

The last line printed is ``total: P passed, F failed, S skipped`` where a
test counts once per rank that ran it; ``failed`` includes errors and each
stage/rank problem above; ``skipped`` includes xfailed, ``passed`` xpassed.

Unknown options are passed to pytest (``-k EXPR``, ``-x``, ``-o timeout=30``,
test paths, ...). ``-m EXPR`` selects in the serial stage and is combined as
``mpi and (EXPR)`` in the MPI stages.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import launcher  # tests/launcher.py: the venv's mpiexec, and what Open MPI's needs

ROOT = Path(__file__).resolve().parent.parent
TESTS = "tests"
RANK_EXEC = "--_rank-exec"  # internal: run by mpiexec on each rank
BACKSTOP_S = 30  # subprocess timeout beyond MPIEXEC_TIMEOUT
LOG_TAIL_LINES = 40

# pytest exit codes
PYTEST_EXIT = {0: "ok", 1: "tests failed", 2: "interrupted", 3: "internal error",
               4: "usage error", 5: "no tests collected"}


# -- per-rank launcher (runs under mpiexec) ---------------------------------
def _env_rank() -> int | None:
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def rank_exec(argv: list[str]) -> None:
    """``--_rank-exec LOGDIR STAGE -- PYTEST_ARGS``: exec pytest; ranks > 0 log to a file."""
    logdir, stage, sep, *pytest_args = argv
    assert sep == "--", argv
    rank = _env_rank()
    if rank not in (None, 0):
        log = os.open(os.path.join(logdir, f"{stage}-rank{rank}.log"),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        pytest_args = ["-q", "-p", "no:cacheprovider", *pytest_args]
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *pytest_args])


# -- the runner -------------------------------------------------------------
def mpi_library() -> str:
    """The first line of ``MPI.Get_library_version()`` of the MPI mpi4py loads here."""
    code = "from mpi4py import MPI; print(MPI.Get_library_version().strip().splitlines()[0])"
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    return res.stdout.strip() or f"unknown (mpi4py: {res.stderr.strip()[-200:]})"


def parse_args(argv: list[str]):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Other options and paths are passed to pytest.")
    p.add_argument("--stages", default="serial,2,3,4,sim2,mpi4py",
                   help="comma-separated stages: 'serial', rank counts, simN, mpi4py "
                        "(default %(default)s; sim3 on request: the simulator's 3-rank "
                        "stage took 720 s on a 2-core Zen 3 VM)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds per stage before it is killed and counted failed "
                        "(default %(default)s: the serial stage, which compiles every "
                        "kernel from a clean clone, took over 1200 s on a 2-core Zen 3 VM)")
    p.add_argument("--serial-jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="pytest processes the serial stage runs side by side, each on a share "
                        "of the test files (default %(default)s: the cores, at most 2); one "
                        "where test paths, -k or -m are given")
    p.add_argument("--mpi4py-ranks", default="2,3",
                   help="rank counts of the mpi4py stage (default %(default)s)")
    p.add_argument("--sim-all", action="store_true",
                   help="simulator stages run the cases marked 'exhaustive' too (make "
                        "test-device); without it they are left out")
    p.add_argument("-k", dest="keyword", help="pytest -k expression (all stages)")
    p.add_argument("-m", dest="markexpr",
                   help="pytest -m expression (serial); MPI stages use 'mpi and (EXPR)'")
    p.add_argument("--allow-empty", action="store_true",
                   help="do not count a stage that runs no tests as a failure")
    p.add_argument("--report-dir", help="keep the per-rank JSON reports and logs here")
    args, extra = p.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]
    stages = []
    for s in args.stages.split(","):
        s = s.strip()
        if s in ("serial", "mpi4py"):
            stages.append(s)
        elif s.isdigit() and int(s) >= 1:
            stages.append(str(int(s)))
        elif s.startswith("sim") and s[3:].isdigit() and int(s[3:]) >= 1:
            stages.append(f"sim{int(s[3:])}")
        elif s:
            p.error(f"bad stage {s!r}: use 'serial', a number of ranks, simN or mpi4py")
    if not stages:
        p.error("no stages selected")
    return args, extra, stages


def user_gave_paths(extra: list[str]) -> bool:
    """True when the pass-through args name test files/dirs (then 'tests' is not added)."""
    for a in extra:
        if not a.startswith("-") and (ROOT / a.split("::")[0]).exists():
            return True
    return False


def pytest_args_for(stage: str, args, extra: list[str], files: list[str] | None = None
                    ) -> list[str]:
    out = ["--with-mpi"]
    if stage.startswith("serial"):
        if args.markexpr:
            out += ["-m", args.markexpr]
    elif stage.startswith("sim"):
        sel = "mpi and device" if args.sim_all else "mpi and device and not exhaustive"
        out += ["-m", f"{sel} and ({args.markexpr})" if args.markexpr else sel]
    else:
        out += ["-m", f"mpi and ({args.markexpr})" if args.markexpr else "mpi"]
    if args.keyword:
        out += ["-k", args.keyword]
    out += extra
    if files:
        out += files
    elif not user_gave_paths(extra):
        out.append(TESTS)
    return out


# The serial stage's files that take longest: seconds in a clean clone's make test on the
# 2-core Zen 3 VM, two jobs side by side (2026-12-02; the reports' "file_seconds", kept with
# --report-dir); any other file counts DEFAULT_FILE_S. Only the split between the jobs
# depends on them.
SERIAL_FILE_S = {
    "test_cuda_sim.py": 276, "test_coalescing.py": 192, "test_bench.py": 177,
    "test_errbound.py": 150, "test_warmup.py": 149, "test_simulator_host_codecs.py": 143,
    "test_cuda_compile.py": 127, "test_bench_osu.py": 95, "test_bitplane.py": 94,
    "test_docs_examples.py": 78, "test_errbound_shaped.py": 63, "test_bench_comm.py": 61,
    "test_bench_headline.py": 60, "test_load.py": 45, "test_codec_contract.py": 23,
    "test_zfp.py": 20, "test_training.py": 18, "test_model.py": 18, "test_failfast.py": 17,
    "test_runner.py": 14, "test_warp_layer.py": 11, "test_import.py": 11,
    "test_bench_first_call.py": 10, "test_netcluster.py": 8, "test_comm_collectives.py": 6,
}
DEFAULT_FILE_S = 2


def serial_shards(jobs: int) -> list[list[str]]:
    """The test files cut into ``jobs`` lists of about equal time (longest first, each to
    the list with the least so far)."""
    files = sorted(p.name for p in (ROOT / TESTS).glob("test_*.py"))
    files.sort(key=lambda f: -SERIAL_FILE_S.get(f, DEFAULT_FILE_S))
    shards: list[list[str]] = [[] for _ in range(jobs)]
    loads = [0.0] * jobs
    for f in files:
        k = loads.index(min(loads))
        shards[k].append(f"{TESTS}/{f}")
        loads[k] += SERIAL_FILE_S.get(f, DEFAULT_FILE_S)
    return [sorted(s) for s in shards if s]


def kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def stage_command(stage: str, args, extra, report_dir: str, run_id: str, mpiexec: str | None,
                  files: list[str] | None = None):
    """(command, environment, seconds before the runner kills it) of one stage (or one
    job of the serial stage: ``serial.K`` with its ``files``)."""
    env = dict(os.environ)
    env.update({"MPICOMP_TEST_REPORT": report_dir, "MPICOMP_TEST_STAGE": stage,
                "MPICOMP_TEST_RUN_ID": run_id, "PYTHONFAULTHANDLER": "1"})
    # the run's own calibration cache: no user's saved calibration decides a test's path
    # (a job of the serial stage one of its own: the jobs run side by side)
    cache = "calibration-cache" + (f"-{stage}" if "." in stage else "")
    env.setdefault("MPICOMP_CACHE_DIR", os.path.join(report_dir, cache))
    ptargs = pytest_args_for(stage, args, extra, files)
    timeout = args.timeout
    if stage.startswith("serial"):
        return [sys.executable, "-m", "pytest", *ptargs], env, timeout
    env["MPIEXEC_TIMEOUT"] = str(max(1, int(round(timeout))))
    if stage.startswith("sim"):
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    # several ranks share the cores: idle OpenMP workers (Numba's
    # threading layer) must sleep, not spin, or the ranks starve each other
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    cmd = [mpiexec, "-n", stage.removeprefix("sim"), sys.executable,
           str(Path(__file__).resolve()), RANK_EXEC, report_dir, stage, "--", *ptargs]
    return cmd, env, timeout + BACKSTOP_S


def wait_stage(proc: subprocess.Popen, backstop: float, timeout: float, t0: float):
    """(returncode or None, timed_out, elapsed) of a started stage."""
    timed_out = False
    try:
        rc = proc.wait(timeout=max(1.0, backstop - (time.monotonic() - t0)))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        rc = proc.returncode
    except KeyboardInterrupt:
        kill_group(proc)
        raise
    elapsed = time.monotonic() - t0
    if elapsed >= timeout - 0.5:
        timed_out = True  # MPIEXEC_TIMEOUT fired (or the backstop did)
    return rc, timed_out, elapsed


def run_stage(stage: str, args, extra, report_dir: str, run_id: str, mpiexec: str | None):
    """Run one stage; return (returncode or None, timed_out, elapsed, command)."""
    cmd, env, backstop = stage_command(stage, args, extra, report_dir, run_id, mpiexec)
    print(f"\n===== stage {stage}: {shlex.join(cmd)}", flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    return (*wait_stage(proc, backstop, args.timeout, t0), cmd)


def run_serial_jobs(shards: list[list[str]], args, extra, report_dir: str, run_id: str):
    """The serial stage as one pytest process per list of files, side by side (``serial.0``,
    ``serial.1``, ...): the first prints here, the others into a log each, printed when
    they end. Returns [(job, returncode, timed_out, elapsed)]."""
    started = []
    t0 = time.monotonic()
    for k, files in enumerate(shards):
        stage = f"serial.{k}"
        cmd, env, backstop = stage_command(stage, args, extra, report_dir, run_id, None, files)
        print(f"\n===== stage {stage} ({len(files)} files, side by side with "
              f"{len(shards) - 1} more): {shlex.join(cmd)}", flush=True)
        log = None
        if k > 0:
            log = open(Path(report_dir) / f"{stage}-rank0.log", "w")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                                stdout=log, stderr=subprocess.STDOUT if log else None)
        started.append((stage, proc, backstop, log))
    ended: dict[str, float] = {}  # job: its elapsed seconds, noted as it ends
    try:
        while len(ended) < len(started) and time.monotonic() - t0 < started[0][2]:
            for stage, proc, _, _ in started:
                if stage not in ended and proc.poll() is not None:
                    ended[stage] = time.monotonic() - t0
            time.sleep(0.5)
    except KeyboardInterrupt:  # (the jobs run in sessions of their own: Ctrl-C misses them)
        for _, proc, _, _ in started:
            kill_group(proc)
        raise
    results = []
    for stage, proc, backstop, log in started:
        rc, timed_out, elapsed = wait_stage(proc, backstop, args.timeout, t0)
        elapsed = ended.get(stage, elapsed)
        if log is not None:
            log.close()
            print(f"\n===== output of stage {stage}", flush=True)
            print(Path(log.name).read_text(errors="replace"), flush=True)
        results.append((stage, rc, timed_out, elapsed))
    return results


def log_tail(path: Path) -> list[str]:
    """The last lines of a rank's log, without pytest-mpi's long "MPI Information" section."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    kept, skipping = [], False
    for line in lines:
        if line.startswith("=") and "MPI Information" in line:
            skipping = True
            continue
        if skipping and line.startswith("="):
            skipping = False
        if not skipping:
            kept.append(line)
    return kept[-LOG_TAIL_LINES:]


class Totals:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.problems: list[str] = []  # lines naming every failure

    def problem(self, text: str) -> None:
        self.failed += 1
        self.problems.append(text)


def judge_stage(stage, rc, timed_out, elapsed, report_dir, run_id, args, totals: Totals):
    nranks = 1 if stage.startswith("serial") else int(stage.removeprefix("sim"))
    label = f"stage {stage}"
    lines = []
    stage_tests = 0
    stage_failed_before = totals.failed
    for r in range(nranks):
        who = f"{label} rank {r}"
        path = Path(report_dir) / f"{stage}-rank{r}.json"
        logpath = Path(report_dir) / f"{stage}-rank{r}.log"
        try:
            rep = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            why = "no report (crashed before pytest started, or never launched)"
            if path.exists():
                why = f"unreadable report ({exc})"
            lines.append(f"{who}: {why}")
            totals.problem(f"[{who}] {why}")
            tail = log_tail(logpath)
            if tail:
                lines.append(f"--- last lines of {logpath.name}:")
                lines += ["    " + t for t in tail]
            continue
        counts = {k: int(rep.get(k, 0)) for k in
                  ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")}
        ran = sum(counts.values())
        stage_tests += ran
        totals.passed += counts["passed"] + counts["xpassed"]
        totals.skipped += counts["skipped"] + counts["xfailed"]
        totals.failed += counts["failed"] + counts["errors"]
        status = rep.get("exitstatus")
        desc = (f"{counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, "
                f"{counts['skipped']} skipped")
        if counts["xfailed"] or counts["xpassed"]:
            desc += f", {counts['xfailed']} xfailed, {counts['xpassed']} xpassed"
        if rep.get("finished"):
            desc += f" (pytest exit {status}: {PYTEST_EXIT.get(status, '?')})"
        else:
            desc += " (DID NOT FINISH)"
        lines.append(f"{who}: {desc}")
        for f in rep.get("failures", []):
            kind = "ERROR" if f.get("kind") == "errors" else "FAILED"
            msg = f" - {f['message']}" if f.get("message") else ""
            totals.problems.append(f"{kind} [{who}] {f['nodeid']}{msg}")
        bad_rank = counts["failed"] + counts["errors"] > 0
        # integrity checks: this report must be from this run and this world
        if rep.get("run_id") != run_id:
            totals.problem(f"[{who}] report is not from this run (run_id {rep.get('run_id')!r})")
            bad_rank = True
        if rep.get("size") != nranks:
            totals.problem(f"[{who}] MPI world size is {rep.get('size')}, expected {nranks} "
                           f"(mpiexec and mpi4py from different MPIs?)")
            bad_rank = True
        if not rep.get("finished"):
            current = rep.get("current")
            where = f" while running {current}" if current else ""
            how = "killed by the stage timeout" if timed_out else "crashed or was killed"
            totals.problem(f"[{who}] did not finish: {how}{where}")
            bad_rank = True
        elif status == 5 and not args.allow_empty:
            totals.problem(f"[{who}] no tests collected (pytest exit 5)")
            bad_rank = True
        elif status not in (0, 5) and counts["failed"] + counts["errors"] == 0:
            totals.problem(f"[{who}] pytest exit {status} ({PYTEST_EXIT.get(status, '?')}) "
                           f"with no failure recorded")
            bad_rank = True
        if bad_rank:
            tail = log_tail(logpath)
            if tail:
                lines.append(f"--- last lines of {logpath.name}:")
                lines += ["    " + t for t in tail]
    if timed_out:
        lines.append(f"{label}: TIMED OUT after {elapsed:.0f} s (limit {args.timeout:g} s)")
        if totals.failed == stage_failed_before:
            totals.problem(f"[{label}] timed out after {elapsed:.0f} s")
    if stage_tests == 0 and not args.allow_empty and totals.failed == stage_failed_before:
        totals.problem(f"[{label}] ran no tests")
    if rc not in (0, None) and totals.failed == stage_failed_before:
        totals.problem(f"[{label}] exit status {rc} although every rank reported success")
    if rc is None and totals.failed == stage_failed_before:
        totals.problem(f"[{label}] could not be stopped cleanly")
    lines.append(f"{label}: exit status {rc}, {elapsed:.1f} s")
    return lines


def run_conformance(args, report_dir: str, totals) -> list[str]:
    """The ``mpi4py`` stage: tests/conformance/mpi4py_suite.py on ``--mpi4py-ranks``."""
    out = os.path.join(report_dir, "mpi4py-conformance.json")
    cmd = [sys.executable, str(ROOT / "tests" / "conformance" / "mpi4py_suite.py"),
           "--ranks", args.mpi4py_ranks, "--json", out]
    print(f"\n===== stage mpi4py: {shlex.join(cmd)}", flush=True)
    started = time.perf_counter()
    try:
        rc = subprocess.run(cmd, cwd=ROOT, timeout=args.timeout * 2).returncode
    except subprocess.TimeoutExpired:
        totals.problem(f"[stage mpi4py] timed out after {args.timeout * 2:.0f} s")
        return ["stage mpi4py: timed out"]
    elapsed = time.perf_counter() - started
    if not os.path.exists(out):
        totals.problem(f"[stage mpi4py] wrote no results (exit status {rc})")
        return [f"stage mpi4py: exit status {rc}, no results, {elapsed:.1f} s"]
    result = json.loads(Path(out).read_text())
    problems = result["problems"]
    totals.passed += result["checked"] - len(problems)
    for p in problems:
        totals.problem("[stage mpi4py] " + p.splitlines()[0])
    if rc != 0 and not problems:
        totals.problem(f"[stage mpi4py] exit status {rc} without a reported problem")
    return [f"stage mpi4py: {result['checked'] - len(problems)} of {result['checked']} "
            f"mpi4py tests as on plain MPI ({len(problems)} problems), exit status {rc}, "
            f"{elapsed:.1f} s"]


def main(argv: list[str]) -> int:
    if argv[:1] == [RANK_EXEC]:
        rank_exec(argv[1:])  # does not return
    args, extra, stages = parse_args(argv)
    mpiexec = launcher.find_mpiexec()
    # Open MPI's mpiexec: allow root and more ranks than cores, for every mpiexec started
    # from here on (the stages, tests that start their own jobs, the conformance stage)
    added = launcher.apply(os.environ, mpiexec)
    library = mpi_library()
    print(f"MPI: {library}; mpiexec: {mpiexec} ({launcher.flavour(mpiexec)})"
          + (f"; set {' '.join(f'{k}={v}' for k, v in added.items())}" if added else ""),
          flush=True)
    run_id = uuid.uuid4().hex
    report_dir = args.report_dir or tempfile.mkdtemp(prefix="mpicomp-tests-")
    os.makedirs(report_dir, exist_ok=True)
    totals = Totals()
    summary_lines: list[str] = []
    try:
        for stage in stages:
            if stage == "mpi4py":
                summary_lines += run_conformance(args, report_dir, totals)
                continue
            if stage != "serial" and mpiexec is None:
                summary_lines.append(f"stage {stage}: not run: no mpiexec found next to "
                                     f"{sys.executable} or on PATH")
                totals.problem(f"[stage {stage}] no mpiexec")
                continue
            if stage == "serial" and args.serial_jobs > 1 and not (
                    args.keyword or args.markexpr or user_gave_paths(extra)):
                for job, rc, timed_out, elapsed in run_serial_jobs(
                        serial_shards(args.serial_jobs), args, extra, report_dir, run_id):
                    summary_lines += judge_stage(job, rc, timed_out, elapsed, report_dir,
                                                 run_id, args, totals)
                continue
            rc, timed_out, elapsed, _ = run_stage(stage, args, extra, report_dir, run_id, mpiexec)
            summary_lines += judge_stage(stage, rc, timed_out, elapsed, report_dir, run_id, args,
                                         totals)
    except KeyboardInterrupt:
        totals.problem("interrupted by the user")
    finally:
        if not args.report_dir:
            shutil.rmtree(report_dir, ignore_errors=True)

    print("\n===== mpicomp test summary (all stages, all ranks)", flush=True)
    print(f"MPI: {library}")
    for line in summary_lines:
        print(line)
    if totals.problems:
        print("\nfailures:")
        for line in totals.problems:
            print("  " + line)
    print("RESULT: " + ("FAILED" if totals.failed else "OK"))
    print(f"total: {totals.passed} passed, {totals.failed} failed, {totals.skipped} skipped",
          flush=True)
    return 1 if totals.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
