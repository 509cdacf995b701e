"""The ``errbound`` stream's constants, shared by its kernels and its codec (no Numba here,
so that importing the codec loads no compiler).

See ``docs/format.md``, section errbound.
"""
from __future__ import annotations

__all__ = ["BAD_CODE", "BLOCK", "DELTA", "DELTA2", "DELTA3", "GROUP", "HEADER_NBYTES", "MASK",
           "NONFINITE", "PAST_BYTES", "RAW", "TOO_LONG", "WIDEST", "valid_code"]

#: values per block (one code byte each)
BLOCK = 32
#: blocks per group: a group's payload is its blocks' payloads one after the other, its byte
#: size a uint16
GROUP = 8
#: the stream's header: the quantization step, a little-endian float64
HEADER_NBYTES = 8
#: the largest width of a zigzag code (codes of ``|q| <= 2**31 - 1`` fit 32 bits)
WIDEST = 32
#: code ``w`` (0 to 32): each value's zigzag code in ``w`` bit planes of 32 bits
#: code ``MASK + w``: a 32-bit mask of the non-zeros, then their codes minus one in ``w``
#: planes of as many bits as there are non-zeros, padded to a whole byte
MASK = 33
#: code ``DELTA + w``: the zigzag codes of the residuals of order 1 (``q[i] - q[i-1]``) in
#: ``w`` planes of 32 bits
DELTA = 66
#: code ``DELTA2 + w``: residuals of order 2, ``q[i] - 2q[i-1] + q[i-2]``
DELTA2 = 99
#: code ``DELTA3 + w``: residuals of order 3, ``q[i] - 3q[i-1] + 3q[i-2] - q[i-3]``
DELTA3 = 132
#: the code byte of a block stored raw (its values' bytes)
RAW = 255
#: the encoder's code of a block holding a NaN or an Inf (never written: refused)
NONFINITE = 254


def valid_code(code):
    """Whether a code byte (an int or a NumPy integer array, elementwise) is one an encoder
    writes: ``kind * 33 + w`` for the five kinds (values, mask, delta of order 1-3) and
    ``w`` 0-32, or RAW."""
    return (code <= DELTA3 + WIDEST) | (code == RAW)


#: what a reader finds wrong with a stream (the CPU decoder's statuses, the codec's errors):
#: a code byte no encoder writes, groups needing more bytes than the stream holds, a
#: group whose blocks run past its bytes or set mask bits past their values
BAD_CODE, TOO_LONG, PAST_BYTES = 1, 2, 3
