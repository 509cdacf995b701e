"""The decorator of per-block code shared by the CPU and GPU kernels.

Per-block functions (``*_block*.py``, ``bitstream.py``, ``intbits.py``) are
decorated with :func:`njit` from here. Normally that is ``numba.njit``: the
CPU drivers call them, and ``numba.cuda.jit`` kernels compile them for the
GPU.

Per-block functions are called only from compiled code and allocate
nothing, so they get no Python entry point and no reference counting
(``NRT_incref``/``decref`` on the arrays they are handed).

``inline="always"`` (the small helpers of the block loops) means, on the
CPU, that LLVM inlines the function (``CPU_INLINE``), not Numba: Numba's own
inliner copies the callee's IR into every caller, where it is typed again at
every call site, and typing time grows faster than the code (the zfp drivers
took half a minute per dtype to compile that way). Compiled once per
signature and inlined by LLVM before its loop vectorizer runs, the kernels
run as fast as before, except where the caller's loops were specialised on
the inlined code: ``inline=NUMBA_INLINE`` keeps Numba's inlining on the CPU
for those few functions (bitplane's ``encode_block``, which is 10% slower
otherwise; the cast and homomorphic per-value code, cheap to compile either
way; errbound's block functions, whose loops over a block stayed scalar,
2x to 6x slower, when LLVM inlined them). In CUDA kernels Numba inlines
both kinds, as ``inline="always"`` always did there (:func:`_inline_into_cuda_only`).

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) kernels run as
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
from numba.core.target_extension import current_target
from numba.extending import overload

__all__ = ["CPU_INLINE", "NUMBA_INLINE", "SIMULATOR", "njit", "python_with_compiled"]

#: True in a process started with NUMBA_ENABLE_CUDASIM=1
SIMULATOR = bool(numba.config.ENABLE_CUDASIM)

#: ``numba.njit`` options of a function called only from compiled code, allocating nothing
_NO_WRAPPERS = {"no_cpython_wrapper": True, "no_cfunc_wrapper": True, "_nrt": False}
#: ``numba.njit`` options of a CPU helper that LLVM always inlines (``alwaysinline``)
CPU_INLINE = {"forceinline": True, **_NO_WRAPPERS}
#: ``inline=`` of per-block code that Numba inlines on the CPU too
NUMBA_INLINE = "numba"


def _inline_into_cuda_only(call: Any, caller_ir: Any, callee_ir: Any) -> bool:
    """Numba's inlining decision (a cost model) for ``inline="always"`` per-block code:
    inline into CUDA kernels, never into CPU code (LLVM inlines it there)."""
    return current_target() == "cuda"


def python_with_compiled(python: Callable[..., Any], nopython: Callable[..., Any],
                         inline: str = "never") -> Callable[..., Any]:
    """``python``, which nopython code calling it compiles as ``nopython`` (same signature)."""

    @functools.wraps(python)  # the signature Numba checks the implementation against
    def typing(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        return nopython

    overload(python, inline=inline)(typing)
    return python


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit`` (same arguments, ``inline`` read as above, no Python entry point),
    or the Python function under the CUDA simulator."""
    if not SIMULATOR:
        if options.get("inline") == NUMBA_INLINE:
            options = {**options, "inline": "always"}
        elif options.get("inline") == "always":
            options = {**options, **CPU_INLINE, "inline": _inline_into_cuda_only}
        else:
            options = {**options, **_NO_WRAPPERS}
        return numba.njit(*args, **options)

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        # not inlined: a simulator process is for tests, and Numba's inliner of
        # overloads warns about (harmless) variable scopes in this code
        return python_with_compiled(fn, fn)

    if args and callable(args[0]):
        return register(args[0])
    return register
