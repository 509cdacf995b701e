"""Device buffers for the tests marked ``device``: which kinds exist here, making and reading them.

On a GPU the kinds are CuPy arrays and Numba device arrays; under Numba's
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) Numba simulator arrays and
host memory behind ``__cuda_array_interface__`` (the way a foreign CUDA
array reaches mpicomp).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from mpicomp import cuda_runtime
from mpicomp.backend.mpi_buffers import HostMemoryAsDevice
from mpicomp.kernels.jit import SIMULATOR

__all__ = ["BACKENDS", "KINDS", "gpu_usable", "make", "needs_device", "read", "to_device",
           "to_host"]

KINDS = ["numba", "cai"] if SIMULATOR else ["cupy", "numba"]

#: every kind of buffer a test of behaviour that is the same everywhere runs over (as
#: mpi4py's tests run over its ``arrayimpl`` array types): host memory, then the device
#: kinds, marked ``device`` (they run where device arrays exist: the simulator stages
#: sim2 of ``make test``, sim2 and sim3 of ``make test-device``, or a GPU)
BACKENDS = [pytest.param("host", id="host")] + [
    pytest.param(k, id=k, marks=pytest.mark.device) for k in KINDS]


def make(x: np.ndarray, kind: str):
    """A buffer of kind ``kind`` (``"host"`` or one of :data:`KINDS`) holding a copy of ``x``."""
    return np.array(x, copy=True) if kind == "host" else to_device(x, kind)


def read(b, kind: str) -> np.ndarray:
    """A host copy of the values of a buffer :func:`make` made."""
    return np.array(b, copy=True) if kind == "host" else to_host(b)


def gpu_usable() -> bool:
    """A real CUDA device (the simulator does not count)."""
    if SIMULATOR:
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001
        return False


def to_device(x: np.ndarray, kind: str):
    """A device buffer of kind ``kind`` holding a copy of ``x``."""
    from numba import cuda

    if kind == "cupy":
        import cupy

        return cupy.asarray(x)
    if kind == "cai":  # host memory behind __cuda_array_interface__ (simulator only)
        return HostMemoryAsDevice(np.array(x, copy=True))
    return cuda.to_device(x)


def to_host(d) -> np.ndarray:
    """A host copy of a device buffer's values (after the current stream's work)."""
    cuda_runtime.current_stream().synchronize()
    if isinstance(d, HostMemoryAsDevice):
        return d.array.copy()
    if hasattr(d, "get") and not hasattr(d, "copy_to_host"):
        return d.get()
    return d.copy_to_host()


@pytest.fixture(autouse=True)
def needs_device(request):
    """Skip a test marked ``device`` without device arrays (a GPU, or the simulator);
    imported by a test module, it applies to every test there."""
    if request.node.get_closest_marker("device") is None:
        yield
        return
    if not (SIMULATOR or gpu_usable()):
        pytest.skip("needs a CUDA device, or NUMBA_ENABLE_CUDASIM=1 (make test runs the "
                    "simulator stage sim2, make test-device sim2 and sim3)")
    with warnings.catch_warnings():
        # the simulator runs the kernels' integer arithmetic in NumPy scalars, which wrap
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
