"""Device memory: CUDA buffers, the GPU kernels (``kernels/*_cuda.py``), staging for MPI.

:class:`DeviceArrays` is the interface of :class:`~mpicomp.backend.host.HostArrays`
on the GPU: a codec's kernels, the element-wise sums and scans, the error
feedback's arithmetic, each enqueued on one CUDA stream. The gradient
reducer uses :data:`DEVICE` (the caller's current stream at each call).

:class:`DeviceMemory` is what a compressed call on device buffers works in:
values on the device, and streams either on the device too, handed to a
CUDA-aware MPI (``direct``), or in page-locked host buffers that only the
compressed bytes are copied through (``staged``); the pools
(:class:`DevicePools`) grow and are reused across calls. Every kernel and
copy is enqueued on the stream captured when the call started; the host
waits for it only right before MPI touches a buffer the stream writes or
reads (:class:`MPIOnDevice`).
"""
from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from .. import cuda_runtime as cuda
from ..errors import UncompressibleError
from .host import Scratch, check_float
from .mpi_buffers import for_mpi, spec_object, with_object
from .mpi_library import cuda_aware
from .staging import Staging

if TYPE_CHECKING:
    from ..codecs import Codec

__all__ = ["DEVICE", "DeferredSend", "DeviceArrays", "DeviceMemory", "DevicePools",
           "MPIOnDevice"]


class DeviceArrays:
    """Operations on flat Numba device arrays, enqueued on :attr:`stream`."""

    on_device = True
    place = "device"

    @property
    def stream(self) -> Any:
        """The CUDA stream work is enqueued on (here: the caller's current stream)."""
        return cuda.current_stream()

    # -- arrays -------------------------------------------------------------------
    def view(self, name: str, g: Any) -> Any:
        """A flat Numba device array over a gradient's memory (no copy)."""
        d = cuda.as_device(g, f"gradient {name!r}")
        check_float(name, np.dtype(d.dtype))
        return d

    def empty(self, n: int, dtype: Any) -> Any:
        return cuda.as_device(cuda.empty(n, dtype), "array", sync=False)

    def fresh_wire(self, nbytes: int) -> Any:
        """A new stream buffer that outlives the call (a frame, a landing buffer)."""
        return self.empty(nbytes, np.uint8)

    def launch(self, kernel: Any, items: int, *args: Any) -> None:
        """``kernel`` over ``items`` work items on :attr:`stream` (nothing when 0)."""
        if items:
            blocks, threads = cuda.grid(items)
            with cuda.serialized():
                kernel[blocks, threads, self.stream](*args)

    # -- the codec's kernels ------------------------------------------------------------
    def encode(self, codec: Codec, x: Any, out: Any) -> Any:
        """Encode ``x`` into the head of the device ``out``; returns that head (a variable
        codec's: the bytes it used).

        The refusal flag is not read: the agreement step (or the point-to-point
        screen) found ``x`` finite and in range, so the call stays asynchronous."""
        xd = cuda.as_device(x)
        n = codec.stream_nbytes(xd.size, np.dtype(xd.dtype))
        if out.size < n:
            raise ValueError(f"a stream buffer of {out.size} bytes for a stream of {n}")
        if n:
            with cuda.serialized():
                used = codec.encode_on_stream(xd, out[:n], self.stream, True)
            n = n if used is None else used
        return out[:n]

    def reconstruct(self, codec: Codec, x: Any, stream: Any, out: Any) -> Any:
        """:meth:`decode` of ``stream``, the encode of ``x``, into ``out``: made from ``x``
        by a kernel where the codec can (``Codec.reconstructs``); returns ``out``."""
        if not codec.reconstructs:
            return self.decode(codec, stream, out)
        xd = cuda.as_device(x)
        od = cuda.as_device(out, "out")
        if od.size:
            with cuda.serialized():
                codec.reconstruct_on_stream(
                    xd, codec.stream_part(stream, od.size, np.dtype(od.dtype)), od, self.stream)
        return out

    def decode(self, codec: Codec, stream: Any, out: Any) -> Any:
        """Decode the head of the device ``stream`` into ``out``; returns ``out``."""
        od = cuda.as_device(out, "out")
        dt = np.dtype(od.dtype)
        n = codec.min_stream_nbytes(od.size, dt)
        if stream.size < n:
            raise ValueError(f"a stream buffer of {stream.size} bytes for a stream of {n}")
        if od.size:
            with cuda.serialized():
                codec.decode_on_stream(codec.stream_part(stream, od.size, dt), od, self.stream)
        return out

    def roundtrip(self, codec: Codec, x: Any, out: Any = None) -> Any:
        """C(x) (into the device array ``out`` when given), or ``x`` itself when the codec
        refuses it (then sent plain)."""
        try:
            stream = codec.encode(x)
        except UncompressibleError:
            return x
        if out is not None:
            return codec.decode(stream, out=out)
        return cuda.as_device(codec.decode(stream, count=x.size, dtype=x.dtype), "C(x)",
                              sync=False)

    # -- element-wise ---------------------------------------------------------------
    def add_into(self, acc: Any, x: Any) -> None:
        from ..kernels import scan_cuda

        self.launch(scan_cuda.add_into, acc.size, acc, x)

    def copy(self, dst: Any, src: Any) -> None:
        """``dst[:] = src``: device from device or host, host from device (enqueued), or
        host from host (after the stream, which may still write ``src``)."""
        if dst is src or not dst.size:
            return
        if cuda.is_device_array(dst):
            if cuda.is_device_array(src) and cuda.same_memory(dst, src):
                return  # in place
            with cuda.serialized():
                cuda.copy_to_device(dst, src, self.stream)
        elif cuda.is_device_array(src):
            cuda.copy_to_host(dst, src, self.stream)
        else:  # staged streams: host memory the stream may still be writing
            self.stream.synchronize()
            dst[...] = src

    def divide(self, y: Any, p: int) -> None:
        from ..kernels import feedback_cuda

        self.launch(feedback_cuda.divide, y.size, y, np.dtype(y.dtype).type(p))

    def max_abs(self, x: Any) -> float:
        """max |x| over a device array (+Inf for NaN/Inf); waits for the stream."""
        from ..kernels import scan_cuda

        return scan_cuda.max_abs(x, self.stream)

    def finite(self, x: Any, rt: Any = None) -> bool:
        """True when every ``x`` (``x - rt`` when given) is finite; waits for the stream."""
        from ..kernels import feedback_cuda

        if not x.size:
            return True
        stream = self.stream
        flag = cuda.zeros_like_flag(stream)
        if rt is None:
            self.launch(feedback_cuda.nonfinite, x.size, x, flag)
        else:
            self.launch(feedback_cuda.nonfinite_difference, x.size, x, rt, flag)
        return not flag.copy_to_host(stream=stream)[0]

    def residual(self, x: Any, rt: Any, prev: Any, a: float, b: float, lim: float,
                 out: Any = None) -> Any:
        """``clip(a * prev + b * (x - rt), -lim, lim)``, into ``out`` when given (it may be
        ``rt``), else into ``prev`` when given."""
        from ..kernels import feedback_cuda

        t = np.dtype(x.dtype).type
        if out is None:
            out = prev if prev is not None else self.empty(x.size, np.dtype(x.dtype))
        if prev is None:
            a = 0.0
        self.launch(feedback_cuda.residual, x.size, x, rt, out if prev is None else prev,
                    t(a), t(b), t(lim), out)
        return out

    def order_keys(self, codes: Any) -> None:
        """Turn int16 codes into keys that order like their values (negative ones flipped)."""
        from ..kernels import scan_cuda

        self.launch(scan_cuda.order_keys, codes.size, codes)


class DevicePools:
    """The grow-only device and pinned-host scratch pools of one thread's private communicator."""

    def __init__(self) -> None:
        self.device = Scratch(_device_alloc)
        self.pinned = Scratch(cuda.pinned_empty)
        #: the staged path's copy streams and fences over these pools' wire buffers
        self.staging = Staging(self.device, self.pinned)
        self._stream: Any = None

    def use(self, stream: Any) -> None:
        """Start a call on ``stream``: when the previous call ran on another stream,
        wait for it and for the staging copies first (its last decode may still read
        these buffers)."""
        previous = self._stream
        if previous is not None and previous is not stream and _key(previous) != _key(stream):
            previous.synchronize()
            self.staging.synchronize()
        self._stream = stream


def _key(stream: Any) -> Any:
    try:
        return int(stream)
    except TypeError:
        return id(stream)


def _device_alloc(nbytes: int) -> Any:
    return cuda.as_device(cuda.empty(nbytes, np.uint8), "scratch", sync=False)


class DeviceMemory(DeviceArrays):
    """A call's values on the device; its streams on the device (``direct``) or staged
    in pinned host memory. Without ``stream`` and ``direct``: the caller's current
    stream, and whether MPI is CUDA-aware."""

    def __init__(self, pools: DevicePools, stream: Any = None, direct: bool | None = None) -> None:
        stream = cuda.current_stream() if stream is None else stream
        direct = cuda_aware()[0] if direct is None else direct
        pools.use(stream)
        self.pools = pools
        self._stream = stream
        self.direct = direct
        self.wire_on_device = direct
        self.label = "device, CUDA-aware MPI" if direct else "device, staged through pinned host"

    @property
    def stream(self) -> Any:
        return self._stream

    # -- scratch ----------------------------------------------------------------
    def values(self, name: str, n: int, dtype: Any) -> Any:
        return self.pools.device.get(name, n, dtype)

    def wire(self, name: str, nbytes: int) -> Any:
        pool = self.pools.device if self.direct else self.pools.pinned
        return pool.get("wire:" + name, nbytes, np.uint8)

    def host(self, name: str, n: int, dtype: Any) -> np.ndarray:
        """Pinned host scratch (for data MPI must see in host memory, e.g. for a Python op)."""
        return self.pools.pinned.get("host:" + name, n, dtype)

    def fresh_wire(self, nbytes: int) -> Any:
        if self.direct:
            return super().fresh_wire(nbytes)
        return np.empty(nbytes, dtype=np.uint8)

    # -- the codec's kernels, streams staged through the host ------------------------
    # A wire buffer's piece has a stage of its own (its mirror, mpicomp.backend.staging),
    # copied on the staging stream; other host memory (a frame, a landing buffer) goes
    # through the one shared stage, copied on the call's stream.
    def encode(self, codec: Codec, x: Any, out: Any) -> Any:
        if self.direct:
            return super().encode(codec, x, out)
        staging = self.pools.staging
        stage = staging.mirror(out)
        if stage is None:
            staged = super().encode(codec, x, self.pools.device.get("stage", out.size, np.uint8))
            out = out[:staged.size]
            cuda.copy_to_host(out, staged, self.stream)
            return out
        staging.before_write(out, self.stream)
        staged = super().encode(codec, x, stage)
        out = out[:staged.size]
        staging.to_host(out, staged, self.stream)
        return out

    def decode(self, codec: Codec, stream: Any, out: Any) -> Any:
        if self.direct:
            return super().decode(codec, stream, out)
        return self._from_stage(stream, lambda staged: super(DeviceMemory, self).decode(
            codec, staged, out))

    def reconstruct(self, codec: Codec, x: Any, stream: Any, out: Any) -> Any:
        if self.direct or not codec.reconstructs:  # (else: super() decodes through self)
            return super().reconstruct(codec, x, stream, out)
        # a reconstruct reads only the stream's head (Codec.reconstruct_on_stream): only that
        # crosses to the device, not the payload a decode would need
        head = stream[:codec.min_stream_nbytes(out.size, np.dtype(out.dtype))]
        return self._from_stage(head, lambda staged: super(DeviceMemory, self).reconstruct(
            codec, x, staged, out))

    def _from_stage(self, host: Any, kernel: Any) -> Any:
        """``kernel(staged)`` on the device copy of the host bytes ``host``."""
        staging = self.pools.staging
        stage = staging.mirror(host)
        if stage is None:
            stage = self.pools.device.get("stage", host.size, np.uint8)
            cuda.copy_to_device(stage, host, self.stream)
            return kernel(stage)
        staging.to_device(stage, host, self.stream)
        result = kernel(stage)
        staging.read_by(host, self.stream)
        return result

    def copy(self, dst: Any, src: Any) -> None:
        """:meth:`DeviceArrays.copy`, waiting for the staging copies of wire bytes first;
        a copy between the device and wire bytes is waited for too (rare: the algorithms
        copy values, not streams), so that it needs no fence of its own."""
        staging = self.pools.staging
        wire = [a for a in (dst, src) if staging.tracked(a)]
        for a in wire:
            staging.wait_host(a)
        super().copy(dst, src)
        if wire and (cuda.is_device_array(dst) or cuda.is_device_array(src)):
            self.stream.synchronize()

    def order_keys(self, codes: Any) -> None:
        if not self.wire_on_device:  # staged: wait for the copy into the host buffer
            self.synchronize()
            np.bitwise_xor(codes, np.int16(0x7FFF), out=codes, where=codes < 0)
        else:
            super().order_keys(codes)

    # -- MPI --------------------------------------------------------------------------
    def mpi_comm(self, comm: Any) -> Any:
        return MPIOnDevice(comm, self)

    def synchronize(self) -> None:
        """Block until the call's stream and the staging copies are done."""
        self.stream.synchronize()
        self.pools.staging.synchronize()

    def before_mpi(self, buffers: list[Any], reading: bool = False) -> None:
        """Block until the work that writes or reads ``buffers`` is done, before MPI touches
        them (``reading``: MPI only reads them): for wire bytes of a staged call, only
        their own staging copies (the kernels of later pieces go on); for anything else,
        the stream and every copy."""
        staging = self.pools.staging
        if self.direct or not all(staging.tracked(b) for b in buffers):
            self.synchronize()
            return
        for b in buffers:
            staging.wait_host(b, reading)

    def defers_send(self, buf: Any) -> bool:
        """Whether a send of ``buf`` may wait for its staging copy without the host
        waiting (wire bytes of a staged call: :class:`DeferredSend`)."""
        return not self.direct and self.pools.staging.tracked(buf)

    def readable(self, buf: Any) -> bool:
        """Whether the staging copies that write the wire bytes ``buf`` are done."""
        return self.pools.staging.readable(buf)


class MPIOnDevice:
    """A communicator whose buffer methods first wait for the work on their buffers.

    MPI reads and writes buffers as soon as it is called, and mpi4py does
    not look at the stream of a ``__cuda_array_interface__``: so the kernels
    and copies that produce (or still read) a buffer must have finished
    (:meth:`DeviceMemory.before_mpi`). Simulated device arrays are passed as
    their host memory behind ``__cuda_array_interface__`` (:func:`for_mpi`).
    """

    def __init__(self, comm: Any, memory: DeviceMemory) -> None:
        self._comm = comm
        self._memory = memory
        #: sends of wire bytes whose copies were still running, in the order of the calls
        self._sends: collections.deque[DeferredSend] = collections.deque()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._comm, name)
        if not callable(attr) or not name[:1].isupper() or name.startswith("Get_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.pump(block=True)  # (every send before this call has started)
            self._memory.before_mpi(_buffers([*args, *kwargs.values()]))
            return attr(*[_for_mpi(a) for a in args],
                        **{k: _for_mpi(v) for k, v in kwargs.items()})

        return call

    def Isend(self, buf: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - mpi4py's
        """MPI_Isend of ``buf``; of wire bytes whose staging copy still runs, a
        :class:`DeferredSend` that MPI gets once the copy is done (the host goes on
        queueing the next piece's kernels meanwhile)."""
        if kwargs or not self._memory.defers_send(buf):
            return self.__getattr__("Isend")(buf, *args, **kwargs)
        send = DeferredSend(self, buf, args)
        self._sends.append(send)
        self.pump()
        return send

    def Irecv(self, buf: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - mpi4py's
        """MPI_Irecv into ``buf`` once the copies that touch it are done; deferred sends
        need not start first (a receive does not overtake a send)."""
        self.pump()
        self._memory.before_mpi(_buffers([buf, *args, *kwargs.values()]))
        return self._comm.Irecv(_for_mpi(buf), *args, **kwargs)

    def pump(self, block: bool = False, until: DeferredSend | None = None) -> None:
        """Hand MPI the deferred sends whose copies are done, in the order they were
        called (``block``: all of them, or those up to ``until``, waiting for their
        copies)."""
        while self._sends:
            send = self._sends[0]
            if not block and not self._memory.readable(send.buf):
                return
            self._memory.before_mpi([send.buf], reading=True)
            send.request = self._comm.Isend(send.buf, *send.args)
            self._sends.popleft()
            if send is until:
                return

    def started(self, reqs: list[Any]) -> list[Any]:
        """``reqs`` as MPI requests: the deferred sends among them (and those before
        them) handed to MPI first."""
        waiting = [r for r in reqs if isinstance(r, DeferredSend) and r.request is None]
        if waiting:
            self.pump(block=True, until=max(waiting, key=self._sends.index))
        return [r.request if isinstance(r, DeferredSend) else r for r in reqs]


class DeferredSend:
    """An MPI_Isend of wire bytes that waits for their staging copy: MPI gets it once the
    copy is done (in the order of the sends, so that messages keep MPI's order), at the
    latest at the communicator's next other call or wait; ``Test`` and ``Wait`` as an
    ``MPI.Request``'s (:meth:`MPIOnDevice.started` turns a list into MPI requests)."""

    def __init__(self, comm: MPIOnDevice, buf: Any, args: tuple[Any, ...]) -> None:
        self._comm, self.buf, self.args = comm, buf, args
        self.request: Any = None

    def Test(self, status: Any = None) -> bool:  # noqa: N802 - MPI.Request's
        self._comm.pump()
        return self.request is not None and bool(self.request.Test(status))

    def Wait(self, status: Any = None) -> Any:  # noqa: N802 - MPI.Request's
        self._comm.pump(block=True)
        return self.request.Wait(status)


def _buffers(args: list[Any]) -> list[Any]:
    """The memory objects among an MPI method's arguments (a buffer spec's first item:
    ``[buf, counts, ...]``): everything but None, numbers, strings and MPI handles."""
    found: list[Any] = []
    for a in args:
        if isinstance(a, (list, tuple)):
            found.extend(_buffers(list(a[:1])))
        elif not (a is None or isinstance(a, (int, float, str, *_HANDLES))):
            found.append(a)
    return found


_HANDLES = (MPI.Op, MPI.Datatype, MPI.Status, MPI.Request, MPI.Info)


def _for_mpi(arg: Any) -> Any:
    return with_object(arg, for_mpi(spec_object(arg)))


#: device operations on the caller's current stream (the gradient reducer's)
DEVICE = DeviceArrays()
