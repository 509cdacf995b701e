"""Where the reducer's arrays live: host (NumPy) or device (CUDA kernels), one interface.

:class:`GradientReducer` packs gradients into buckets, adds and updates the
error feedback's residuals and divides the reduced bucket by the rank
count. :data:`HOST` does this with NumPy on host buckets; :data:`DEVICE`
with the kernels of ``kernels/feedback_cuda.py`` and device copies on
device buckets (CuPy arrays, PyTorch CUDA tensors, Numba device arrays:
anything ``mpicomp.device`` views), on the caller's current stream, so a
device gradient never leaves the GPU. :func:`ops_for` picks one per gradient.

Arrays are NumPy arrays on the host (a gradient keeps its shape) and flat
Numba device arrays over the caller's memory on the device.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import device, placement
from ..errors import UncompressibleError

__all__ = ["DEVICE", "HOST", "ops_for"]


class HostOps:
    """NumPy on host memory."""

    place = "host"

    def view(self, name: str, g: Any) -> np.ndarray:
        """A NumPy view of a gradient's memory (no copy), or TypeError/ValueError."""
        if isinstance(g, np.ndarray):
            arr = g
        elif hasattr(g, "numpy") and str(getattr(g, "device", "")) == "cpu":
            arr = g.detach().numpy() if hasattr(g, "detach") else g.numpy()
        else:
            raise TypeError(f"gradient {name!r}: GradientReducer takes NumPy arrays, CPU "
                            f"tensors NumPy can view and CUDA device buffers, got "
                            f"{type(g).__name__}")
        if not arr.flags.c_contiguous:
            raise ValueError(f"gradient {name!r} must be C-contiguous (strides {arr.strides})")
        _check_float(name, arr.dtype)
        return arr

    def empty(self, n: int, dtype: np.dtype) -> np.ndarray:
        return np.empty(n, dtype)

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst.reshape(-1), src.reshape(-1))

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        x += y

    def divide(self, y: np.ndarray, p: int) -> None:
        np.divide(y, y.dtype.type(p), out=y)

    def finite(self, x: np.ndarray, rt: np.ndarray | None = None) -> bool:
        """True when every ``x`` (``x - rt`` when given) is finite."""
        with np.errstate(over="ignore", invalid="ignore"):
            return bool(np.isfinite(x if rt is None else x - rt).all())

    def residual(self, x: np.ndarray, rt: np.ndarray, prev: np.ndarray | None, a: float,
                 b: float, lim: float) -> np.ndarray:
        """``clip(a * prev + b * (x - rt), -lim, lim)`` in ``x``'s dtype (a new array)."""
        t = x.dtype.type
        v = t(a) * prev if (prev is not None and a != 0) else np.zeros_like(x)
        if b != 0:
            v += t(b) * (x - rt)
        return np.clip(v, -t(lim), t(lim), out=v)

    def roundtrip(self, codec: Any, x: np.ndarray) -> np.ndarray:
        """C(x), or ``x`` itself when the codec refuses it (then sent plain)."""
        try:
            return codec.decode(codec.encode(x), out=np.empty_like(x))
        except UncompressibleError:
            return x


class DeviceOps:
    """CUDA kernels and device copies on the caller's current stream."""

    place = "device"

    def view(self, name: str, g: Any) -> Any:
        d = device.as_device(g, f"gradient {name!r}")
        _check_float(name, np.dtype(d.dtype))
        return d

    def empty(self, n: int, dtype: np.dtype) -> Any:
        return device.as_device(device.empty(n, dtype), "bucket", sync=False)

    def copy(self, dst: Any, src: Any) -> None:
        if dst.size:
            with device.serialized():
                dst.copy_to_device(src, stream=device.current_stream())

    def add(self, x: Any, y: Any) -> None:
        from ..kernels import scan_cuda

        self._launch(scan_cuda.add_into, x.size, x, y)

    def divide(self, y: Any, p: int) -> None:
        from ..kernels import feedback_cuda

        self._launch(feedback_cuda.divide, y.size, y, np.dtype(y.dtype).type(p))

    def finite(self, x: Any, rt: Any = None) -> bool:
        from ..kernels import feedback_cuda

        if not x.size:
            return True
        stream = device.current_stream()
        flag = device.zeros_like_flag(stream)
        if rt is None:
            self._launch(feedback_cuda.nonfinite, x.size, x, flag)
        else:
            self._launch(feedback_cuda.nonfinite_difference, x.size, x, rt, flag)
        return not flag.copy_to_host(stream=stream)[0]

    def residual(self, x: Any, rt: Any, prev: Any, a: float, b: float, lim: float) -> Any:
        from ..kernels import feedback_cuda

        t = np.dtype(x.dtype).type
        out = prev if prev is not None else self.empty(x.size, np.dtype(x.dtype))
        if prev is None:
            a = 0.0
        self._launch(feedback_cuda.residual, x.size, x, rt, out, t(a), t(b), t(lim), out)
        return out

    def roundtrip(self, codec: Any, x: Any) -> Any:
        try:
            stream = codec.encode(x)
        except UncompressibleError:
            return x
        return device.as_device(codec.decode(stream, count=x.size, dtype=x.dtype), "C(x)",
                                sync=False)

    @staticmethod
    def _launch(kernel: Any, n: int, *args: Any) -> None:
        if n:
            blocks, threads = device.grid(n)
            with device.serialized():
                kernel[blocks, threads, device.current_stream()](*args)


HOST = HostOps()
DEVICE = DeviceOps()


def ops_for(name: str, g: Any) -> HostOps | DeviceOps:
    """:data:`DEVICE` for a CUDA buffer mpicomp's kernels may use, :data:`HOST` otherwise;
    TypeError for a CUDA interface over memory the kernels must not touch."""
    where = placement.of(g)
    if where.place is placement.Place.DEVICE:
        return DEVICE
    if where.place is placement.Place.FOREIGN:
        raise TypeError(f"gradient {name!r}: {where.reason.split(' (')[0]}; GradientReducer "
                        "reduces host arrays and device buffers of a usable CUDA device")
    return HOST


def _check_float(name: str, dtype: np.dtype) -> None:
    if dtype.kind != "f":
        raise TypeError(f"gradient {name!r} must be a float array, got dtype {dtype}")
