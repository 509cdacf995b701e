#!/usr/bin/env python3
"""heat's test suite through mpicomp under a named codec: no file may hang or raise from
inside mpicomp (issue 80's check; not in CI: it needs heat, its torch and its sources).

    python tests/conformance/heat_suite.py --tests HEAT/tests [--python .venv-heat/bin/python]
        [--ranks 2] [--timeout 900] [--codec bitplane --rate 16.25 --threshold 0]
        [--plain] [--only PATTERN] [--markdown FILE]

``HEAT/tests`` is the ``tests`` folder of heat's source at the tag of the
installed heat (heat's wheel and sdist leave them out):
``git clone --depth 1 --branch v1.8.0 https://github.com/helmholtz-analytics/heat``.
``make test-heat`` makes the venv (``.venv-heat``: heat 1.8.0, torch 2.9.1 and
torchvision 0.24.1, the newest pair heat 1.8.0 accepts, mpicomp editable) and runs this.

Each test file runs as ``mpiexec -n RANKS python -m mpicomp --codec ... -m pytest FILE``
(``MPI.COMM_WORLD`` swapped before heat imports it) and, with ``--plain``, once more
without mpicomp. A file's verdict: ``passed``; ``failed`` (tests fail, no traceback
through mpicomp: heat's own comparisons of lossy results, or failures plain MPI has too);
``mpicomp raised`` (a failing test's traceback passes through mpicomp's code); ``hung``
(killed at the timeout). Exit status 1 when any file hung or raised inside mpicomp.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^(?:=+ )?(\d+ (?:passed|failed|errors?|skipped|deselected)\b.*?) "
                     r"in [0-9.]+s", re.MULTILINE)
#: the exception a failing test raised (pytest's ``E   AssertionError: ...`` lines)
ERROR = re.compile(r"^E\s+(\w+(?:Error|Exception|Exit))\b", re.MULTILINE)
#: a traceback line of pytest's --tb=short inside mpicomp's package (not tests, not heat)
INSIDE = re.compile(r"(^|/)mpicomp/(?!tests/)[\w/]+\.py:\d+: in ")


def run_file(python: str, path: Path, ranks: int, timeout: float,
             runner: list[str]) -> tuple[str, str, float]:
    """(verdict, pytest's summary line, seconds) of one file."""
    mpiexec = str(Path(python).parent / "mpiexec")
    cmd = [mpiexec, "-n", str(ranks), python, *runner, "-m", "pytest", "-q", "--tb=short",
           "-p", "no:cacheprovider", str(path)]
    env = dict(os.environ, MPIEXEC_TIMEOUT=str(int(timeout)), OMP_NUM_THREADS="1",
               MPICOMP_ABORT_ON_ERROR="1")
    t0 = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30,
                             env=env, cwd=path.parent).stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return "hung", "", time.monotonic() - t0
    seconds = time.monotonic() - t0
    found = SUMMARY.findall(out)
    summary = found[-1] if found else ""
    if not found and seconds >= timeout:
        return "hung", "", seconds
    if any(INSIDE.search(line) for line in out.splitlines()):
        return "mpicomp raised", summary, seconds
    if not found:
        return "no summary", out.strip().splitlines()[-1][:120] if out.strip() else "", seconds
    if "failed" in summary or "error" in summary:
        kinds = sorted(set(ERROR.findall(out)))
        return "failed", f"{summary} ({', '.join(kinds)})", seconds
    return "passed", summary, seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", required=True, type=Path, help="heat's tests folder")
    ap.add_argument("--python", default=str(ROOT / ".venv-heat" / "bin" / "python"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a file may take")
    ap.add_argument("--codec", default="bitplane")
    ap.add_argument("--rate", default="16.25")
    ap.add_argument("--threshold", default="0")
    ap.add_argument("--plain", action="store_true", help="also run each file without mpicomp")
    ap.add_argument("--only", default="", help="run the files whose path contains this")
    ap.add_argument("--markdown", type=Path, help="write the table here too")
    args = ap.parse_args()
    files = sorted(p for p in args.tests.rglob("test_*.py") if args.only in str(p))
    runner = ["-m", "mpicomp", "--codec", args.codec, "--rate", args.rate,
              "--threshold", args.threshold]
    rows = [f"| file | through mpicomp ({args.codec} {args.rate}, threshold {args.threshold}, "
            f"{args.ranks} ranks) | s |" + (" plain MPI |" if args.plain else ""),
            "|---|---|---|" + ("---|" if args.plain else "")]
    bad = 0
    for path in files:
        verdict, summary, seconds = run_file(args.python, path, args.ranks, args.timeout,
                                             runner)
        bad += verdict in ("hung", "mpicomp raised")
        row = f"| {path.relative_to(args.tests)} | {verdict}: {summary} | {seconds:.0f} |"
        if args.plain:
            pv, ps, _ = run_file(args.python, path, args.ranks, args.timeout, [])
            row += f" {pv}: {ps} |"
        print(row, flush=True)
        rows.append(row)
    print(f"{len(files)} files, {bad} hung or raised inside mpicomp")
    if args.markdown:
        args.markdown.write_text("\n".join(rows) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
