"""Run mpi4py's own test modules on one rank, with ``MPI.COMM_WORLD`` replaced (under mpiexec).

``python mpi4py_rank.py TESTDIR OUTDIR WORLD MODULE [MODULE ...]``: WORLD is
``plain`` (mpi4py's own ``COMM_WORLD``) or ``mpicomp`` (``mpicomp.COMM_WORLD``
put in its place before any test module is imported, as a program that
swaps one import would). Every rank writes ``OUTDIR/rank<r>.json``: the
outcome of each test id (``pass``, ``fail``, ``error``, ``skip``) and the
text of each failure. Run by :mod:`tests.conformance.mpi4py_suite`.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
import unittest


def _import_arrayimpl() -> None:
    """Import mpi4py's ``arrayimpl`` with ``numba.cuda`` hidden.

    ``arrayimpl`` registers Numba device arrays whenever ``numba.cuda``
    imports; without a CUDA driver those tests fail for plain mpi4py too.
    """
    saved = sys.modules.get("numba.cuda", None)
    had = "numba.cuda" in sys.modules
    sys.modules["numba.cuda"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        importlib.import_module("arrayimpl")
    finally:
        if had:
            sys.modules["numba.cuda"] = saved  # type: ignore[assignment]
        else:
            del sys.modules["numba.cuda"]


class _Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcomes: dict[str, str] = {}
        self.texts: dict[str, str] = {}

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's API
        super().startTest(test)
        if os.environ.get("CONFORMANCE_VERBOSE"):
            print(f"[{os.environ.get('PMI_RANK', '?')}] {test.id()}", file=sys.stderr, flush=True)

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        self.outcomes[test.id()] = "pass"

    def addFailure(self, test, err) -> None:  # noqa: N802
        self.outcomes[test.id()] = "fail"
        self.texts[test.id()] = self._exc_info_to_string(err, test)[-4000:]

    def addError(self, test, err) -> None:  # noqa: N802
        self.outcomes[str(getattr(test, "id", lambda: test)())] = "error"
        self.texts[str(getattr(test, "id", lambda: test)())] = \
            self._exc_info_to_string(err, test)[-4000:]

    def addSkip(self, test, reason) -> None:  # noqa: N802
        self.outcomes[test.id()] = "skip"

    def addExpectedFailure(self, test, err) -> None:  # noqa: N802
        self.outcomes[test.id()] = "skip"

    def addUnexpectedSuccess(self, test) -> None:  # noqa: N802
        self.outcomes[test.id()] = "pass"

    def addSubTest(self, test, subtest, err) -> None:  # noqa: N802
        if err is not None:
            kind = "fail" if issubclass(err[0], test.failureException) else "error"
            self.outcomes[test.id()] = kind
            self.texts[test.id()] = (f"{subtest}\n" + self._exc_info_to_string(err, test))[-4000:]


def main(argv: list[str]) -> int:
    testdir, outdir, world, *modules = argv
    sys.path.insert(0, testdir)
    sys.dont_write_bytecode = True
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    if world == "mpicomp":
        import mpicomp

        MPI.COMM_WORLD = mpicomp.COMM_WORLD  # before the test modules read it
    elif world != "plain":
        raise SystemExit(f"WORLD must be 'plain' or 'mpicomp', got {world!r}")
    _import_arrayimpl()
    result = _Result()
    started = time.perf_counter()
    for name in modules:
        try:
            suite = unittest.defaultTestLoader.loadTestsFromName(name)
        except Exception:  # an import error is a failure of every test in it
            result.outcomes[name] = "error"
            result.texts[name] = traceback.format_exc()[-4000:]
            continue
        suite.run(result)
    report = {"rank": rank, "world": world, "modules": modules,
              "seconds": time.perf_counter() - started,
              "outcomes": result.outcomes, "texts": result.texts}
    path = os.path.join(outdir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
