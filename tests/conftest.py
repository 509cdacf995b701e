"""Shared fixtures and the per-rank result reporter used by ``tests/run_tests.py``.

Per-rank reports
----------------
pytest-mpi runs one pytest session per MPI rank and does not combine their
results: rank 0 can print "all passed" while rank 1 failed. When the
environment variable ``MPICOMP_TEST_REPORT`` names a directory, every rank
writes ``<dir>/<stage>-rank<r>.json`` (``<stage>`` from
``MPICOMP_TEST_STAGE``, default ``"pytest"``; ``r`` from
``MPI.COMM_WORLD.Get_rank()``). The file is rewritten as each test starts
(``"finished": false`` and the test in progress in ``"current"``) and once
more at session finish (``"finished": true``), so a rank that crashes or is
killed in a hang leaves a report that says so and names the test it was in.
``tests/run_tests.py`` reads these files and prints one honest summary.

GPU tests
---------
Tests marked ``@pytest.mark.gpu`` are skipped when no CUDA device is usable
(CuPy, then Numba CUDA, is asked; the Numba simulator does not count). Set
``MPICOMP_TEST_GPU=0`` or ``1`` to override the detection.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pairwise  # tests/pairwise.py (pytest puts this folder on sys.path, as for launcher)
import pytest

REPORT_DIR_ENV = "MPICOMP_TEST_REPORT"
STAGE_ENV = "MPICOMP_TEST_STAGE"
RUN_ID_ENV = "MPICOMP_TEST_RUN_ID"
GPU_ENV = "MPICOMP_TEST_GPU"


# -- fixtures ---------------------------------------------------------------
@pytest.fixture
def process_group(comm, monkeypatch):
    """PyTorch's default process group (gloo) on the job's ranks, started from MPI by
    ``mpicomp.torch.init_process_group`` (skipped without torch)."""
    import datetime

    dist = pytest.importorskip("torch.distributed")
    import mpicomp.torch as mt

    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    mt.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def comm():
    """``MPI.COMM_WORLD`` (a singleton world of size 1 outside mpiexec)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture
def plain(comm):
    """A plain mpi4py duplicate of the world, the reference (a job of 2+ ranks only)."""
    if comm.Get_size() == 1:
        pytest.skip("a collective of one rank does not compress")
    dup = comm.Dup()
    yield dup
    dup.Free()


# -- GPU marker ---------------------------------------------------------------
_gpu_state: tuple[bool, str] | None = None


def gpu_available() -> tuple[bool, str]:
    """(usable CUDA device?, how that was decided). Cached per process."""
    global _gpu_state
    if _gpu_state is not None:
        return _gpu_state
    forced = os.environ.get(GPU_ENV, "").strip().lower()
    if forced in ("0", "no", "false", "off"):
        _gpu_state = (False, f"{GPU_ENV}={forced}")
    elif forced in ("1", "yes", "true", "on"):
        _gpu_state = (True, f"{GPU_ENV}={forced}")
    else:
        _gpu_state = (False, "no CUDA device found (neither CuPy nor Numba CUDA sees one)")
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                _gpu_state = (True, "CuPy sees a device")
        except Exception:  # ImportError, CUDARuntimeError, missing driver, ...
            if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0"):
                try:
                    from numba import cuda

                    if cuda.is_available():
                        _gpu_state = (True, "Numba CUDA sees a device")
                except Exception:
                    pass
    return _gpu_state


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the markers added here
def pytest_collection_modifyitems(config, items):
    pairwise.mark_beyond_cover(items)
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    ok, why = gpu_available()
    if not ok:
        skip = pytest.mark.skip(reason=f"needs a CUDA device: {why}")
        for item in gpu_items:
            item.add_marker(skip)


# -- per-rank JSON report ---------------------------------------------------
def _mpi_rank_size() -> tuple[int, int, str]:
    try:
        from mpi4py import MPI

        w = MPI.COMM_WORLD
        return w.Get_rank(), w.Get_size(), "mpi4py"
    except Exception as exc:  # report anyway so that the runner sees *something*
        for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
            if var in os.environ:
                return int(os.environ[var]), -1, f"{var} (mpi4py failed: {exc!r})"
        return 0, -1, f"default (mpi4py failed: {exc!r})"


class RankReporter:
    """Counts outcomes on this rank and writes them to a JSON file."""

    def __init__(self, directory: str, stage: str):
        self.rank, self.size, self.rank_source = _mpi_rank_size()
        self.path = os.path.join(directory, f"{stage}-rank{self.rank}.json")
        self.data = {
            "stage": stage,
            "rank": self.rank,
            "size": self.size,
            "rank_source": self.rank_source,
            "run_id": os.environ.get(RUN_ID_ENV),
            "pid": os.getpid(),
            "started": time.time(),
            "finished": False,
            "exitstatus": None,
            "current": None,
            "collected": None,
            "passed": 0,
            "failed": 0,
            "errors": 0,
            "skipped": 0,
            "xfailed": 0,
            "xpassed": 0,
            "failures": [],  # [{"nodeid", "when", "message"}]
            "file_seconds": {},  # test file: seconds of its setups, calls and teardowns
        }
        os.makedirs(directory, exist_ok=True)
        self.write()

    def write(self) -> None:
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1)
        os.replace(tmp, self.path)

    def _fail(self, kind: str, report) -> None:
        self.data[kind] += 1
        message = ""
        crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
        if crash is not None:
            message = str(crash.message).splitlines()[0] if crash.message else ""
        elif report.longrepr is not None:
            text = str(report.longrepr).strip().splitlines()
            message = text[-1] if text else ""
        self.data["failures"].append(
            {"nodeid": report.nodeid, "when": report.when, "kind": kind, "message": message[:300]}
        )

    # hooks
    def pytest_collection_finish(self, session):
        self.data["collected"] = len(session.items)
        self.write()

    def pytest_collectreport(self, report):
        if report.failed:
            self._fail("errors", report)
            self.write()

    def pytest_runtest_logstart(self, nodeid, location):
        self.data["current"] = nodeid
        self.write()

    def pytest_runtest_logreport(self, report):
        seconds = self.data["file_seconds"]
        path = report.nodeid.split("::")[0]
        seconds[path] = round(seconds.get(path, 0.0) + report.duration, 3)
        wasxfail = hasattr(report, "wasxfail")
        if report.when == "call":
            if report.passed:
                self.data["xpassed" if wasxfail else "passed"] += 1
            elif report.failed:
                self._fail("failed", report)
            elif report.skipped:
                self.data["xfailed" if wasxfail else "skipped"] += 1
        elif report.failed:  # setup or teardown
            self._fail("errors", report)
        elif report.skipped:  # skipped (or xfailed) in setup
            self.data["xfailed" if wasxfail else "skipped"] += 1

    def pytest_runtest_logfinish(self, nodeid, location):
        self.data["current"] = None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        self.data["finished"] = True
        self.data["current"] = None
        self.data["exitstatus"] = int(exitstatus)
        self.data["ended"] = time.time()
        self.write()


def pytest_configure(config):
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        # the warp-cooperative kernels meet at a barrier of the simulator's Python threads per
        # warp operation: handing the GIL on sooner than every 5 ms makes each one 10x cheaper
        # (0.3 ms: a device errbound Send/Recv case 47 s on 2 ranks, at 0.1 ms 57, 0.02 ms 68)
        sys.setswitchinterval(3e-4)
    # tests that start their own mpiexec: what Open MPI's needs here (root, more ranks
    # than cores; tests/launcher.py); a rank of a job (its launcher's variables set) has
    # no need, nor does a session under tests/run_tests.py, which has set them already
    if not any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")):
        import launcher

        launcher.apply(os.environ)
    directory = os.environ.get(REPORT_DIR_ENV)
    if directory and not hasattr(config, "workerinput"):  # not inside an xdist worker
        stage = os.environ.get(STAGE_ENV, "pytest")
        config.pluginmanager.register(RankReporter(directory, stage), "mpicomp-rank-reporter")
