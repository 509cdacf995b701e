"""Plain MPI calls on any buffers: host, device with a CUDA-aware MPI, or device staged.

Calls that do not compress (below the threshold, NaN/Inf, an unsupported
dtype or op, ...) go to mpi4py's own method with the caller's arguments.
With CUDA buffers that needs care MPI cannot take itself:

* the stream that produced a buffer must have finished before MPI reads it
  (mpi4py ignores the stream of ``__cuda_array_interface__``);
* an MPI library that is not CUDA-aware cannot touch device memory at all:
  each device buffer of the call is then copied to a host buffer, MPI runs
  on the copies, and the copies of the buffers MPI writes are copied back
  (after completion, for a nonblocking call). This fallback moves the
  uncompressed data twice over PCIe; compressed calls stage only their
  streams (:mod:`mpicomp.backend.device`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from .. import cuda_runtime as cuda
from . import placement
from .mpi_buffers import for_mpi, spec_object, with_object
from .mpi_library import cuda_aware

__all__ = ["Places", "on_device", "run"]

#: where the memory objects of a call's buffers live, by ``id`` (known from parsing them)
Places = dict[int, placement.Place]

#: methods whose first buffer argument is (also) written by MPI
_FIRST_WRITTEN = ("Bcast", "Ibcast", "Recv", "Irecv")


def on_device(spec: Any, places: Places | None = None) -> bool:
    """True when a buffer spec's memory is a CUDA buffer mpicomp may touch
    (``places``: what parsing the call's buffers found, else asked here)."""
    if spec is None or spec is MPI.IN_PLACE or isinstance(spec, (int, float, str, MPI.Op,
                                                                 MPI.Status)):
        return False  # (not a buffer: asks nothing of CUDA, so Numba stays unloaded)
    obj = spec_object(spec)
    if places is not None and id(obj) in places:
        return places[id(obj)] is placement.Place.DEVICE
    return placement.of(obj).on_device


def run(fn: Callable[..., Any], comm: Any, args: tuple[Any, ...],
        written: Callable[[int], bool] | None = None,
        places: Places | None = None) -> tuple[Any, str]:
    """``fn(comm, *args)`` made safe for device buffers; returns (result, memory label).

    Buffers that are not device memory mpicomp may touch (host memory, and
    CUDA interfaces over memory it must leave alone) reach MPI exactly as given.
    """
    dev = [i for i, a in enumerate(args) if on_device(a, places)]
    if not dev:
        return fn(comm, *args), "host"
    stream = cuda.current_stream()
    stream.synchronize()
    direct, _ = cuda_aware()
    if direct:
        new = [with_object(a, for_mpi(spec_object(a))) if i in dev else a
               for i, a in enumerate(args)]
        return fn(comm, *new), "device, CUDA-aware MPI"
    name = getattr(fn, "__name__", "")
    if written is None:
        def written(i: int) -> bool:
            return i > 0 or name in _FIRST_WRITTEN
    new = list(args)
    copies: list[tuple[Any, np.ndarray]] = []
    for i in dev:
        d = cuda.as_device(spec_object(args[i]), f"argument {i}")
        host = np.empty(d.size, dtype=d.dtype)
        cuda.copy_to_host(host, d, stream)
        new[i] = with_object(args[i], host)
        if written(i):
            copies.append((d, host))
    stream.synchronize()
    result = fn(comm, *new)

    def copy_back() -> None:
        for d, host in copies:
            cuda.copy_to_device(d, host, stream)
        stream.synchronize()

    if isinstance(result, MPI.Request):
        from ..requests import Request

        inner = result
        where = cuda.capture()

        def work() -> None:
            inner.Wait()
            with cuda.using_stream(*where):
                copy_back()

        return Request.start(work), "device, staged through host (plain data)"
    copy_back()
    return result, "device, staged through host (plain data)"
