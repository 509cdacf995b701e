"""Where a buffer lives, and how mpicomp works on it there.

One package answers both questions for the communicator, the algorithms
and the gradient reducer:

* :mod:`.placement`: host, device, or a CUDA interface to hand to MPI
  untouched (:func:`~.placement.of`, asked once per buffer of a call);
* :mod:`.host`: NumPy arrays and the CPU kernels (:class:`~.host.HostArrays`,
  and :class:`~.host.HostMemory` with a private communicator's scratch pool);
* :mod:`.device`: the same operations on CUDA buffers with the GPU kernels
  (:class:`~.device.DeviceArrays`, :class:`~.device.DeviceMemory` with
  device and pinned pools and the staging of streams for an MPI that is
  not CUDA-aware);
* :mod:`.plain`: a plain MPI call on any buffers (device buffers synchronized,
  or staged through host copies);
* :mod:`.mpi_library`: the MPI library loaded, and whether it is CUDA-aware.

Below it, :mod:`mpicomp.cuda_runtime` views CUDA memory from Numba
and owns the streams (the codecs use it too); above it, nothing in here
knows about communicators' settings or the decision to compress.
"""
from __future__ import annotations

from typing import Any

__all__ = ["arrays_for"]


def arrays_for(name: str, g: Any) -> Any:
    """The operations for gradient ``g``: :data:`.device.DEVICE` for a CUDA buffer
    mpicomp's kernels may use, :data:`.host.HOST` otherwise; TypeError for a CUDA
    interface over memory the kernels must not touch."""
    from . import placement

    where = placement.of(g)
    if where.place is placement.Place.DEVICE:
        from .device import DEVICE

        return DEVICE
    if where.place is placement.Place.FOREIGN:
        raise TypeError(f"gradient {name!r}: {where.reason.split(' (')[0]}; GradientReducer "
                        "reduces host arrays and device buffers of a usable CUDA device")
    from .host import HOST

    return HOST
