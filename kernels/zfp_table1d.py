"""Decoding 1D zfp blocks with few bits after the header by table lookup (CPU).

A 1D fixed-rate block of ``maxbits`` bits starts with its header (1 flag
bit and the EBITS bits of the block exponent); the rest, ``maxbits - 1 -
EBITS`` bits, alone decide the block's four integers after zfp's inverse
transform. When they are few (float32: rate 4 leaves 7 bits, 4.25 leaves
8), every pattern is decoded once and the CPU decoder multiplies the
tabulated values by the block's scale ``2**(emax - P + 2)`` instead of
parsing bit planes: one lookup per block, whatever the data.

The table holds, for every pattern ``t`` of those bits and flag ``f``, at
``4 * (2 * t + f)``, the values that :func:`zfp_decode1d.decode_block_1d`
(the per-block decoder, checked against zfp) returns for that block with
the exponent whose scale is 1; each is exactly the integer converted to the
float type (``f = 0``, an empty block: +0). Multiplying by the scale then
gives the very values the per-block decoder computes for any exponent.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from .zfp_decode1d import decode_block_1d

__all__ = ["TABLE_BITS", "plane_table", "table_fits"]

#: the most bits after the header that a table covers (2**9 entries with the flag)
TABLE_BITS = 8

_HEADER_BITS = {4: 9, 8: 12}  # by itemsize: 1 + EBITS
_UNIT_EXPONENT = {4: 30 + 127, 8: 62 + 1023}  # biased exponent field whose scale is 1


def table_fits(dims: int, maxbits: int, itemsize: int) -> bool:
    """True when 1D blocks of ``maxbits`` bits of this float size are decoded by table."""
    return dims == 1 and 0 < maxbits - _HEADER_BITS[itemsize] <= TABLE_BITS


@njit(cache=True)
def _fill(table, maxbits, hb, unit):
    proto = table[0]
    for t in range(table.size // 8):
        blk = (np.uint64(t) << np.uint64(hb)) | (np.uint64(unit) << np.uint64(1)) | np.uint64(1)
        v0, v1, v2, v3 = decode_block_1d(blk, maxbits, proto)
        i = 8 * t + 4  # flag 1; the flag-0 entries stay 0
        table[i] = v0
        table[i + 1] = v1
        table[i + 2] = v2
        table[i + 3] = v3


@lru_cache(maxsize=None)
def plane_table(maxbits: int, dtype: np.dtype) -> np.ndarray:
    """The value table of 1D ``maxbits``-bit blocks of ``dtype`` (read-only, cached)."""
    dtype = np.dtype(dtype)
    if not table_fits(1, maxbits, dtype.itemsize):
        raise ValueError(f"no decoding table for {maxbits}-bit blocks of {dtype.name}")
    hb = _HEADER_BITS[dtype.itemsize]
    table = np.zeros(8 << (maxbits - hb), dtype=dtype)
    _fill(table, maxbits, hb, _UNIT_EXPONENT[dtype.itemsize])
    table.flags.writeable = False
    return table
