#!/usr/bin/env python3
"""mpi4py's own test suite, run with ``MPI.COMM_WORLD`` replaced by ``mpicomp.COMM_WORLD``.

Downloads the source distribution of the installed mpi4py version from PyPI
(``pip download``, cached under ``.cache/`` in the repository), runs its
test modules that exercise the methods mpicomp overrides under
``mpiexec -n N`` with plain ``MPI.COMM_WORLD`` and then with
``mpicomp.COMM_WORLD`` in its place (:mod:`mpi4py_rank`), once per
policy, and compares: every test that passes on plain MPI must pass with
mpicomp, on every rank. Tests that cannot hold for a stated reason are
listed in :data:`EXPECTED` (per policy) and must fail there (a listed test
that passes is reported, so the list stays true).

``python tests/conformance/mpi4py_suite.py [--ranks 2,3] [--policies default,none,bitplane]``
exits 1 on any difference, a crash or a hang (each job has a timeout).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
RANK_SCRIPT = Path(__file__).resolve().parent / "mpi4py_rank.py"

sys.path.insert(0, str(ROOT / "tests"))
import launcher  # noqa: E402  tests/launcher.py: the venv's mpiexec, what Open MPI's needs

#: mpi4py's test modules that call the communicator methods mpicomp overrides
#: (buffer, nonblocking, vector and persistent collectives, point to point,
#: buffer specs, zero-size messages, communicator constructors, pickled objects)
MODULES = (
    "test_cco_buf", "test_cco_nb_buf", "test_cco_vec", "test_cco_nb_vec", "test_cco_pr_buf",
    "test_p2p_buf", "test_p2p_buf_matched", "test_msgspec", "test_msgzero", "test_comm",
    "test_cco_obj", "test_p2p_obj", "test_util_pkl5", "test_subclass",
)

#: policies, as the environment a user would set
POLICIES: dict[str, dict[str, str]] = {
    "default": {},
    "none": {"MPICOMP_CODEC": "none", "MPICOMP_THRESHOLD": "0"},
    "bitplane": {"MPICOMP_CODEC": "bitplane", "MPICOMP_RATE": "16.25", "MPICOMP_THRESHOLD": "0"},
}

_REPLACED = ("replacing the attribute MPI.COMM_WORLD makes pickle find mpicomp's object "
             "under mpi4py's name for its own predefined COMM_WORLD, so pickling "
             "MPI.Intracomm(COMM_WORLD) refuses ('not the same object'); mpicomp.COMM_WORLD "
             "itself pickles to itself (tests/test_conformance.py)")

#: (policy or "*", test id) -> why it cannot pass with mpicomp in place
EXPECTED: dict[tuple[str, str], str] = {
    ("*", "test_comm.TestCommWorld.testPickle"): _REPLACED,
}

JOB_TIMEOUT_S = 900


def fetch_tests(version: str | None = None) -> Path:
    """The ``test/`` folder of mpi4py's sdist for ``version`` (default: the installed one)."""
    if version is None:
        import mpi4py

        version = mpi4py.__version__
    dest = CACHE / f"mpi4py-{version}-test"
    if (dest / "arrayimpl.py").exists():
        return dest
    CACHE.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
               "--no-deps", "--no-binary", ":all:", f"mpi4py=={version}", "-d", tmp]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")
        (sdist,) = Path(tmp).glob("mpi4py-*.tar.gz")
        prefix = f"mpi4py-{version}/test/"
        staging = Path(tmp) / "test"
        staging.mkdir()
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                if member.name.startswith(prefix) and member.isfile():
                    name = member.name[len(prefix):]
                    if "/" in name:
                        continue
                    src = tar.extractfile(member)
                    assert src is not None
                    (staging / name).write_bytes(src.read())
        if not (staging / "arrayimpl.py").exists():
            raise RuntimeError(f"{sdist.name} has no test/arrayimpl.py")
        shutil.move(str(staging), dest)
    return dest


def mpiexec() -> str:
    return launcher.find_mpiexec() or "mpiexec"


def run_job(testdir: Path, ranks: int, world: str, env: dict[str, str],
            modules: tuple[str, ...] = MODULES) -> dict[str, object]:
    """Run the modules on ``ranks`` ranks; per test id the worst outcome over the ranks,
    plus ``_problems``: ranks that never reported, a timeout, a non-zero exit."""
    with tempfile.TemporaryDirectory() as out:
        full_env = dict(os.environ)
        for var in [v for v in full_env if v.startswith("MPICOMP_")]:
            del full_env[var]
        full_env.update(env)
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, str(RANK_SCRIPT), str(testdir), out,
               world, *modules]
        problems: list[str] = []
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            output, _ = proc.communicate()
            problems.append(f"timed out after {JOB_TIMEOUT_S} s (a hang)")
        if proc.returncode not in (0, None) and not problems:
            problems.append(f"mpiexec exited {proc.returncode}")
        worst: dict[str, str] = {}
        texts: dict[str, str] = {}
        order = {"pass": 0, "skip": 1, "fail": 2, "error": 3}
        for r in range(ranks):
            path = Path(out) / f"rank{r}.json"
            if not path.exists():
                problems.append(f"rank {r} wrote no report")
                continue
            report = json.loads(path.read_text())
            for test, outcome in report["outcomes"].items():
                if test not in worst or order[outcome] > order[worst[test]]:
                    worst[test] = outcome
                if test in report["texts"] and test not in texts:
                    texts[test] = f"(rank {r}) " + report["texts"][test]
        return {"outcomes": worst, "texts": texts, "problems": problems,
                "seconds": time.perf_counter() - started,
                "output": output[-6000:] if problems else ""}


def expected_failure(policy: str, test: str) -> str | None:
    return EXPECTED.get((policy, test)) or EXPECTED.get(("*", test))


def compare(plain: dict[str, object], mine: dict[str, object], policy: str) -> list[str]:
    """What breaks with mpicomp: tests passing on plain MPI that do not pass here."""
    errors = [f"mpicomp ({policy}): {p}" for p in mine["problems"]]  # type: ignore[union-attr]
    if plain["problems"]:
        errors += [f"plain MPI: {p}" for p in plain["problems"]]  # type: ignore[union-attr]
    base: dict[str, str] = plain["outcomes"]  # type: ignore[assignment]
    got: dict[str, str] = mine["outcomes"]  # type: ignore[assignment]
    texts: dict[str, str] = mine["texts"]  # type: ignore[assignment]
    for test, outcome in sorted(base.items()):
        if outcome != "pass":
            continue
        why = expected_failure(policy, test)
        now = got.get(test, "missing")
        if why is not None:
            if now == "pass":
                errors.append(f"{test}: listed as unable to pass ({why[:60]}...) but passed")
            continue
        if now != "pass":
            errors.append(f"{test}: {now} with mpicomp ({policy}), passes on plain MPI\n"
                          + texts.get(test, "")[-1500:])
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,3", help="comma-separated rank counts (2,3)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help=f"comma-separated, of {', '.join(POLICIES)}")
    ap.add_argument("--modules", default=",".join(MODULES))
    ap.add_argument("--json", help="write the outcomes here")
    args = ap.parse_args(argv)
    launcher.apply(os.environ)  # Open MPI's mpiexec: root, more ranks than cores
    testdir = fetch_tests()
    modules = tuple(m for m in args.modules.split(",") if m)
    failures: list[str] = []
    summary: dict[str, object] = {}
    checked = 0
    for ranks in [int(n) for n in args.ranks.split(",")]:
        plain = run_job(testdir, ranks, "plain", {}, modules)
        counts = _count(plain)
        print(f"{ranks} ranks, plain MPI: {counts} ({plain['seconds']:.0f} s)", flush=True)
        summary[f"{ranks}/plain"] = counts
        for policy in [p for p in args.policies.split(",") if p]:
            mine = run_job(testdir, ranks, "mpicomp", POLICIES[policy], modules)
            errors = compare(plain, mine, policy)
            checked += sum(v == "pass" for v in plain["outcomes"].values())  # type: ignore[union-attr]
            counts = _count(mine)
            summary[f"{ranks}/{policy}"] = counts
            print(f"{ranks} ranks, mpicomp.COMM_WORLD, policy {policy}: {counts} "
                  f"({mine['seconds']:.0f} s): {'ok' if not errors else 'FAILED'}", flush=True)
            for e in errors:
                print("  " + e.replace("\n", "\n    "), flush=True)
            if mine["problems"]:
                print(mine["output"], flush=True)
            failures += errors
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"jobs": summary, "checked": checked, "problems": failures}, indent=1))
    listed = len(EXPECTED)
    print(f"conformance: {len(failures)} problem(s); {listed} test(s) listed as unable to "
          "pass with COMM_WORLD replaced (see EXPECTED)")
    return 1 if failures else 0


def _count(job: dict[str, object]) -> str:
    outcomes: dict[str, str] = job["outcomes"]  # type: ignore[assignment]
    n = {k: 0 for k in ("pass", "fail", "error", "skip")}
    for v in outcomes.values():
        n[v] += 1
    return ", ".join(f"{v} {k}" for k, v in n.items())


if __name__ == "__main__":
    sys.exit(main())
