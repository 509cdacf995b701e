"""Warp primitives of the CUDA kernels, with a simulator version that computes the same thing.

The warp-cooperative kernels (``bitplane_cuda.py``) let the 32 lanes of a
warp work on consecutive values: a block's exponent is a warp reduction, a
bit plane is one ballot. Numba's CUDA simulator has no warp operations, so
the kernels call them only through this module:

``ballot(pred, scratch)``
    the 32-bit word whose bit ``k`` is lane ``k``'s predicate (``uint32``);
``max_over(value, width, scratch)``
    the largest ``value`` (an integer) among the ``width`` lanes (1, 2, 4,
    ..., 32) of this lane's aligned group;
``shfl(value, src, scratch)``
    lane ``src``'s ``value`` (an integer), on every lane;
``scan_add(value, scratch)``
    the sum of ``value`` (an int64) over lanes ``0..lane`` (an inclusive
    prefix sum, wrapping as int64 arithmetic does);
``sync()``
    makes a warp's shared-memory writes visible to its lanes.

On a GPU they are the ``*_sync`` intrinsics on the full warp
(``vote.sync.ballot.b32``, ``shfl.sync.idx``, five ``shfl.sync.bfly`` or
``shfl.sync.up`` steps, ``bar.warp.sync``)
and ``scratch`` is not read. Under the simulator each goes through
``scratch``, this warp's row of a shared ``int64`` array (:data:`SCRATCH`
words; the kernel declares ``cuda.shared.array(SCRATCH_SHAPE, np.int64)``),
and one ``cuda.syncthreads``. So every thread of a thread block must make
the same sequence of calls (no call inside a branch that differs between
threads), which the kernels keep on the GPU too: there the full-warp mask
requires it. The simulator's ``cuda.shared.array`` is made safe for that
(:func:`_shared_array_made_once`).

A launch's thread blocks are :data:`WARPS` warps; the kernels read the
count from ``blockDim`` (any multiple of 32 up to :data:`MAX_WARPS` warps).
"""
from __future__ import annotations

import sys
import threading

import numpy as np
from numba import cuda

from .jit import SIMULATOR

__all__ = ["MAX_WARPS", "SCRATCH", "SCRATCH_SHAPE", "WARP", "WARPS", "ballot", "lane_id",
           "max_over", "scan_add", "shfl", "sync", "warp_id", "warps"]

WARP = 32
#: warps per thread block at most (the kernels' shared arrays have a row per warp)
MAX_WARPS = 4
#: warps per thread block of a launch: 4 on a GPU; 1 under the simulator, whose
#: ``syncthreads`` (a barrier of Python threads) costs in proportion to the block
WARPS = 1 if SIMULATOR else MAX_WARPS
#: words of shared scratch per warp: the simulator's exchange buffers (unused on a GPU)
SCRATCH = 2 * WARP if SIMULATOR else 1
#: the shape of a kernel's shared scratch array (a row per warp)
SCRATCH_SHAPE = (MAX_WARPS, SCRATCH)

_FULL = 0xFFFFFFFF


if not SIMULATOR:

    @cuda.jit(device=True)
    def lane_id():
        """This thread's lane in its warp."""
        return cuda.threadIdx.x & 31

    @cuda.jit(device=True)
    def warp_id():
        """This thread's warp in its thread block."""
        return cuda.threadIdx.x >> 5

    @cuda.jit(device=True)
    def warps():
        """Warps in this thread block."""
        return cuda.blockDim.x >> 5

    @cuda.jit(device=True)
    def ballot(pred, scratch):
        return np.uint32(cuda.ballot_sync(_FULL, pred))

    @cuda.jit(device=True)
    def max_over(value, width, scratch):
        off = 16
        while off >= 1:
            other = cuda.shfl_xor_sync(_FULL, value, off)  # every lane shuffles, whatever the width
            if off < width and other > value:
                value = other
            off >>= 1
        return value

    @cuda.jit(device=True)
    def shfl(value, src, scratch):
        return cuda.shfl_sync(_FULL, value, src)

    @cuda.jit(device=True)
    def scan_add(value, scratch):
        lane = cuda.threadIdx.x & 31
        off = 1
        while off < 32:
            other = cuda.shfl_up_sync(_FULL, value, off)
            if lane >= off:
                value += other
            off <<= 1
        return value

    @cuda.jit(device=True)
    def sync():
        cuda.syncwarp(_FULL)

else:
    # Plain Python on the simulated thread (``threading.current_thread()``, the simulator's
    # BlockThread), not simulator device functions: the simulator swaps the ``cuda`` name of
    # a device function's module for each call and back after it, which races when threads
    # of a block are inside such calls at once.
    #
    # Each exchange writes one of the two halves of ``scratch``, alternately (a thread keeps
    # its turn on its Python thread), then waits at one barrier and reads: a lane writes a
    # half again only after every lane has passed the next exchange's barrier, so after
    # every lane has read it.

    def _shared_array_made_once() -> None:
        """Make the simulator's ``cuda.shared.array`` one array per source line and launch for
        every thread of the block. The simulator's own looks the line up, then stores a new
        array if none was there, unlocked: threads that reach the line at once (its lookup
        is a slow stack walk, where Python switches threads) could each get an array of
        their own, and a warp exchange through them read uninitialized memory. Here the
        lookup and the store are one step under a lock (dynamic shared memory, shape 0, as
        the simulator has it)."""
        from numba.cuda.simulator import kernelapi
        from numba.np import numpy_support

        shared = kernelapi.FakeCUDAShared
        if getattr(shared.array, "made_once", False):
            return
        dynamic = shared.array
        lock = threading.Lock()

        def array(self, shape, dtype):
            if shape == 0:
                return dynamic(self, shape, dtype)
            frame = sys._getframe(1)
            line = (frame.f_code.co_filename, frame.f_lineno)
            with lock:
                made = self._allocations.get(line)
                if made is None:
                    if not isinstance(dtype, np.dtype) and not isinstance(dtype, type):
                        dtype = numpy_support.as_dtype(dtype)
                    made = self._allocations[line] = np.empty(shape, dtype)
            return made

        array.made_once = True
        shared.array = array

    _shared_array_made_once()

    def lane_id():
        return threading.current_thread().threadIdx.x & 31

    def warp_id():
        return threading.current_thread().threadIdx.x >> 5

    def warps():
        return threading.current_thread()._manager._block_dim[0] >> 5

    def _exchange(value, scratch):
        thread = threading.current_thread()
        half = getattr(thread, "warp_exchange_half", 0)
        thread.warp_exchange_half = 1 - half
        base = half * WARP
        scratch[base + (thread.threadIdx.x & 31)] = value
        thread.syncthreads()
        return base

    def ballot(pred, scratch):
        base = _exchange(1 if pred else 0, scratch)
        word = np.uint32(0)
        for k in range(WARP):
            if scratch[base + k] != 0:
                word |= np.uint32(1 << k)
        return word

    def max_over(value, width, scratch):
        base = _exchange(value, scratch)
        group = base + (lane_id() & ~(width - 1))
        for k in range(width):
            if scratch[group + k] > value:
                value = type(value)(scratch[group + k])
        return value

    def shfl(value, src, scratch):
        base = _exchange(value, scratch)
        return type(value)(scratch[base + src])

    def scan_add(value, scratch):
        base = _exchange(value, scratch)
        total = np.int64(0)
        with np.errstate(over="ignore"):
            for k in range(lane_id() + 1):
                total += np.int64(scratch[base + k])
        return total

    def sync():
        threading.current_thread().syncthreads()
