"""Where a job's calibration is kept: in memory per process, and in a file per layout.

:func:`obtain` gives a communicator the calibration of its layout
(:mod:`mpicomp.topology`) and thread budget: from this process's memory,
else from the file a job with the same layout saved, else measured
(:func:`mpicomp.calibration.measure`) and saved (rank 0 writes JSON, codec
speeds added as they are measured), so a job does not pay for the probe
twice: by default in a per-user
cache, one file per layout, thread budget, host and MPI library
(``$MPICOMP_CACHE_DIR``, else ``$XDG_CACHE_HOME/mpicomp``, else
``~/.cache/mpicomp``), measured again once older than :data:`MAX_AGE_S`;
``MPICOMP_CALIBRATION=PATH`` names one file instead (kept however old), and
``MPICOMP_CALIBRATION=off`` neither loads nor saves. ``python -m mpicomp
calibrate`` (under ``mpiexec``; ``make venv`` runs it on 2 ranks) fills the
cache ahead of a first call.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time

from mpi4py import MPI

from . import threads
from .calibration import measure
from .calibration_data import FORMAT_VERSION, Calibration
from .topology import Layout

__all__ = ["CACHE_ENV", "ENV", "MAX_AGE_S", "file_for", "obtain", "save"]

#: the environment variable naming the calibration file (``off``: none)
ENV = "MPICOMP_CALIBRATION"
#: the environment variable naming the per-user cache folder
CACHE_ENV = "MPICOMP_CACHE_DIR"
#: a cached calibration older than this is measured again (a file named by ENV is not)
MAX_AGE_S = 7 * 24 * 3600.0

_CACHE: dict[str, Calibration] = {}


def _cache_key(lay: Layout) -> str:
    return f"{lay.key()}|threads={threads.budget()}"


def file_for(lay: Layout) -> tuple[str | None, bool]:
    """The file this layout's calibration is loaded from and saved to (None: none), and
    whether it is the per-user cache's (which ages: :data:`MAX_AGE_S`). Rank 0's view."""
    named = os.environ.get(ENV, "").strip()
    if named.lower() in ("off", "0", "none", "no"):
        return None, False
    if named:
        return named, False
    folder = os.environ.get(CACHE_ENV, "").strip()
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(
            os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "mpicomp")
    what = "|".join((_cache_key(lay), platform.node(), MPI.Get_library_version().splitlines()[0],
                     str(FORMAT_VERSION)))
    digest = hashlib.blake2b(what.encode(), digest_size=8).hexdigest()
    return os.path.join(folder, f"calibration-{digest}.json"), True


def _load(path: str, lay: Layout, ages: bool = False) -> Calibration | None:
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    try:
        if d.get("version") != FORMAT_VERSION or tuple(d["layout"]) != lay.node_of:
            return None
        if int(d["threads"]) != threads.budget():
            return None
        if ages and not 0 <= time.time() - os.path.getmtime(path) <= MAX_AGE_S:
            return None  # stale: measured again (and saved over it)
        return Calibration.from_dict(d, f"loaded from {path}")
    except (KeyError, TypeError, ValueError, OSError):
        return None


def save(comm: MPI.Intracomm, cal: Calibration) -> None:
    if comm.Get_rank() != 0:
        return
    path, _ = file_for(cal.layout)
    if path is None:
        return
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(cal.as_dict(), f, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass  # a calibration file is an optimisation; failing to write one is not an error


def obtain(comm: MPI.Intracomm, lay: Layout, force: bool = False) -> Calibration:
    """This layout's calibration: from this process's cache, the file, or measured (collective).

    Every rank ends with rank 0's copy, so all hold the same numbers.
    """
    key = _cache_key(lay)
    rank0 = comm.Get_rank() == 0
    have = 0 if force else comm.allreduce(int(key in _CACHE), op=MPI.MIN)
    if have:
        cal = comm.bcast(_CACHE[key] if rank0 else None, root=0)
    else:
        path, ages = file_for(lay) if rank0 and not force else (None, False)
        loaded = _load(path, lay, ages) if path else None
        cal = comm.bcast(loaded, root=0)
        if cal is None:
            measured = measure(comm, lay)
            cal = comm.bcast(measured if rank0 else None, root=0)
            save(comm, cal)
    _CACHE[key] = cal
    return cal
