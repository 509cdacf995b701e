"""Where a buffer's memory lives, decided once per buffer of a call.

mpicomp parses a caller's buffer once (:func:`mpicomp.buffers.parse`) and
keeps the answer of :func:`of` with it; the plain-MPI path
(:mod:`mpicomp.backend.plain`) reuses that answer instead of asking again.

* ``HOST``: CPU memory (NumPy arrays and anything else with the buffer
  protocol). The CPU codecs may read and write it; MPI takes it as is.
* ``DEVICE``: memory behind ``__cuda_array_interface__`` or a CUDA
  ``__dlpack__`` on a CUDA device this process can use (device or managed
  memory), or an array of Numba's CUDA simulator. The GPU kernels read and
  write it; MPI gets it directly (CUDA-aware MPI) or staged through the host.
* ``FOREIGN``: a CUDA buffer interface mpicomp's kernels must not touch:
  there is no usable CUDA device in this process (no driver: mpi4py's test
  suite fakes GPU arrays over host memory this way), or CUDA says the
  pointer is host memory. Such a buffer is never compressed and reaches
  MPI exactly as the caller gave it, as plain mpi4py would pass it.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any

import numpy as np

from .. import cuda_runtime

__all__ = ["DEVICE", "HOST", "Place", "Placement", "cuda_usable", "of"]


class Place(enum.Enum):
    HOST = "host"
    DEVICE = "device"
    FOREIGN = "foreign"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one buffer lives; ``reason`` says why a ``FOREIGN`` one goes to MPI untouched."""

    place: Place
    reason: str = ""
    #: whether mpicomp works on it as device memory
    on_device: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_device", self.place is Place.DEVICE)


HOST = Placement(Place.HOST)
DEVICE = Placement(Place.DEVICE)
_NO_CUDA = Placement(
    Place.FOREIGN, "CUDA buffer interface without a usable CUDA device (handed to MPI as given)")
_HOST_POINTER = Placement(
    Place.FOREIGN, "CUDA buffer interface over host memory (handed to MPI as given)")

_HOST_TYPES = (np.ndarray, bytes, bytearray, memoryview)


def of(obj: Any) -> Placement:
    """Where ``obj``'s memory lives (see the module docstring)."""
    if obj is None or isinstance(obj, _HOST_TYPES):
        return HOST
    cai = cuda_runtime.interface(obj)
    if cai is None and not cuda_runtime.cuda_interface(obj):
        return DEVICE if cuda_runtime.simulated(obj) else HOST
    if cuda_runtime.simulator():
        return DEVICE  # simulated kernels work on host memory, through the interface
    if not cuda_usable():
        return _NO_CUDA
    if cai is not None:
        ptr = int(cai["data"][0] or 0)
        if ptr and memory_type(ptr) == "host":
            return _HOST_POINTER
    return DEVICE


@functools.lru_cache(maxsize=1)
def cuda_usable() -> bool:
    """True when this process can run CUDA kernels (a driver and a device); asked once."""
    if cuda_runtime.simulator():
        return True
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - no driver, no toolkit: no CUDA here
        return False


def memory_type(ptr: int) -> str:
    """``"host"``, ``"device"``, ``"managed"`` or ``"unknown"``, as CUDA describes ``ptr``.

    Host memory CUDA does not know (plain ``malloc``) counts as ``"host"``.
    """
    try:
        import cupy

        kind = int(cupy.cuda.runtime.pointerGetAttributes(ptr).type)
        return {0: "host", 1: "host", 2: "device", 3: "managed"}.get(kind, "unknown")
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - CUDA refused the pointer: not CUDA memory
        return "host"
    return _memory_type_numba(ptr)


def _memory_type_numba(ptr: int) -> str:
    import ctypes

    from numba.cuda.cudadrv import driver, enums

    try:
        if driver.USE_NV_BINDING:
            attr = driver.binding.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
            kind = int(driver.driver.cuPointerGetAttribute(attr, driver.binding.CUdeviceptr(ptr)))
        else:
            value = ctypes.c_uint(0)
            driver.driver.cuPointerGetAttribute(
                ctypes.byref(value), enums.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
            kind = value.value
    except Exception:  # noqa: BLE001 - CUDA_ERROR_INVALID_VALUE: memory CUDA does not know
        return "host"
    return {enums.CU_MEMORYTYPE_HOST: "host", enums.CU_MEMORYTYPE_DEVICE: "device",
            enums.CU_MEMORYTYPE_UNIFIED: "managed"}.get(kind, "unknown")
