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

Whatever Numba's own thread count is, :func:`budget` caps every mpicomp
kernel call (``kernels/launch.py``) through ``numba.set_num_threads``, which
is per calling thread: the program's own Numba code keeps its settings.

Idle OpenMP workers spin for a while before they sleep; with more codec
threads than free cores (``MPICOMP_THREADS`` above the budget, or a launcher
that does not say how many ranks share the node) two ranks on two cores,
two codec threads each, made a 4 MiB compressed Allreduce 96 to 420 ms
instead of 2 ms (docs/usage.md). When mpicomp is
the first to start Numba's workers (:func:`start_numba_workers`, called as
its kernels load), it asks the OpenMP runtime that Numba loads to let idle
workers sleep: ``OMP_WAIT_POLICY=PASSIVE`` is in the environment only while
that runtime reads it, and removed again, so nothing the program or other
libraries (PyTorch's OpenMP) read later is changed. A user's own
``OMP_WAIT_POLICY`` is left as it is; ``MPICOMP_OMP_PASSIVE=0`` opts out.
A worker that sleeps at once costs its wake at every parallel region, and a
codec call runs several; so where a rank's threads have cores of their own
(:func:`owns_its_cores`) GNU OpenMP's ``GOMP_SPINCOUNT`` is set beside the
policy, the same way, to a short spin (:data:`SPIN_COUNT`): on 2 threads
a 4 MiB bitplane 8.25 encode ran at 1.9x the speed, a 512 x 512 field's
shaped errbound encode at 1.1x to 1.4x and its decode at 1.3x to 1.6x
(docs/decisions.md, *OpenMP workers that sleep at once*). A user's own
``GOMP_SPINCOUNT`` is left as it is.
Importing ``mpicomp`` does not load Numba at all.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping

__all__ = ["ENV", "budget", "describe", "local_ranks", "owns_its_cores", "start_numba_workers",
           "usable_cores"]

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


#: set to 0 to leave OpenMP's wait policy to the environment
PASSIVE_ENV = "MPICOMP_OMP_PASSIVE"
#: GNU OpenMP's spins before an idle worker (or a thread at a region's end) sleeps, set
#: where a rank's threads have cores of their own (:func:`owns_its_cores`): about 0.1 to
#: 0.3 ms here, so the regions of one codec call, and calls a few tens of microseconds
#: apart, find their workers awake (a sleeping one took 50 to 80 us to wake on the
#: 2-core VM, per region); with more threads than cores each spin takes a core from
#: another rank, so there none is set (docs/decisions.md, *OpenMP workers that sleep at
#: once*)
SPIN_COUNT = 10000
#: what a process started by an MPI launcher has in its environment (the launcher
#: variables of :data:`LOCAL_SIZE_VARS` aside): without any, a process is a singleton
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                 "MV2_COMM_WORLD_RANK", "ALPS_APP_PE", "PALS_RANKID")

_started = False


def owns_its_cores(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this rank's codec threads have cores no other rank of its job is given:
    the launcher said how many ranks share the node (or nothing says an MPI launcher
    started the process: a singleton), and that many budgets fit the usable cores."""
    env = os.environ if environ is None else environ
    ranks, source = local_ranks(env)
    if source not in LOCAL_SIZE_VARS and any(v in env for v in LAUNCHER_VARS):
        return False  # (a launcher that does not say how many ranks share the node)
    return compute_budget(usable_cores(), ranks, _from_env(env)) * ranks <= usable_cores()


def start_numba_workers() -> None:
    """Start Numba's thread pool, its idle OpenMP workers sleeping (see the module docs).

    If Numba's workers run already (the program started them) the policy is
    theirs; under the CUDA simulator nothing starts. The environment is as before on return,
    and so is PyTorch's thread count (:func:`_torch_threads_kept`).
    """
    global _started
    if _started:
        return
    _started = True
    import numba

    if numba.config.ENABLE_CUDASIM:
        return
    env = os.environ
    opt_out = env.get(PASSIVE_ENV, "1").strip().lower() in ("0", "no", "false", "off")
    with _torch_threads_kept():
        if opt_out or "OMP_WAIT_POLICY" in env:
            numba.get_num_threads()
            return
        policy = {"OMP_WAIT_POLICY": "PASSIVE"}
        if "GOMP_SPINCOUNT" not in env and owns_its_cores(env):
            policy["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
        env.update(policy)
        try:
            numba.get_num_threads()  # loads the threading layer; its OpenMP reads the policy
        finally:
            for key in policy:
                del env[key]


@contextlib.contextmanager
def _torch_threads_kept() -> Iterator[None]:
    """PyTorch's intra-op thread count as the program left it. Numba's OpenMP layer sets
    the calling thread's OpenMP thread count to Numba's (every core) as it starts, and
    PyTorch's OpenMP, resolved to the same runtime, reads that count: a training rank that
    had called ``torch.set_num_threads(1)`` ran its model on every core after its first
    compressed call (4 ranks on 2 cores: steps up to 40 times slower)."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    before = get() if callable(get) else None
    try:
        yield
    finally:
        if before is not None and get() != before:
            torch.set_num_threads(before)
