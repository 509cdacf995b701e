"""The decorator of per-block code shared by the CPU and GPU kernels.

Per-block functions (``*_block*.py``, ``bitstream.py``, ``intbits.py``) are
decorated with :func:`njit` from here. Normally that is ``numba.njit``: the
CPU drivers inline them, and ``numba.cuda.jit`` kernels compile them for the
GPU. Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) kernels run as
Python, and a simulated device array cannot be passed to compiled CPU code;
there :func:`njit` returns the function itself, so the very same Python runs
inside the simulated kernels, and registers it with ``numba.extending.overload``
so that the compiled CPU drivers, which call it from nopython code, still
compile it: the host codecs work in a simulator process too, with or without
a kernel cache.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
from numba.extending import overload

__all__ = ["SIMULATOR", "njit", "python_with_compiled"]

#: True in a process started with NUMBA_ENABLE_CUDASIM=1
SIMULATOR = bool(numba.config.ENABLE_CUDASIM)


def python_with_compiled(python: Callable[..., Any], nopython: Callable[..., Any],
                         inline: str = "never") -> Callable[..., Any]:
    """``python``, which nopython code calling it compiles as ``nopython`` (same signature)."""

    @functools.wraps(python)  # the signature Numba checks the implementation against
    def typing(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        return nopython

    overload(python, inline=inline)(typing)
    return python


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` (same arguments), or the Python function under the CUDA simulator."""
    if not SIMULATOR:
        return numba.njit(*args, **options)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        # not inlined: a simulator process is for tests, and Numba's inliner of
        # overloads warns about (harmless) variable scopes in this code
        return python_with_compiled(fn, fn)

    if args and callable(args[0]):
        return register(args[0])
    return register
