"""The decorator of per-block code shared by the CPU and GPU kernels.

Per-block functions (``*_block*.py``, ``bitstream.py``, ``intbits.py``) are
decorated with :func:`njit` from here. Normally that is ``numba.njit``: the
CPU drivers inline them, and ``numba.cuda.jit`` kernels compile them for the
GPU. Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) kernels run as
Python, and a simulated device array cannot be passed to compiled CPU code;
there :func:`njit` returns the function itself, so the very same Python runs
inside the simulated kernels. (The CPU drivers cannot run in such a
process: the simulator is for testing the GPU kernels.)
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba

__all__ = ["SIMULATOR", "njit"]

#: True in a process started with NUMBA_ENABLE_CUDASIM=1
SIMULATOR = bool(numba.config.ENABLE_CUDASIM)


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` (same arguments), or no decoration at all under the CUDA simulator."""
    if not SIMULATOR:
        return numba.njit(*args, **options)
    if args and callable(args[0]):
        return args[0]

    def identity(fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    return identity
