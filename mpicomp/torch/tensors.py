"""Tensors as the communicators take them, shared by the PyTorch integration's modules."""
from __future__ import annotations

from typing import Any

from ..comm import Comm
from ..comm import world as comm_world

__all__ = ["buffer", "reducible", "require_torch", "world", "write_back"]


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
