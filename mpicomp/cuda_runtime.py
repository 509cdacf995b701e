"""How the CUDA kernels see memory and streams: views, allocation, streams, launch shapes.

Any object with ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors,
Numba device arrays) or a CUDA ``__dlpack__`` is a device buffer. Kernels
see it as a Numba device array over the same memory (no copy). New device
buffers come from CuPy's memory pool when CuPy is installed (and the CUDA
simulator is off), else from Numba. Kernels run on the caller's current
stream: CuPy's current stream when CuPy is in use, else Numba's default.

This is the layer below the codecs (which run their kernels on caller
buffers through it) and the backend (:mod:`mpicomp.backend`, which decides
where a call's buffers live and stages them for MPI).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = [
    "THREADS",
    "Fence",
    "as_device",
    "capture",
    "copy_to_device",
    "copy_to_host",
    "copy_stream",
    "cuda_interface",
    "interface",
    "current_stream",
    "empty",
    "grid",
    "is_device_array",
    "pinned_empty",
    "same_memory",
    "serialized",
    "simulated",
    "simulator",
    "using_stream",
    "zeros_like_flag",
]

#: threads per CUDA block for the element- and block-parallel kernels
THREADS = 128

_DLPACK_CUDA = 2  # kDLCUDA


def simulator() -> bool:
    """True under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``); Numba is imported
    on the first question, not with mpicomp."""
    from .kernels.jit import SIMULATOR

    return SIMULATOR


def is_device_array(obj: Any) -> bool:
    """True for an object that offers CUDA memory (``__cuda_array_interface__``, a CUDA
    DLPack capsule, a simulator array), whether or not mpicomp may touch it: a caller's
    buffer is judged by :func:`mpicomp.backend.placement.of`."""
    if isinstance(obj, (np.ndarray, bytes, bytearray, memoryview)):
        return False
    return cuda_interface(obj) or simulated(obj)


def cuda_interface(obj: Any) -> bool:
    """True for ``__cuda_array_interface__`` or a CUDA ``__dlpack__`` (usable or not)."""
    return interface(obj) is not None or _cuda_dlpack(obj)


def interface(obj: Any) -> dict[str, Any] | None:
    """``obj.__cuda_array_interface__``, or None."""
    try:
        cai = getattr(obj, "__cuda_array_interface__", None)
    except Exception:  # noqa: BLE001 - e.g. a dtype the interface cannot describe
        return None
    return cai if isinstance(cai, dict) else None


def _cuda_dlpack(obj: Any) -> bool:
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return int(dev()[0]) == _DLPACK_CUDA
    except Exception:  # noqa: BLE001 - any failure means "not a CUDA buffer"
        return False


def simulated(obj: Any) -> bool:
    """An array of Numba's CUDA simulator (which carries no interface attribute)."""
    if not simulator():
        return False
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return isinstance(obj, FakeCUDAArray)


@functools.lru_cache(maxsize=1)
def _cupy() -> Any:
    if simulator():
        return None
    try:
        import cupy
    except ImportError:
        return None
    return cupy


def as_device(obj: Any, name: str = "x", sync: bool = True) -> Any:
    """A flat Numba device array over ``obj``'s memory (ValueError if not contiguous).

    ``sync`` waits for the stream a foreign array names in its interface when that
    is not the stream mpicomp's kernels run on (so an encode on the caller's current
    stream stays asynchronous); mpicomp's own buffers pass False.
    """
    from numba import cuda

    if simulated(obj):
        arr = obj
    elif simulator():
        arr = _simulated_view(obj)
    else:
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        if isinstance(obj, DeviceNDArray):
            arr = obj
        else:
            if not hasattr(obj, "__cuda_array_interface__"):
                cp = _cupy()
                if cp is None:
                    raise TypeError(f"{name}: a DLPack CUDA buffer needs CuPy to be viewed")
                obj = cp.from_dlpack(obj)
            arr = cuda.as_cuda_array(obj, sync=sync and _other_stream(obj))
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


_local = threading.local()
_simulator_lock = threading.RLock()


def serialized() -> Any:
    """A lock around kernel launches under the CUDA simulator, which cannot run kernels
    from two threads at once (a nonblocking receive decodes on its own thread); a no-op
    context on a GPU."""
    return _simulator_lock if simulator() else contextlib.nullcontext()


@contextlib.contextmanager
def using_stream(stream: Any, device_id: int | None = None) -> Iterator[None]:
    """Make :func:`current_stream` return ``stream`` in this thread for the block,
    with ``device_id`` (when given) the current GPU of Numba and CuPy.

    The communicator captures the caller's stream and GPU when a call starts
    (:func:`capture`) and runs its kernels there, also from its worker thread
    (where Numba and CuPy would otherwise use GPU 0).
    """
    previous = getattr(_local, "stream", None)
    _local.stream = stream
    try:
        with contextlib.ExitStack() as stack:
            if device_id is not None and not simulator():
                from numba import cuda

                stack.enter_context(cuda.gpus[device_id])
                cp = _cupy()
                if cp is not None:
                    stack.enter_context(cp.cuda.Device(device_id))
            yield
    finally:
        _local.stream = previous


def _other_stream(obj: Any) -> bool:
    """True when a foreign array's interface names a stream other than the one mpicomp's
    kernels run on (only then must that stream be waited for)."""
    named = obj.__cuda_array_interface__.get("stream")
    if named is None:
        return False
    mine = int(current_stream()) or 1  # the interface calls the legacy default stream 1
    return int(named) != mine


def capture() -> tuple[Any, int | None]:
    """(stream, GPU id) of the calling thread, for :func:`using_stream` on another thread."""
    stream = current_stream()
    if simulator():
        return stream, None
    cp = _cupy()
    if cp is not None:
        return stream, cp.cuda.Device().id
    from numba import cuda

    return stream, cuda.get_current_device().id


def same_memory(a: Any, b: Any) -> bool:
    """True when two device arrays start at the same address (in-place calls)."""
    if simulated(a) and simulated(b):
        return a._ary.ctypes.data == b._ary.ctypes.data
    try:
        return int(a.device_ctypes_pointer.value or 0) == int(b.device_ctypes_pointer.value or 0)
    except AttributeError:
        return False


def current_stream() -> Any:
    """The Numba stream kernels launch on (see :func:`using_stream`), else CuPy's current
    stream when CuPy is in use, else Numba's default stream."""
    from numba import cuda

    forced = getattr(_local, "stream", None)
    if forced is not None:
        return forced

    cp = _cupy()
    if cp is not None:
        ptr = cp.cuda.get_current_stream().ptr
        return cuda.external_stream(ptr) if ptr else cuda.default_stream()
    return getattr(cuda, "default_stream", cuda.stream)()  # the simulator has only stream()


def grid(n: int) -> tuple[int, int]:
    """(blocks, threads) covering ``n`` work items."""
    return max(1, -(-n // THREADS)), THREADS


_ZERO = np.zeros(1, np.int32)


def zeros_like_flag(stream: Any) -> Any:
    """A device int32[1] set to 0 on ``stream`` (for kernels that flag a condition).

    The memory comes from CuPy's pool when CuPy is here (no cudaMalloc per call)."""
    flag = as_device(empty(1, np.int32), "flag", sync=False)
    flag.copy_to_device(_ZERO, stream=stream)
    return flag


def pinned_empty(nbytes: int) -> np.ndarray:
    """A page-locked host uint8 buffer (for staging streams between the device and MPI)."""
    from numba import cuda

    return cuda.pinned_array(nbytes, dtype=np.uint8)


def copy_to_host(dst: np.ndarray, src: Any, stream: Any) -> None:
    """Enqueue ``dst[:] = src`` (device to host) on ``stream``; ``dst`` should be pinned."""
    if src.size:
        s = as_device(src, "src")
        if isinstance(stream, _DeferredStream):
            stream.enqueue(lambda: s.copy_to_host(dst))
        else:
            s.copy_to_host(dst, stream=stream)


def copy_to_device(dst: Any, src: Any, stream: Any) -> None:
    """Enqueue ``dst[:] = src`` on ``stream``; ``src`` is host memory or a device array."""
    if dst.size:
        d = as_device(dst, "dst")
        s = as_device(src, "src") if is_device_array(src) else src
        if isinstance(stream, _DeferredStream):
            stream.enqueue(lambda: d.copy_to_device(s))
        else:
            d.copy_to_device(s, stream=stream)


def copy_stream() -> Any:
    """A stream of its own for the staging copies between device and pinned host memory, so
    that they overlap the kernels of the caller's stream: non-blocking where CuPy is here
    (a blocking stream, Numba's only kind, waits for all work on the legacy default
    stream, which is the caller's when it runs on Numba's or CuPy's null stream).

    Under the simulator, whose streams run everything at once, a stream that defers its
    copies until a :class:`Fence` recorded after them is waited for (by the host or by
    another stream) or the stream is synchronized: a copy that nothing waited for has not
    happened yet, as on a GPU, so a missing wait shows as wrong bytes in the simulator's
    tests instead of passing by luck."""
    if simulator():
        return _DeferredStream()
    from numba import cuda

    cp = _cupy()
    if cp is not None:  # non-blocking: free of the legacy default stream's implicit syncs
        owner = cp.cuda.Stream(non_blocking=True)
        _COPY_STREAMS.append(owner)  # (a few a process, one each way per thread: kept)
        return cuda.external_stream(owner.ptr)
    return cuda.stream()


#: the CuPy streams behind :func:`copy_stream`'s Numba views, kept alive
_COPY_STREAMS: list[Any] = []


class _DeferredStream:
    """The simulator's copy stream: copies kept in order, run when something waits for them."""

    def __init__(self) -> None:
        self._pending: list[Any] = []
        self._done = 0  # copies run so far (the position a fence records counts from 0)

    @property
    def enqueued(self) -> int:
        return self._done + len(self._pending)

    @property
    def ran(self) -> int:
        return self._done

    def enqueue(self, copy: Any) -> None:
        self._pending.append(copy)

    def run_to(self, position: int) -> None:
        """Run the copies enqueued before ``position``."""
        with _simulator_lock:
            while self._done < position and self._pending:
                self._pending.pop(0)()
                self._done += 1

    def synchronize(self) -> None:
        self.run_to(self.enqueued)


class Fence:
    """The work a stream holds when the fence is recorded (a CUDA event): the host waits
    for it (:meth:`wait`), or another stream does without the host (:meth:`wait_on`)."""

    def __init__(self, stream: Any) -> None:
        self._deferred = stream if isinstance(stream, _DeferredStream) else None
        if self._deferred is not None:
            self._position = self._deferred.enqueued
            self._event = None
        elif simulator():  # (the simulator's kernels and copies run when enqueued)
            self._event = None
        else:
            from numba import cuda

            self._event = cuda.event(timing=False)
            self._event.record(stream)

    def wait(self) -> None:
        """Block the host until the fenced work is done."""
        if self._deferred is not None:
            self._deferred.run_to(self._position)
        elif self._event is not None:
            self._event.synchronize()

    def wait_on(self, stream: Any) -> None:
        """Make ``stream``'s later work wait for the fenced work (on the device)."""
        if self._deferred is not None:
            self._deferred.run_to(self._position)  # (the simulator's kernels run at once)
        elif self._event is not None and not isinstance(stream, _DeferredStream):
            self._event.wait(stream)

    def done(self) -> bool:
        """Whether the fenced work is done (never blocks; under the simulator, whether a
        wait ran it)."""
        if self._deferred is not None:
            return self._deferred.ran >= self._position
        return self._event is None or bool(self._event.query())

    def poll(self) -> bool:
        """:meth:`done`, asked by a host that waits for it to become true (a send waiting
        for its copy). A GPU finishes the work by itself; the simulator's deferred copies
        run at the second poll of a fence, so that the host sees a copy still running once
        and the code that waits for it is exercised."""
        if self._deferred is None or self.done():
            return self.done()
        self._polls = getattr(self, "_polls", 0) + 1
        if self._polls < 2:
            return False
        self.wait()
        return True


def _simulated_view(obj: Any) -> Any:
    """Under the simulator: a simulated device array over the host memory ``obj``'s
    ``__cuda_array_interface__`` points to (no copy)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    if cai.get("strides") is not None:
        raise ValueError("x must be C-contiguous (the interface gives strides)")
    n = int(np.prod(shape)) if shape else 1
    ptr = cai["data"][0]
    if n == 0:
        return FakeCUDAArray(np.empty(shape, dtype))
    raw = (ctypes.c_uint8 * (n * dtype.itemsize)).from_address(ptr)
    return FakeCUDAArray(np.frombuffer(raw, dtype=dtype).reshape(shape))
