"""Where the OSU-style benchmarks keep their buffers: ``-d``/``--buffer numpy|cupy|torch``.

The names follow OMB-Py's ``--buffer`` option. ``numpy`` buffers are host
memory; ``cupy`` and ``torch`` buffers are CUDA device memory, handed to
mpicomp's methods as they are (mpicomp takes anything with
``__cuda_array_interface__`` or a CUDA ``__dlpack__``). Each rank uses GPU
``rank % device count``. The reference data and the exact results always
live on the host; :meth:`Buffers.put` copies them to a buffer of the kind
and :meth:`Buffers.get` copies a buffer back.

>>> b = buffers("numpy")
>>> import numpy as np
>>> x = np.arange(3, dtype=np.float32)
>>> y = b.put(x)
>>> y is x, b.get(y).tolist()
(False, [0.0, 1.0, 2.0])
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["KINDS", "BufferError", "Buffers", "buffers"]

KINDS = ("numpy", "cupy", "torch")


class BufferError(RuntimeError):
    """A buffer kind cannot be used here (package missing, no GPU); the message says why."""


class Buffers:
    """Host NumPy buffers; the device kinds override the four methods."""

    kind = "numpy"
    on_device = False

    def put(self, x: np.ndarray) -> Any:
        """A new buffer of this kind holding a copy of the host array ``x``."""
        return np.array(x, copy=True)

    def zeros(self, n: int, dtype: Any) -> Any:
        return np.zeros(n, dtype=dtype)

    def get(self, buf: Any) -> np.ndarray:
        """The buffer's values as a host array (a copy for device buffers)."""
        return np.asarray(buf)

    def synchronize(self) -> None:
        """Wait for work queued on the current device stream (nothing to wait for on the host)."""

    def describe(self) -> str:
        return "numpy (host memory)"


class _CupyBuffers(Buffers):
    kind = "cupy"
    on_device = True

    def __init__(self, rank: int) -> None:
        try:
            import cupy
        except ImportError as exc:
            raise BufferError(
                f"--buffer cupy needs CuPy, which is not importable ({exc}); install it with "
                "'pip install cupy-cuda12x' (or mpicomp[gpu])"
            ) from None
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDA driver missing or broken: CuPy raises its own errors
            raise BufferError(f"--buffer cupy: no usable CUDA GPU ({exc})") from None
        if count < 1:
            raise BufferError("--buffer cupy: no CUDA GPU is visible")
        self.cp = cupy
        self.device = rank % count
        cupy.cuda.Device(self.device).use()

    def put(self, x: np.ndarray) -> Any:
        return self.cp.asarray(x)

    def zeros(self, n: int, dtype: Any) -> Any:
        return self.cp.zeros(n, dtype=dtype)

    def get(self, buf: Any) -> np.ndarray:
        return self.cp.asnumpy(buf)

    def synchronize(self) -> None:
        self.cp.cuda.get_current_stream().synchronize()

    def describe(self) -> str:
        props = self.cp.cuda.runtime.getDeviceProperties(self.device)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"cupy (CUDA device memory, {name})"


class _TorchBuffers(Buffers):
    kind = "torch"
    on_device = True

    def __init__(self, rank: int) -> None:
        try:
            import torch
        except ImportError as exc:
            raise BufferError(
                f"--buffer torch needs PyTorch, which is not importable ({exc}); install a "
                "CUDA build of it ('pip install torch')"
            ) from None
        if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
            raise BufferError("--buffer torch: no CUDA GPU is visible "
                              "(torch.cuda.is_available() is False)")
        self.torch = torch
        self.device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(self.device)

    def put(self, x: np.ndarray) -> Any:
        return self.torch.from_numpy(np.array(x, copy=True)).to(self.device)

    def zeros(self, n: int, dtype: Any) -> Any:
        dt = getattr(self.torch, np.dtype(dtype).name)
        return self.torch.zeros(n, dtype=dt, device=self.device)

    def get(self, buf: Any) -> np.ndarray:
        return buf.cpu().numpy()

    def synchronize(self) -> None:
        self.torch.cuda.current_stream().synchronize()

    def describe(self) -> str:
        return f"torch (CUDA device memory, {self.torch.cuda.get_device_name(self.device)})"


def buffers(kind: str, rank: int = 0) -> Buffers:
    """The buffers of ``kind`` for this rank; :class:`BufferError` when they cannot be had."""
    if kind == "numpy":
        return Buffers()
    if kind == "cupy":
        return _CupyBuffers(rank)
    if kind == "torch":
        return _TorchBuffers(rank)
    raise BufferError(f"unknown buffer kind {kind!r}; use one of {list(KINDS)}")
