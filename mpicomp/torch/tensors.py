"""Tensors as the communicators take them, shared by the PyTorch integration's modules."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..comm import Comm
from ..comm import world as comm_world

__all__ = ["TensorMemory", "buffer", "reducible", "require_torch", "world", "write_back"]


def require_torch() -> Any:
    """PyTorch, or an ImportError saying how to install it."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("mpicomp.torch needs PyTorch: pip install 'mpicomp[torch]' "
                          "(or pip install torch)") from e
    return torch


def buffer(t: Any) -> Any:
    """What a communicator takes for a contiguous tensor: a NumPy view on the CPU, the
    tensor itself on a CUDA device (a device buffer)."""
    return t.numpy() if t.device.type == "cpu" else t


class TensorMemory:
    """Where a module's own tensors live (``device``: the CPU or a CUDA device), and what
    mpicomp takes for them: :meth:`wire` for a communicator, :meth:`values` for the array
    operations :attr:`ops` (``mpicomp.backend``'s host operations on NumPy views, or its
    device operations, kernels on a CUDA stream, on Numba device arrays over the tensors'
    memory). Nothing is copied between host and device here; mpicomp's calls and kernels
    on CUDA tensors run inside :meth:`ordered`, on PyTorch's current stream."""

    def __init__(self, device: Any) -> None:
        problem = self.unusable(device)
        if problem is not None:
            raise TypeError(problem)
        self.device = device
        #: whether the tensors are device memory
        self.on_device = device.type == "cuda"
        if self.on_device:
            from ..backend.device import DEVICE

            self.ops: Any = DEVICE
        else:
            from ..backend.host import HOST

            self.ops = HOST

    @staticmethod
    def unusable(device: Any) -> str | None:
        """Why tensors on ``device`` cannot be worked on in place (None: they can): a device
        other than the CPU and CUDA, or CUDA memory mpicomp's kernels cannot use (no usable
        CUDA device for Numba, as under ROCm)."""
        if device.type == "cpu":
            return None
        if device.type != "cuda":
            return f"tensors on the CPU or a CUDA device, got {device}"
        from ..backend import placement

        try:  # (an error here is this rank's only: said, not raised, so all ranks agree)
            where = placement.of(require_torch().empty(1, device=device))
        except Exception as e:  # noqa: BLE001 - a driver or runtime that fails to start
            return f"tensors on {device}: {type(e).__name__}: {e}"
        if not where.on_device:
            return (f"tensors on {device} are not memory mpicomp's CUDA kernels can use "
                    f"({where.reason or where.place.name})")
        return None

    @contextlib.contextmanager
    def ordered(self) -> Iterator[None]:
        """A context in which mpicomp's calls and kernels on these tensors run on PyTorch's
        current stream of their device (that device current), so that they keep the order
        of PyTorch's own operations on them; nothing on the CPU."""
        if self.device.type != "cuda":
            yield
            return
        from numba import cuda

        from .. import cuda_runtime

        torch = require_torch()
        index = self.device.index if self.device.index is not None else \
            torch.cuda.current_device()
        with cuda.gpus[index]:
            handle = torch.cuda.current_stream(self.device).cuda_stream
            stream = (cuda.external_stream(handle) if handle else
                      getattr(cuda, "legacy_default_stream", cuda.default_stream)())
            with cuda_runtime.using_stream(stream, index):
                yield

    def stream(self) -> Any:
        """PyTorch's current stream of the device (None on the CPU): what a call started
        now runs on, for :meth:`after`."""
        if self.device.type != "cuda":
            return None
        return require_torch().cuda.current_stream(self.device)

    def after(self, started: Any) -> None:
        """Make PyTorch's current stream wait for the work queued on ``started`` (a call's
        :meth:`stream` when it started; nothing when it is the current one or None): a
        call completed under another stream than it started on (a forward inside
        ``torch.cuda.stream(s)``, a backward outside) still has its kernels ordered before
        what follows."""
        current = self.stream()
        if started is not None and current is not None and started != current:
            current.wait_stream(started)

    def synchronize(self) -> None:
        """Wait for every stream of the device (before host code reads what mpicomp's
        kernels wrote, as a checkpoint does); nothing on the CPU."""
        if self.device.type == "cuda":
            require_torch().cuda.synchronize(self.device)

    def wire(self, t: Any) -> Any:
        """What a communicator takes for the contiguous tensor ``t`` (:func:`buffer`;
        16-bit floats as their int16 bits, which MPI moves as they are)."""
        torch = require_torch()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.view(torch.int16)
        return buffer(t)

    def values(self, t: Any, name: str = "tensor") -> Any:
        """The contiguous float tensor ``t`` as :attr:`ops` take it (a view, no copy)."""
        return self.ops.view(name, self.wire(t))


def reducible(g: Any, back: list[tuple[Any, Any]]) -> Any:
    """What a ``GradientReducer`` takes for gradient ``g``: :func:`buffer` of ``g``, or, for
    a gradient not float32 or not contiguous, of a float32 copy on its own device, listed in
    ``back`` with ``g`` for :func:`write_back` after the reduction."""
    torch = require_torch()
    if g.dtype != torch.float32 or not g.is_contiguous():
        wide = g.detach().to(torch.float32).contiguous()
        back.append((g, wide))
        g = wide
    return buffer(g.detach())


def write_back(back: list[tuple[Any, Any]]) -> None:
    """Each reduced float32 copy of :func:`reducible` into its gradient."""
    with require_torch().no_grad():
        for g, wide in back:
            g.copy_(wide)


def world(comm: Any) -> Any:
    """``comm`` as an :class:`mpicomp.Comm` (None: ``mpicomp.COMM_WORLD``)."""
    if comm is None:
        return comm_world()
    return comm if isinstance(comm, Comm) else Comm(comm)
