"""CUDA kernels of the ``cast`` codec: one thread per value, the CPU codec's per-value code.

Each encoder sets ``overflow[0]`` (an int32 on the device) when a finite
input became Inf, as the CPU encoders count it; the codec then rejects the
buffer. Layouts are those of ``cast_cpu.py`` (16-bit codes, little endian).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from .cast_block import bf16_bits, half_bits, half_value

__all__ = ["decode_bf16", "decode_f16", "encode_bf16_from32", "encode_bf16_from64", "encode_f16"]

_F64_MAX = np.float64(np.finfo(np.float64).max)


@cuda.jit
def encode_f16(src, mant_bits, ebits, out, overflow):
    """float32 or float64 bits (uint32/uint64; ``mant_bits``/``ebits`` 23/8 or 52/11) -> half."""
    i = cuda.grid(1)
    if i < src.size:
        h, ovf = half_bits(src[i], mant_bits, ebits)
        out[i] = np.uint16(h)
        if ovf:
            overflow[0] = 1


@cuda.jit
def decode_f16(src, out):
    """half bits (uint16) -> float32 or float64 (exact)."""
    i = cuda.grid(1)
    if i < src.size:
        out[i] = half_value(src[i])


@cuda.jit
def encode_bf16_from32(src, out, overflow):
    """float32 bits (uint32) -> bfloat16 bits (uint16)."""
    i = cuda.grid(1)
    if i < src.size:
        b = np.uint32(src[i])
        h = bf16_bits(b)
        out[i] = np.uint16(h)
        finite = (b & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
        if finite and (h & np.uint32(0x7F80)) == np.uint32(0x7F80):
            overflow[0] = 1


@cuda.jit
def encode_bf16_from64(src, out, overflow):
    """float64 values -> float32 (round to nearest even) -> bfloat16 bits (uint16)."""
    i = cuda.grid(1)
    if i < src.size:
        x = src[i]
        h = bf16_bits(np.float32(x).view(np.uint32))
        out[i] = np.uint16(h)
        if abs(x) <= _F64_MAX and (h & np.uint32(0x7F80)) == np.uint32(0x7F80):
            overflow[0] = 1


@cuda.jit
def decode_bf16(src, out):
    """bfloat16 bits (uint16) -> float32 or float64 (exact)."""
    i = cuda.grid(1)
    if i < src.size:
        out[i] = np.uint32(np.uint32(src[i]) << np.uint32(16)).view(np.float32)
