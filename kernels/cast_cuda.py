"""CUDA kernels of the ``cast`` codec: the CPU codec's per-value code, ITEMS values a thread.

A thread block of ``THREADS`` threads converts ``ITEMS * THREADS`` consecutive
values: thread ``t`` takes values ``t``, ``t + THREADS``, ... of them, so
every warp-wide load and store is one run of consecutive bytes, and it
issues all its loads before its first store, so that ``ITEMS`` loads a
thread are in flight at once (a thread converting one value keeps too few
bytes in flight to reach the memory's bandwidth). The values sit in a
thread-local array of constant indices, which the compiler keeps in
registers (tests/test_cuda_compile.py checks the PTX has no local memory).
Launch with :func:`launch_shape`.

Each encoder sets ``overflow[0]`` (an int32 on the device) when a finite
input became Inf, as the CPU encoders count it; the codec then rejects the
buffer. Layouts are those of ``cast_cpu.py`` (16-bit codes, little endian).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .cast_block import bf16_bits, half_bits, half_value
from .intbits import is_single

__all__ = ["ITEMS", "decode_bf16", "decode_f16", "encode_bf16", "encode_f16", "launch_shape"]

#: values a thread converts
ITEMS = 4
#: threads of a thread block
THREADS = 128

_F64_MAX = np.float64(np.finfo(np.float64).max)


def launch_shape(count: int) -> tuple[int, int]:
    """(blocks, threads) of a launch over ``count`` values."""
    return max(1, -(-count // (ITEMS * THREADS))), THREADS


@cuda.jit(device=True)
def _load(src, v):
    """``v[j]`` = this thread's value ``j`` of ``src`` (where ``src`` has it), every load
    before any store; returns (the thread's first value, the distance to its next)."""
    first, step = cuda.blockIdx.x * (cuda.blockDim.x * ITEMS) + cuda.threadIdx.x, cuda.blockDim.x
    for j in range(ITEMS):
        i = first + j * step
        if i < src.size:
            v[j] = src[i]
    return first, step


@cuda.jit
def encode_f16(src, mant_bits, ebits, out, overflow):
    """float32 or float64 bits (uint32/uint64; ``mant_bits``/``ebits`` 23/8 or 52/11) -> half."""
    v = cuda.local.array(ITEMS, np.uint64)
    first, step = _load(src, v)
    for j in range(ITEMS):
        i = first + j * step
        if i < src.size:
            h, ovf = half_bits(v[j], mant_bits, ebits)
            out[i] = np.uint16(h)
            if ovf:
                overflow[0] = 1


@cuda.jit
def decode_f16(src, out):
    """half bits (uint16) -> float32 or float64 (exact)."""
    v = cuda.local.array(ITEMS, np.uint16)
    first, step = _load(src, v)
    for j in range(ITEMS):
        i = first + j * step
        if i < out.size:
            out[i] = half_value(v[j])


@cuda.jit
def encode_bf16(src, out, overflow):
    """float32 or float64 bits (uint32/uint64) -> bfloat16 bits (uint16); a float64 through
    float32 (round to nearest even), as the CPU encoder does."""
    v = cuda.local.array(ITEMS, src.dtype)
    first, step = _load(src, v)
    for j in range(ITEMS):
        i = first + j * step
        if i < src.size:
            if is_single(src):
                b = np.uint32(v[j])
                finite = (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
            else:
                x = np.uint64(v[j]).view(np.float64)
                b = np.float32(x).view(np.uint32)
                finite = abs(x) <= _F64_MAX
            h = bf16_bits(b)
            out[i] = np.uint16(h)
            if finite and (h & np.uint32(0x7F80)) == np.uint32(0x7F80):
                overflow[0] = 1


@cuda.jit
def decode_bf16(src, out):
    """bfloat16 bits (uint16) -> float32 or float64 (exact)."""
    v = cuda.local.array(ITEMS, np.uint16)
    first, step = _load(src, v)
    for j in range(ITEMS):
        i = first + j * step
        if i < out.size:
            out[i] = np.uint32(np.uint32(v[j]) << np.uint32(16)).view(np.float32)
