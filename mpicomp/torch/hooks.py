"""A DDP communication hook: DistributedDataParallel's gradient buckets, compressed.

::

    import mpicomp.torch as mt
    mt.init_process_group("gloo")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = mt.HookState(codec="bitplane", rate=4.25, error_feedback="loco")
    ddp.register_comm_hook(state, mt.compressed_allreduce_hook)

PyTorch's convention (``PowerSGDState`` and ``powerSGD_hook``): DDP hands
each gradient bucket, as backward produces it, to the hook, which returns a
``torch.futures.Future`` of the bucket's averaged values; DDP waits for the
futures only at the end of backward, so the transfers overlap the rest of
backward. Here each bucket is one nonblocking compressed ``Iallreduce`` of
mpicomp's communicator (plus, with error feedback, the bucket's kept
residual added first and its new one kept after, per bucket as
:class:`~mpicomp.training.GradientReducer` keeps them); the state's one
helper thread waits for the buckets in the order they started, divides each
by the number of ranks, as DDP averages, writes the
bucket and completes the future. ``codec="none"`` is PyTorch's own
``default_hooks.allreduce_hook`` (the bucket divided by the world size, then
``torch.distributed.all_reduce``). CPU tensors are reduced through NumPy views of
the bucket, CUDA tensors on their device (mpicomp's device path), on
PyTorch's current stream of the bucket's GPU, the helper thread's kernels too.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
from typing import Any

from ..training.feedback import ErrorFeedback
from ..training.reducer import carried_otherwise, feedback_codec

__all__ = ["HookState", "compressed_allreduce_hook"]


class HookState:
    """What :func:`compressed_allreduce_hook` keeps: the communicator (``comm``: an MPI
    communicator of DDP's ranks in the same order, ``MPI.COMM_WORLD`` by default), the
    per-call settings (``codec``, ``rate``, ``algorithm``, ``threshold``), the error
    feedback (``"none"``, ``"classic"`` or ``"loco"``, with ``beta`` and ``reset_every``)
    and each bucket's buffers and residual. Bad settings raise here, on every rank."""

    def __init__(self, comm: Any = None, codec: Any = None, rate: float | None = None,
                 algorithm: str | None = None, threshold: int | None = None,
                 error_feedback: str = "none", beta: float = 0.8,
                 reset_every: int = 1024) -> None:
        from .tensors import world as _world

        self.comm = _world(comm)
        self.call = {k: v for k, v in (("codec", codec), ("rate", rate),
                                       ("algorithm", algorithm), ("threshold", threshold))
                     if v is not None}
        self.comm.resolved_policy(**self.call)
        self.ddp_own = codec == "none"
        self.feedback = ErrorFeedback(error_feedback, beta, reset_every)
        self._buffers: dict[int, tuple[Any, Any]] = {}
        self._memory: dict[Any, Any] = {}  #: a TensorMemory per CUDA device of the buckets
        self._finisher: concurrent.futures.ThreadPoolExecutor | None = None

    def finish(self, work: Any) -> None:
        """Run ``work`` on the state's helper thread, after the work handed to it before (a
        step's buckets finish in the order they started, its last one last)."""
        if self._finisher is None:
            self._finisher = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="mpicomp-ddp-hook")
        self._finisher.submit(work)


def compressed_allreduce_hook(state, bucket):  # noqa: ANN001, ANN201
    """DDP's hook: the future of ``bucket``'s gradients averaged over the ranks (see the
    module's doc). (Not annotated: ``register_comm_hook`` refuses a hook whose annotations
    are not ``dist.GradBucket`` and ``torch.futures.Future[torch.Tensor]``, and those would
    import torch here.)"""
    import torch

    from .. import backend
    from .tensors import buffer as _buffer

    flat = bucket.buffer()
    if state.ddp_own:  # PyTorch's own allreduce hook
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        return default_hooks.allreduce_hook(None, bucket)
    on = backend.arrays_for("bucket", flat)
    g = on.view("bucket", _buffer(flat))
    key = bucket.index()
    bufs = state._buffers.get(key)
    if bufs is None or bufs[0].size != g.size:
        bufs = state._buffers[key] = (on.empty(g.size, g.dtype), on.empty(g.size, g.dtype))
    x, y = bufs
    memory, where = None, None
    if on.on_device:  # the bucket's device, PyTorch's current stream there (see TensorMemory)
        from .. import cuda_runtime
        from .tensors import TensorMemory

        memory = state._memory.get(flat.device)
        if memory is None:
            memory = state._memory[flat.device] = TensorMemory(flat.device)
    with contextlib.nullcontext() if memory is None else memory.ordered():
        on.copy(x, g)
        x = state.feedback.compensate(key, x, on)
        codec = feedback_codec(state.comm, state.call) if state.feedback.active else None
        req = state.comm.Iallreduce(x, y, **state.call)
        if memory is not None:  # (the helper thread's kernels on the same stream and GPU)
            where = cuda_runtime.capture()
    done = torch.futures.Future()
    last = bucket.is_last()

    def finish() -> None:
        try:
            with (contextlib.nullcontext() if where is None
                  else cuda_runtime.using_stream(*where)):
                if codec is not None:  # (made while the call is in flight)
                    state.feedback.ahead(key, x, codec, on)
                req.Wait()
                if state.feedback.active:
                    state.feedback.settle(key, on, carried_otherwise(state.comm, state.call, x,
                                                                     req, on))
                on.divide(y, state.comm.Get_size())
                on.copy(g, y)
                if on.on_device:  # (DDP reads the bucket once the future is done)
                    on.stream.synchronize()
            if last:
                state.feedback.end_step()
            done.set_result(flat)
        except BaseException as exc:  # (DDP raises it from its wait)
            done.set_exception(exc)

    state.finish(finish)
    return done
