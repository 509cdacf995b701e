"""Error-bounded quantizer: the per-block logic of the ``errbound`` codec.

A value ``x`` becomes the integer ``q = floor(x / step + 1/2)`` (``step`` =
twice the error bound, so ``|x - q * step| <= step / 2``), stored zigzag-coded
(``2q`` for ``q >= 0``, ``-2q - 1`` below) in ``w`` bits, ``w`` the bit length
of the block's largest code: a block of zeros takes no payload at all, a
smooth or sparse block few bits. The decoder's value is ``q * step`` computed
in float64 and rounded to the buffer's dtype; the encoder checks that value
against the bound for every value and stores a block whose check fails (a
bound below the dtype's rounding, ``|q|`` past 31 bits) raw, its values' bytes
verbatim. A block's code byte says which: ``0``-``32`` the width, ``255`` raw,
``254`` (encoder only) a NaN or Inf the codec refuses.

These functions allocate nothing and use only scalars and element access,
so the same source compiles for the CPU drivers (``errbound_cpu.py``) and as
device functions for the CUDA kernels (``errbound_cuda.py``): both write the
same bytes. Every integer is an explicit 64-bit scalar (in Numba ``uint64``
mixed with ``int64`` silently becomes ``float64``). The wire format is in
``docs/format.md`` (section errbound).
"""
from __future__ import annotations

import math

import numpy as np

from .errbound_layout import BLOCK, NONFINITE, RAW
from .jit import njit

__all__ = ["BLOCK", "NONFINITE", "RAW", "block_code", "pack_block", "payload_nbytes",
           "unpack_block"]

#: the largest |q| coded (so a zigzag code fits 32 bits)
_Q_MAX = 2147483647.0


@njit(inline="always")
def _reconstructed(q, step, single):
    """What the decoder makes of ``q``: ``q * step`` rounded to the dtype (float64 here)."""
    v = np.float64(q) * step
    if single:
        return np.float64(np.float32(v))
    return v


@njit
def block_code(x, start, end, inv_step, step, bound, single):
    """The code byte of ``x[start:end]``: the zigzag width (0 to 32), RAW or NONFINITE."""
    widest = np.uint64(0)
    raw = False
    for i in range(start, end):
        v = np.float64(x[i])
        if not math.isfinite(v):
            return np.int64(NONFINITE)
        if raw:
            continue
        s = v * inv_step + 0.5
        if not abs(s) <= _Q_MAX:  # (tested before the floor: the simulator's would raise)
            raw = True
            continue
        t = math.floor(s)
        if abs(v - _reconstructed(t, step, single)) > bound:
            raw = True
            continue
        q = np.int64(t)
        z = np.uint64((q << np.int64(1)) ^ (q >> np.int64(63)))
        if z > widest:
            widest = z
    if raw:
        return np.int64(RAW)
    w = np.int64(0)
    while w < np.int64(64) and (widest >> np.uint64(w)) != np.uint64(0):
        w += np.int64(1)
    return w


@njit(inline="always")
def payload_nbytes(code, n, itemsize):
    """Payload bytes of a block of ``n`` values with code byte ``code``."""
    if code == RAW:
        return np.int64(n) * np.int64(itemsize)
    return (np.int64(n) * np.int64(code) + np.int64(7)) // np.int64(8)


@njit(inline="always")
def copy_bytes(dst, at, src, frm, n):
    """``dst[at:at + n] = src[frm:frm + n]`` (a raw block's bytes)."""
    for k in range(n):
        dst[at + k] = src[frm + k]


@njit
def pack_block(x, xb, start, end, inv_step, code, out, pos, itemsize):
    """Write the payload of ``x[start:end]`` (``xb``: ``x``'s bytes) at ``out[pos:]``."""
    if code == RAW:
        copy_bytes(out, pos, xb, np.int64(start) * np.int64(itemsize),
                   (np.int64(end) - np.int64(start)) * np.int64(itemsize))
        return
    if code == 0:
        return
    w = np.uint64(code)
    acc = np.uint64(0)
    bits = np.uint64(0)
    p = np.int64(pos)
    for i in range(start, end):
        q = np.int64(math.floor(np.float64(x[i]) * inv_step + 0.5))
        z = np.uint64((q << np.int64(1)) ^ (q >> np.int64(63)))
        acc |= z << bits
        bits += w
        while bits >= np.uint64(8):
            out[p] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            bits -= np.uint64(8)
            p += np.int64(1)
    if bits > np.uint64(0):
        out[p] = np.uint8(acc & np.uint64(0xFF))


@njit
def unpack_block(buf, pos, code, start, end, step, out, outb, itemsize):
    """Decode the payload at ``buf[pos:]`` into ``out[start:end]`` (``outb``: its bytes)."""
    if code == RAW:
        copy_bytes(outb, np.int64(start) * np.int64(itemsize), buf, pos,
                   (np.int64(end) - np.int64(start)) * np.int64(itemsize))
        return
    if code == 0:
        for i in range(start, end):
            out[i] = 0.0
        return
    w = np.uint64(code)
    mask = (np.uint64(1) << w) - np.uint64(1)
    acc = np.uint64(0)
    bits = np.uint64(0)
    p = np.int64(pos)
    for i in range(start, end):
        while bits < w:
            acc |= np.uint64(buf[p]) << bits
            bits += np.uint64(8)
            p += np.int64(1)
        z = acc & mask
        acc >>= w
        bits -= w
        q = np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1))
        out[i] = np.float64(q) * step
