"""How many codec threads a rank uses, and making idle ones sleep instead of spin.

Several MPI ranks usually share a node. If each rank's Numba kernels used
every core, ``k`` ranks would run ``k x cores`` threads, and Numba's
OpenMP workers spin while they wait for work: two ranks on two cores made
a 256 KiB compressed Allreduce 87 ms instead of about 1 ms. mpicomp
therefore sizes its own thread budget from the node:

    budget = max(1, usable cores // ranks of this job on this node)

* usable cores: ``os.sched_getaffinity`` (what the launcher bound this
  rank to), else ``os.cpu_count()``;
* ranks on this node: what the launcher exports (MPICH/hydra
  ``MPI_LOCALNRANKS``, Open MPI ``OMPI_COMM_WORLD_LOCAL_SIZE``, MVAPICH
  ``MV2_COMM_WORLD_LOCAL_SIZE``, Slurm ``SLURM_TASKS_PER_NODE`` is not used:
  it can be a list), else 1 (a singleton run);
* ``MPICOMP_THREADS=N`` overrides the budget.

:func:`configure` runs when ``mpicomp`` is imported: it sets
``OMP_WAIT_POLICY=PASSIVE`` (idle OpenMP workers sleep) and
``NUMBA_NUM_THREADS`` to the budget, unless the user set them, and only
while Numba has not been imported yet (both are read once, at start-up).
Whatever happened before, :func:`budget` caps every mpicomp kernel call
(``kernels/launch.py``), so a program that imported Numba first still runs
mpicomp's kernels on its budget.
"""
from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping

__all__ = ["ENV", "budget", "configure", "describe", "local_ranks", "usable_cores"]

#: the environment variable that overrides the budget
ENV = "MPICOMP_THREADS"

#: variables in which launchers say how many ranks of the job share this node
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                   "PMIX_LOCAL_SIZE")


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def local_ranks(environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(ranks of this job on this node, the variable that said so or "assumed")."""
    env = os.environ if environ is None else environ
    for var in LOCAL_SIZE_VARS:
        raw = env.get(var, "").strip()
        if raw.isdigit() and int(raw) > 0:
            return int(raw), var
    return 1, "assumed (no launcher variable)"


def _from_env(environ: Mapping[str, str]) -> int | None:
    raw = environ.get(ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{ENV} must be a whole number of threads >= 1, got {raw!r}")
    return int(raw)


def compute_budget(cores: int, ranks: int, forced: int | None = None) -> int:
    """The budget for ``ranks`` ranks on ``cores`` cores (``forced`` wins).

    >>> compute_budget(2, 2), compute_budget(16, 4), compute_budget(2, 8), compute_budget(8, 1, 3)
    (1, 4, 1, 3)
    """
    if forced is not None:
        return forced
    return max(1, cores // max(1, ranks))


@functools.lru_cache(maxsize=1)
def budget() -> int:
    """Threads an mpicomp kernel call may use on this rank (see the module docs)."""
    env = os.environ
    return compute_budget(usable_cores(), local_ranks(env)[0], _from_env(env))


def describe() -> str:
    """One line: the budget and where it came from (for ``stats`` and the debug log)."""
    ranks, source = local_ranks()
    forced = _from_env(os.environ)
    how = f"{ENV}={forced}" if forced is not None else (
        f"{usable_cores()} cores / {ranks} ranks on this node ({source})")
    return f"{budget()} codec thread(s): {how}"


def configure() -> None:
    """Set OMP_WAIT_POLICY and NUMBA_NUM_THREADS for mpicomp, if Numba is not loaded yet."""
    if "numba" in sys.modules:
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "NUMBA_NUM_THREADS" not in os.environ:
        os.environ["NUMBA_NUM_THREADS"] = str(budget())
