"""Buffer specs as mpi4py takes them: their memory object, and device memory as MPI sees it.

Shared by the plain calls (:mod:`mpicomp.backend.plain`) and the device
memory's MPI wrapper (:class:`mpicomp.backend.device.MPIOnDevice`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import cuda_runtime as cuda

__all__ = ["HostMemoryAsDevice", "for_mpi", "spec_object", "with_object"]


def spec_object(spec: Any) -> Any:
    """The memory object of a buffer spec (``buf`` or the first item of ``[buf, ...]``)."""
    return spec[0] if isinstance(spec, (list, tuple)) and spec else spec


def with_object(spec: Any, obj: Any) -> Any:
    """``spec`` with its memory object replaced by ``obj``."""
    if isinstance(spec, (list, tuple)) and spec:
        return [obj, *spec[1:]]
    return obj



class HostMemoryAsDevice:
    """Host memory offered through ``__cuda_array_interface__`` (as a device pointer).

    Under Numba's CUDA simulator "device" arrays live in host memory but
    carry no interface; wrapped in this, they reach MPI as device pointers
    do on a GPU (mpi4py reads the interface), so the CUDA-aware code path is
    exercised on a machine without a GPU.
    """

    def __init__(self, array: np.ndarray) -> None:
        if not array.flags.c_contiguous:
            raise ValueError("HostMemoryAsDevice needs a C-contiguous array")
        self._array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (array.ctypes.data if array.size else 0, not array.flags.writeable),
            "strides": None,
            "version": 3,
        }

    @property
    def array(self) -> np.ndarray:
        return self._array


def for_mpi(obj: Any) -> Any:
    """``obj`` as mpi4py should be given it: a simulator array becomes its host memory
    behind ``__cuda_array_interface__``; everything else is returned as is."""
    if cuda.simulated(obj):
        return HostMemoryAsDevice(obj._ary)
    return obj
