"""Bit streams of 64-bit little-endian words, written and read LSB first.

This is the bit order of LLNL zfp's ``bitstream``: bit ``i`` of the stream is
bit ``i % 64`` of word ``i // 64``. Writers and readers are plain functions
over explicit state tuples so that Numba inlines them into the block loops:

* writer state ``(idx, acc, fill)``: ``acc`` holds the ``fill`` bits not yet
  stored, which belong at word ``idx``. A writer starts on a word boundary and
  stores whole words, so nothing has to be zeroed beforehand.
* reader state ``(pos, win, avail)``: ``win`` holds the next ``avail`` bits of
  the stream, which start at bit ``pos``.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

__all__ = ["flush", "get_bits", "peek64", "put_bits", "put_zeros", "refill", "seek", "skip_bits"]

_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@njit(inline="always")
def low_mask(n):
    """Mask of the ``n`` low bits, 0 <= n <= 64."""
    if n >= 64:
        return ~_ZERO
    return (_ONE << np.uint64(n)) - _ONE


@njit(inline="always")
def put_bits(words, idx, acc, fill, value, n):
    """Append the ``n`` low bits of ``value`` (0 <= n <= 64; higher bits must be 0)."""
    if n == 0:
        return idx, acc, fill
    acc |= value << np.uint64(fill)
    fill += n
    if fill >= 64:
        words[idx] = acc
        idx += 1
        fill -= 64
        acc = value >> np.uint64(n - fill) if fill > 0 else _ZERO
    return idx, acc, fill


@njit(inline="always")
def put_zeros(words, idx, acc, fill, n):
    """Append ``n`` zero bits (any n >= 0)."""
    fill += n
    while fill >= 64:
        words[idx] = acc
        idx += 1
        acc = _ZERO
        fill -= 64
    return idx, acc, fill


@njit(inline="always")
def flush(words, idx, acc, fill):
    """Store a last, partial word (its unwritten bits are zero)."""
    if fill > 0:
        words[idx] = acc


@njit(inline="always")
def peek64(words, pos):
    """The 64 bits starting at bit ``pos``; bits past the stream's end read as 0."""
    w = pos >> 6
    s = pos & 63
    if w >= words.size:
        return _ZERO
    v = words[w] >> np.uint64(s)
    if s > 0 and w + 1 < words.size:
        v |= words[w + 1] << np.uint64(64 - s)
    return v


@njit(inline="always")
def seek(words, pos):
    """A reader state positioned at bit ``pos``."""
    return pos, peek64(words, pos), 64


@njit(inline="always")
def get_bits(words, pos, win, avail, n):
    """Read ``n`` bits (0 <= n <= 64); return ``(value, pos, win, avail)``."""
    if n > avail:
        win = peek64(words, pos)
        avail = 64
    if n >= 64:
        value = win
        win = _ZERO
    else:
        value = win & low_mask(n)
        win >>= np.uint64(n)
    return value, pos + n, win, avail - n


@njit(inline="always")
def refill(words, pos, win, avail, need):
    """Make at least ``need`` (<= 64) bits available in the window."""
    if need > avail:
        return peek64(words, pos), 64
    return win, avail


@njit(inline="always")
def skip_bits(pos, win, avail, n):
    """Drop ``n`` (<= avail) bits from the window."""
    if n >= 64:
        return pos + n, _ZERO, avail - n
    return pos + n, win >> np.uint64(n), avail - n
