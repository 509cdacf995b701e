"""The ``errbound`` stream's constants, shared by its kernels and its codec (no Numba here,
so that importing the codec loads no compiler).

See ``docs/format.md``, section errbound.
"""
from __future__ import annotations

__all__ = ["BLOCK", "HEADER_NBYTES", "NONFINITE", "RAW", "WIDEST"]

#: values per block
BLOCK = 32
#: the stream's header: the quantization step, a little-endian float64
HEADER_NBYTES = 8
#: the code byte of a block stored raw (its values' bytes)
RAW = 255
#: the encoder's code of a block holding a NaN or an Inf (never written: refused)
NONFINITE = 254
#: the largest code byte of a coded block (a 32-bit zigzag code)
WIDEST = 32
