"""CUDA buffers: recognising them, viewing them from Numba, allocating, streams.

Any object with ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors,
Numba device arrays) or a CUDA ``__dlpack__`` is a device buffer. Kernels
see it as a Numba device array over the same memory (no copy). New device
buffers come from CuPy's memory pool when CuPy is installed (and the CUDA
simulator is off), else from Numba. Kernels run on the caller's current
stream: CuPy's current stream when CuPy is in use, else Numba's default.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

__all__ = [
    "THREADS",
    "as_device",
    "current_stream",
    "empty",
    "grid",
    "is_device_array",
    "synchronize",
    "zeros_like_flag",
]

#: threads per CUDA block for the element- and block-parallel kernels
THREADS = 128

_DLPACK_CUDA = 2  # kDLCUDA


def is_device_array(obj: Any) -> bool:
    """True for a CUDA buffer (``__cuda_array_interface__`` or a CUDA DLPack capsule)."""
    if isinstance(obj, (np.ndarray, bytes, bytearray, memoryview)):
        return False
    if hasattr(obj, "__cuda_array_interface__"):
        return True
    if _simulated(obj):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None or isinstance(obj, np.ndarray):
        return False
    try:
        return int(dev()[0]) == _DLPACK_CUDA
    except Exception:  # noqa: BLE001 - any failure means "not a CUDA buffer"
        return False


def _simulated(obj: Any) -> bool:
    """True for a device array of Numba's CUDA simulator (which has no interface attribute)."""
    from .kernels.jit import SIMULATOR

    if not SIMULATOR:
        return False
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return isinstance(obj, FakeCUDAArray)


@functools.lru_cache(maxsize=1)
def _cupy() -> Any:
    from .kernels.jit import SIMULATOR

    if SIMULATOR:
        return None
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def as_device(obj: Any, name: str = "x") -> Any:
    """A flat Numba device array over ``obj``'s memory (ValueError if not contiguous)."""
    from numba import cuda

    if not hasattr(obj, "__cuda_array_interface__") and not _simulated(obj):
        cp = _cupy()
        if cp is None:
            raise TypeError(f"{name}: a DLPack CUDA buffer needs CuPy to be viewed")
        obj = cp.from_dlpack(obj)
    arr = obj if _simulated(obj) else cuda.as_cuda_array(obj)
    if not arr.is_c_contiguous():
        raise ValueError(f"{name} must be C-contiguous (shape {arr.shape}, strides {arr.strides})")
    return arr.reshape(arr.size)


def empty(n: int, dtype: Any, like: Any = None) -> Any:
    """A new device buffer of ``n`` values (CuPy's pool when ``like`` is CuPy or CuPy is here)."""
    cp = _cupy()
    if cp is not None and (like is None or isinstance(like, cp.ndarray)):
        return cp.empty(n, dtype=dtype)
    from numba import cuda

    return cuda.device_array(n, dtype=dtype, stream=current_stream())


def current_stream() -> Any:
    """The Numba stream kernels launch on: CuPy's current stream, else the default stream."""
    from numba import cuda

    cp = _cupy()
    if cp is not None:
        ptr = cp.cuda.get_current_stream().ptr
        return cuda.external_stream(ptr) if ptr else cuda.default_stream()
    return getattr(cuda, "default_stream", cuda.stream)()  # the simulator has only stream()


def grid(n: int) -> tuple[int, int]:
    """(blocks, threads) covering ``n`` work items."""
    return max(1, -(-n // THREADS)), THREADS


def synchronize(stream: Any) -> None:
    stream.synchronize()


def zeros_like_flag(stream: Any) -> Any:
    """A device int32[1] set to 0 on ``stream`` (for kernels that flag a condition)."""
    from numba import cuda

    return cuda.to_device(np.zeros(1, np.int32), stream=stream)
