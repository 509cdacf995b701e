"""The ``errbound`` stream's constants, shared by its kernels and its codec (no Numba here,
so that importing the codec loads no compiler).

See ``docs/format.md``, section errbound.
"""
from __future__ import annotations

__all__ = ["BLOCK", "DELTA", "DELTA2", "DELTA3", "GROUP", "HEADER_NBYTES", "MASK", "NONFINITE",
           "RAW", "RICE", "WIDEST", "valid_code"]

#: values per block (one code byte each)
BLOCK = 32
#: blocks per group: a group's payload is one bit stream, its byte size a uint16
GROUP = 8
#: the stream's header: the quantization step, a little-endian float64
HEADER_NBYTES = 8
#: the largest width of a zigzag code (codes of ``|q| <= 2**31 - 1`` fit 32 bits)
WIDEST = 32
#: code ``RICE + k`` (``k`` 0 to 31): Rice codes with ``k`` low bits
RICE = 64
#: code ``DELTA + k`` (``k`` 0 to 31): Rice codes of the differences of successive ``q``
#: (residuals of order 1: ``q[i] - q[i-1]``)
DELTA = 96
#: code ``DELTA2 + k``: Rice codes of the residuals of order 2, ``q[i] - 2q[i-1] + q[i-2]``
DELTA2 = 176
#: code ``DELTA3 + k``: Rice codes of the residuals of order 3,
#: ``q[i] - 3q[i-1] + 3q[i-2] - q[i-3]``
DELTA3 = 208
#: code ``MASK + w`` (``w`` 0 to 32): a zero mask, then each non-zero code minus one in w bits
MASK = 128
#: the code byte of a block stored raw (its values' bytes)
RAW = 255
#: the encoder's code of a block holding a NaN or an Inf (never written: refused)
NONFINITE = 254


def valid_code(code):
    """Whether a code byte (an int or a NumPy integer array, elementwise) is one an encoder
    writes: a width 0-32, RICE + 0-31, DELTA + 0-31, MASK + 0-32, DELTA2 + 0-31,
    DELTA3 + 0-31 or RAW."""
    return ((code <= WIDEST) | ((code >= RICE) & (code < DELTA + 32))
            | ((code >= MASK) & (code <= MASK + WIDEST))
            | ((code >= DELTA2) & (code < DELTA2 + 32)) | ((code >= DELTA3) & (code < DELTA3 + 32))
            | (code == RAW))
