"""Where a compressed call's arrays live, and the few operations that depend on it.

A compressed collective handles two kinds of arrays: *values* (the
caller's floats and partial sums) and *streams* (the codec's bytes, which
MPI moves). :class:`HostMemory` keeps both in NumPy arrays.
:class:`DeviceMemory` keeps the values on the GPU and the streams either on
the GPU too, handed to a CUDA-aware MPI (``direct``), or in page-locked
host buffers that only the compressed bytes are copied through
(``staged``). Both pools grow and are reused across calls.

The algorithms in :mod:`mpicomp.algorithms` and :mod:`mpicomp.collectives`
see only this interface (through :class:`~mpicomp.algorithms.common.Ctx`),
so one implementation of each runs on host and device buffers.

On the device every kernel and copy is enqueued on the stream captured when
the call started; the host waits for that stream only right before MPI
touches a buffer the stream writes or reads (:class:`MPIOnDevice`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import device
from .codecs import Codec

__all__ = ["DeviceMemory", "DevicePools", "HostMemory", "MPIOnDevice", "Scratch"]


class Scratch:
    """Named scratch arrays: ``get(name, n, dtype)`` returns ``n`` elements, reusing memory.

    A name's memory grows to the largest request and is kept; two names
    never share memory. ``alloc(nbytes)`` makes a flat uint8 buffer (host
    memory by default; the device memory passes device and pinned-host
    allocators). Not thread-safe: give each thread its own pool (one per engine).
    """

    def __init__(self, alloc: Callable[[int], Any] | None = None) -> None:
        self._alloc = alloc or (lambda nbytes: np.empty(nbytes, dtype=np.uint8))
        self._buffers: dict[str, Any] = {}

    def get(self, name: str, n: int, dtype: np.dtype | type) -> Any:
        dt = np.dtype(dtype)
        nbytes = n * dt.itemsize
        buf = self._buffers.get(name)
        if buf is None or buf.size < nbytes:
            # round up so that slowly growing requests do not reallocate each time
            buf = self._alloc(max(nbytes, 64) + (nbytes >> 3))
            self._buffers[name] = buf
        return buf[:nbytes].view(dt)


class HostMemory:
    """Values and streams in host memory (NumPy); kernels from ``kernels/*_cpu.py``."""

    on_device = False
    wire_on_device = False
    label = "host"

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch

    def values(self, name: str, n: int, dtype: Any) -> np.ndarray:
        return self.scratch.get(name, n, dtype)

    def wire(self, name: str, nbytes: int) -> np.ndarray:
        return self.scratch.get(name, nbytes, np.uint8)

    def host(self, name: str, n: int, dtype: Any) -> np.ndarray:
        """Host scratch (for data MPI must see in host memory)."""
        return self.scratch.get(name, n, dtype)

    def encode(self, codec: Codec, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        return codec.encode(x, out=out)

    def encode_guarded(self, codec: Codec, x: np.ndarray, out: np.ndarray) -> int:
        """Encode; the number of unsafe blocks (:meth:`Codec.encode_guarded`)."""
        return codec.encode_guarded(x, out)

    def decode(self, codec: Codec, stream: np.ndarray, out: np.ndarray) -> np.ndarray:
        return codec.decode(stream, out=out)

    def add_into(self, acc: np.ndarray, x: np.ndarray) -> None:
        from .kernels.scan_cpu import add_into

        add_into(acc, x)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        if dst is not src:
            dst[...] = src

    def max_abs(self, x: np.ndarray) -> float:
        from .kernels.scan_cpu import max_abs

        return max_abs(x) if x.size else 0.0

    def order_keys(self, codes: np.ndarray) -> None:
        np.bitwise_xor(codes, np.int16(0x7FFF), out=codes, where=codes < 0)

    def mpi_comm(self, comm: Any) -> Any:
        return comm

    def synchronize(self) -> None:
        pass


class DevicePools:
    """The grow-only device and pinned-host scratch pools of one thread's engine."""

    def __init__(self) -> None:
        self.device = Scratch(_device_alloc)
        self.pinned = Scratch(device.pinned_empty)
        self._stream: Any = None

    def use(self, stream: Any) -> None:
        """Start a call on ``stream``: when the previous call ran on another stream,
        wait for it first (its last decode may still read these buffers)."""
        previous = self._stream
        if previous is not None and previous is not stream and _key(previous) != _key(stream):
            previous.synchronize()
        self._stream = stream


def _key(stream: Any) -> Any:
    try:
        return int(stream)
    except TypeError:
        return id(stream)


def _device_alloc(nbytes: int) -> Any:
    return device.as_device(device.empty(nbytes, np.uint8), "scratch", sync=False)


class DeviceMemory:
    """Values on the device; streams on the device (``direct``) or staged in pinned host memory.

    ``stream`` is the CUDA stream (Numba's object) every kernel and copy of
    the call is enqueued on.
    """

    on_device = True

    def __init__(self, pools: DevicePools, stream: Any, direct: bool) -> None:
        pools.use(stream)
        self.pools = pools
        self.stream = stream
        self.direct = direct
        self.wire_on_device = direct
        self.label = "device, CUDA-aware MPI" if direct else "device, staged through pinned host"

    # -- scratch ----------------------------------------------------------------
    def values(self, name: str, n: int, dtype: Any) -> Any:
        return self.pools.device.get(name, n, dtype)

    def wire(self, name: str, nbytes: int) -> Any:
        pool = self.pools.device if self.direct else self.pools.pinned
        return pool.get("wire:" + name, nbytes, np.uint8)

    def host(self, name: str, n: int, dtype: Any) -> np.ndarray:
        """Pinned host scratch (for data MPI must see in host memory, e.g. for a Python op)."""
        return self.pools.pinned.get("host:" + name, n, dtype)

    # -- codec --------------------------------------------------------------------
    def encode(self, codec: Codec, x: Any, out: Any) -> Any:
        with device.using_stream(self.stream), device.serialized():
            # checked: the agreement step (or the p2p screen) found x finite and in range
            if self.direct:
                return codec.encode(x, out=out, checked=True)
            staged = self.pools.device.get("stage", out.size, np.uint8)
            codec.encode(x, out=staged, checked=True)
            device.copy_to_host(out, staged, self.stream)
            return out

    def decode(self, codec: Codec, stream: Any, out: Any) -> Any:
        with device.using_stream(self.stream), device.serialized():
            if self.direct:
                return codec.decode(stream, out=out)
            staged = self.pools.device.get("stage", stream.size, np.uint8)
            device.copy_to_device(staged, stream, self.stream)
            return codec.decode(staged, out=out)

    # -- element-wise ---------------------------------------------------------------
    def add_into(self, acc: Any, x: Any) -> None:
        from .kernels import scan_cuda

        if acc.size:
            blocks, threads = device.grid(acc.size)
            with device.serialized():
                scan_cuda.add_into[blocks, threads, self.stream](acc, x)

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[:] = src`` for values, or for streams wherever they live."""
        if dst is src or not dst.size:
            return
        if device.is_device_array(dst):
            if device.is_device_array(src) and device.same_memory(dst, src):
                return  # in place
            device.copy_to_device(dst, src, self.stream)
        else:  # staged streams: host memory the stream may still be writing
            self.stream.synchronize()
            dst[...] = src

    def max_abs(self, x: Any) -> float:
        """max |x| over a device array (+Inf for NaN/Inf); waits for the stream."""
        from .kernels import scan_cuda

        if not x.size:
            return 0.0
        wide = np.dtype(x.dtype) == np.float64
        utype, ftype = (np.uint64, np.float64) if wide else (np.uint32, np.float32)
        mask = utype(0x7FFFFFFFFFFFFFFF if wide else 0x7FFFFFFF)
        result = device.as_device(device.empty(1, utype), "result", sync=False)  # CuPy's pool
        result.copy_to_device(np.zeros(1, utype), stream=self.stream)
        blocks, threads = device.grid(x.size)
        with device.serialized():
            scan_cuda.max_abs_bits[min(blocks, 256), threads, self.stream](
                x.view(utype), mask, result)
        bits = result.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        v = float(bits.view(ftype)[0])
        return v if v <= np.finfo(np.float64).max else float("inf")

    def order_keys(self, codes: Any) -> None:
        from .kernels import scan_cuda

        if not self.wire_on_device:  # staged: wait for the copy into the host buffer
            self.stream.synchronize()
            np.bitwise_xor(codes, np.int16(0x7FFF), out=codes, where=codes < 0)
        elif codes.size:
            blocks, threads = device.grid(codes.size)
            with device.serialized():
                scan_cuda.order_keys[blocks, threads, self.stream](codes)

    # -- MPI --------------------------------------------------------------------------
    def mpi_comm(self, comm: Any) -> Any:
        return MPIOnDevice(comm, self)

    def synchronize(self) -> None:
        self.stream.synchronize()


class MPIOnDevice:
    """A communicator whose buffer methods first wait for the call's stream.

    MPI reads and writes buffers as soon as it is called, and mpi4py does
    not look at the stream of a ``__cuda_array_interface__``: so the kernels
    and copies that produce (or still read) a buffer must have finished.
    Simulated device arrays are passed as their host memory behind
    ``__cuda_array_interface__`` (:func:`mpicomp.device.for_mpi`).
    """

    def __init__(self, comm: Any, memory: DeviceMemory) -> None:
        self._comm = comm
        self._memory = memory

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._comm, name)
        if not callable(attr) or not name[:1].isupper() or name.startswith("Get_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._memory.synchronize()
            return attr(*[_for_mpi(a) for a in args],
                        **{k: _for_mpi(v) for k, v in kwargs.items()})

        return call


def _for_mpi(arg: Any) -> Any:
    from .plain import spec_object, with_object

    return with_object(arg, device.for_mpi(spec_object(arg)))
