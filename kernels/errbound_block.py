"""Error-bounded quantizer: the per-block logic of the ``errbound`` codec.

A value ``x`` becomes the integer ``q = floor(x / step + 1/2)`` (``step`` =
twice the error bound, so ``|x - q * step| <= step / 2``), zigzag-coded as
``z = 2q`` for ``q >= 0``, ``-2q - 1`` below. The decoder's value is
``q * step`` computed in float64 and rounded to the buffer's dtype; the
encoder checks that value against the bound for every value and stores a
block whose check fails (a bound below the dtype's rounding, ``|q|`` past 31
bits) raw, its values' bytes verbatim.

Each block of 32 values is coded the cheapest of four ways, its code byte
saying which (exact costs, ties to the first):

* width ``w`` (code ``w``, 0-32): every ``z`` in ``w`` bits, ``w`` the bit
  length of the block's largest (a block of zeros: no payload at all);
* Rice ``k`` (code ``RICE + k``): ``z >> k`` in unary (that many 0 bits,
  then a 1), then the ``k`` low bits of ``z``: the coding of heavy-tailed
  data such as gradients, where a few large values set the width;
* delta Rice ``k`` (code ``DELTA + k``): Rice codes of the differences
  ``q[i] - q[i - 1]`` (a 1-D Lorenzo predictor on the quantized integers,
  so the bound holds exactly), ``q[-1]`` the last value of the previous
  block in the group (0 for a group's first block): smooth data;
* zero mask (code ``MASK + w``): one bit per value (1: non-zero), then
  each non-zero ``z - 1`` in ``w`` bits: sparse blocks.

Blocks are bit-packed one after the other inside a group of ``GROUP``
blocks (least significant bit first), so a group is one bit stream whose
length the encoder knows from the costs: :func:`block_code` returns each
block's code and bit count, :func:`pack_group` writes a group,
:func:`unpack_group` reads one and reports a stream that runs past the
group's bytes (hostile bytes) instead of reading beyond them.

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

from .errbound_layout import BLOCK, DELTA, GROUP, MASK, NONFINITE, RAW, RICE
from .intbits import ctz64
from .jit import njit

__all__ = ["BLOCK", "GROUP", "NONFINITE", "RAW", "block_code", "pack_group", "unpack_group"]

#: the largest |q| coded (so a zigzag code fits 32 bits)
_Q_MAX = 2147483647.0
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U8 = np.uint64(8)
_BYTE = np.uint64(0xFF)


@njit(inline="always")
def _reconstructed(q, step, single):
    """What the decoder makes of ``q``: ``q * step`` rounded to the dtype (float64 here)."""
    v = np.float64(q) * step
    if single:
        return np.float64(np.float32(v))
    return v


@njit(inline="always")
def _floor(s):
    """``floor(s)`` as an int64 for ``|s| < 2**63``: a truncation and a correction, which
    compiles to two instructions where ``math.floor`` is a library call (4x slower)."""
    t = np.int64(s)
    if np.float64(t) > s:
        t -= np.int64(1)
    return t


@njit(inline="always")
def _zigzag(v, inv_step):
    """The zigzag code (uint64) of ``v``'s quantized value."""
    q = _floor(v * inv_step + 0.5)
    return np.uint64((q << np.int64(1)) ^ (q >> np.int64(63)))


@njit(inline="always")
def _quantized(v, inv_step):
    """``floor(v * inv_step + 1/2)``, or 0 where that is not finite or past 31 bits: a
    delta block's predictor from the value before it (both sides compute it)."""
    s = v * inv_step + 0.5
    if not abs(s) <= _Q_MAX:
        return np.int64(0)
    return _floor(s)


@njit(inline="always")
def _predictor(x, start, inv_step):
    """``q`` of the value before ``x[start]`` within its group, 0 at a group's start."""
    if np.int64(start) % np.int64(BLOCK * GROUP) == np.int64(0):
        return np.int64(0)
    return _quantized(np.float64(x[start - 1]), inv_step)


@njit(inline="always")
def _zz(d):
    return np.uint64((d << np.int64(1)) ^ (d >> np.int64(63)))


@njit(inline="always")
def _bit_length(z):
    """Bits needed for the uint64 ``z`` (0 for 0)."""
    w = np.int64(0)
    while w < np.int64(64) and (z >> np.uint64(w)) != _U0:
        w += np.int64(1)
    return w


@njit(inline="always")
def _rice_cost(n, k, shifted_sum):
    return np.int64(n) * (np.int64(1) + np.int64(k)) + np.int64(shifted_sum)


@njit(inline="always")
def _first_k(total, n):
    """The least of the three Rice parameters tried: two below the bit length of the mean
    code ``total / n``, at least 0."""
    km = _bit_length(total // np.uint64(n))
    return km - np.int64(2) if km >= np.int64(2) else np.int64(0)


@njit
def block_code(x, start, end, inv_step, step, bound, single):
    """``(code byte, payload bits)`` of ``x[start:end]``: the cheapest coding, RAW, or
    NONFINITE for a block holding NaN or Inf."""
    n = np.int64(end) - np.int64(start)
    widest = _U0
    total = _U0
    nonzero = np.int64(0)
    raw = False
    previous = _predictor(x, start, inv_step)
    delta_total = _U0
    delta_ok = True
    for i in range(start, end):
        v = np.float64(x[i])
        if not math.isfinite(v):
            return np.int64(NONFINITE), np.int64(0)
        if raw:
            continue
        s = v * inv_step + 0.5
        if not abs(s) <= _Q_MAX:  # (tested before the floor: the simulator's would raise)
            raw = True
            continue
        q = _floor(s)
        if abs(v - _reconstructed(q, step, single)) > bound:
            raw = True
            continue
        z = _zz(q)
        dz = _zz(q - previous)
        previous = q
        if dz > np.uint64(0xFFFFFFFF):
            delta_ok = False
        delta_total += dz
        total += z
        if z != _U0:
            nonzero += np.int64(1)
        if z > widest:
            widest = z
    if raw:
        return np.int64(RAW), n * np.int64(32 if single else 64)
    w = _bit_length(widest)
    code = w
    best = n * w
    if nonzero > np.int64(0) and nonzero < n:
        wz = _bit_length(widest - _U1)
        cost = n + nonzero * wz
        if cost < best:
            code = np.int64(MASK) + wz
            best = cost
    if w > np.int64(1):
        # Rice: the best k lies near log2 of the mean code; try three around it
        k0 = _first_k(total, n)
        d0 = _first_k(delta_total, n)
        s0 = _U0
        s1 = _U0
        s2 = _U0
        t0 = _U0
        t1 = _U0
        t2 = _U0
        previous = _predictor(x, start, inv_step)
        for i in range(start, end):
            q = _floor(np.float64(x[i]) * inv_step + 0.5)
            z = _zz(q)
            s0 += z >> np.uint64(k0)
            s1 += z >> np.uint64(k0 + np.int64(1))
            s2 += z >> np.uint64(k0 + np.int64(2))
            dz = _zz(q - previous)
            previous = q
            t0 += dz >> np.uint64(d0)
            t1 += dz >> np.uint64(d0 + np.int64(1))
            t2 += dz >> np.uint64(d0 + np.int64(2))
        for j in range(3):
            k = k0 + np.int64(j)
            s = s0 if j == 0 else (s1 if j == 1 else s2)
            if k < w and k < np.int64(32):
                cost = _rice_cost(n, k, s)
                if cost < best:
                    code = np.int64(RICE) + k
                    best = cost
        if delta_ok:
            for j in range(3):
                k = d0 + np.int64(j)
                s = t0 if j == 0 else (t1 if j == 1 else t2)
                if k < np.int64(32):
                    cost = _rice_cost(n, k, s)
                    if cost < best:
                        code = np.int64(DELTA) + k
                        best = cost
    return code, best


@njit(inline="always")
def _put(out, p, acc, fill, value, nbits):
    """Append the ``nbits`` (<= 32) low bits of ``value`` to the writer ``(p, acc, fill)``
    (``fill`` < 32 bits pending in ``acc``, the next byte at ``out[p]``): four bytes are
    stored at a time."""
    acc |= value << np.uint64(fill)
    fill += np.int64(nbits)
    if fill >= np.int64(32):
        out[p] = np.uint8(acc & _BYTE)
        out[p + 1] = np.uint8((acc >> _U8) & _BYTE)
        out[p + 2] = np.uint8((acc >> np.uint64(16)) & _BYTE)
        out[p + 3] = np.uint8((acc >> np.uint64(24)) & _BYTE)
        acc >>= np.uint64(32)
        fill -= np.int64(32)
        p += np.int64(4)
    return p, acc, fill


@njit(inline="always")
def _flush(out, p, acc, fill):
    """Store the writer's last ``fill`` (< 32) bits."""
    while fill > np.int64(0):
        out[p] = np.uint8(acc & _BYTE)
        acc >>= _U8
        fill -= np.int64(8)
        p += np.int64(1)


@njit(inline="always")
def _group_blocks(group, nblocks):
    """The first block of ``group`` and the one past its last."""
    first = np.int64(group) * np.int64(GROUP)
    last = first + np.int64(GROUP)
    return first, (last if last < np.int64(nblocks) else np.int64(nblocks))


@njit(inline="always")
def _block_values(b, n):
    """The first value of block ``b`` and the one past its last (of ``n`` values)."""
    start = np.int64(b) * np.int64(BLOCK)
    end = start + np.int64(BLOCK)
    return start, (end if end < np.int64(n) else np.int64(n))


@njit
def pack_group(x, xb, group, inv_step, codes, out, pos, itemsize):
    """Write group ``group`` of ``x`` (``xb``: its bytes; ``codes``: every block's code
    byte) as one bit stream at ``out[pos:]``."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    acc = _U0
    fill = np.int64(0)
    for b in range(first, last):
        start, end = _block_values(b, x.size)
        code = np.int64(codes[b])
        if code == np.int64(RAW):
            for j in range(start * np.int64(itemsize), end * np.int64(itemsize)):
                p, acc, fill = _put(out, p, acc, fill, np.uint64(xb[j]), 8)
        elif code >= np.int64(MASK):
            w = code - np.int64(MASK)
            m = _U0
            for i in range(start, end):
                if _zigzag(np.float64(x[i]), inv_step) != _U0:
                    m |= _U1 << np.uint64(i - start)
            p, acc, fill = _put(out, p, acc, fill, m, end - start)
            for i in range(start, end):
                z = _zigzag(np.float64(x[i]), inv_step)
                if z != _U0:
                    p, acc, fill = _put(out, p, acc, fill, z - _U1, w)
        elif code >= np.int64(RICE):
            delta = code >= np.int64(DELTA)
            k = code - np.int64(DELTA if delta else RICE)
            low = (_U1 << np.uint64(k)) - _U1
            previous = _predictor(x, start, inv_step)
            for i in range(start, end):
                q = _floor(np.float64(x[i]) * inv_step + 0.5)
                z = _zz(q - previous) if delta else _zz(q)
                previous = q
                zeros = np.int64(z >> np.uint64(k))
                if zeros + k < np.int64(32):  # the usual code: one store of all its bits
                    p, acc, fill = _put(out, p, acc, fill,
                                        (_U1 | ((z & low) << _U1)) << np.uint64(zeros),
                                        zeros + k + np.int64(1))
                    continue
                while zeros >= np.int64(32):
                    p, acc, fill = _put(out, p, acc, fill, _U0, 32)
                    zeros -= np.int64(32)
                p, acc, fill = _put(out, p, acc, fill, _U1 << np.uint64(zeros), zeros + 1)
                p, acc, fill = _put(out, p, acc, fill, z & low, k)
        elif code > np.int64(0):
            for i in range(start, end):
                p, acc, fill = _put(out, p, acc, fill, _zigzag(np.float64(x[i]), inv_step),
                                    code)
    _flush(out, p, acc, fill)


@njit(inline="always")
def _need(buf, p, end, acc, fill, nbits):
    """Refill the reader ``(p, acc, fill)`` from ``buf[p:end]`` to at least ``nbits``
    (<= 32) bits if the group holds them (four bytes at a time); ``fill`` stays at most
    64."""
    if fill < np.int64(nbits):
        if p + np.int64(4) <= end:
            acc |= ((np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << _U8)
                     | (np.uint64(buf[p + 2]) << np.uint64(16))
                     | (np.uint64(buf[p + 3]) << np.uint64(24))) << np.uint64(fill))
            fill += np.int64(32)
            p += np.int64(4)
        else:
            while fill < np.int64(nbits) and p < end:
                acc |= np.uint64(buf[p]) << np.uint64(fill)
                fill += np.int64(8)
                p += np.int64(1)
    return p, acc, fill


@njit(inline="always")
def _unzigzag(z):
    return np.int64(z >> _U1) ^ -np.int64(z & _U1)


@njit
def unpack_group(buf, pos, end, group, codes, step, inv_step, out, outb, itemsize):
    """Decode group ``group`` from ``buf[pos:end]`` into ``out`` (``outb``: its bytes);
    False where the group's codes run past ``end`` (hostile bytes)."""
    first, last = _group_blocks(group, codes.size)
    p = np.int64(pos)
    stop = np.int64(end)
    acc = _U0
    fill = np.int64(0)
    previous = np.int64(0)  # q of the value before the block (a delta block's predictor)
    for b in range(first, last):
        start, bend = _block_values(b, out.size)
        code = np.int64(codes[b])
        if code == np.int64(RAW):
            for j in range(start * np.int64(itemsize), bend * np.int64(itemsize)):
                p, acc, fill = _need(buf, p, stop, acc, fill, 8)
                if fill < np.int64(8):
                    return False
                outb[j] = np.uint8(acc & _BYTE)
                acc >>= _U8
                fill -= np.int64(8)
            previous = _quantized(np.float64(out[bend - 1]), inv_step)
        elif code >= np.int64(MASK):
            w = code - np.int64(MASK)
            k = bend - start
            p, acc, fill = _need(buf, p, stop, acc, fill, k)
            if fill < k:
                return False
            m = acc & ((_U1 << np.uint64(k)) - _U1)
            acc >>= np.uint64(k)
            fill -= k
            mask = (_U1 << np.uint64(w)) - _U1
            q = np.int64(0)
            for i in range(start, bend):
                if (m >> np.uint64(i - start)) & _U1 == _U0:
                    out[i] = 0.0
                    q = np.int64(0)
                    continue
                p, acc, fill = _need(buf, p, stop, acc, fill, w)
                if fill < w:
                    return False
                q = _unzigzag((acc & mask) + _U1)
                acc >>= np.uint64(w)
                fill -= w
                out[i] = np.float64(q) * step
            previous = q
        elif code >= np.int64(RICE):
            delta = code >= np.int64(DELTA)
            k = code - np.int64(DELTA if delta else RICE)
            low = (_U1 << np.uint64(k)) - _U1
            most = np.int64(0xFFFFFFFF) >> k  # the largest quotient of a 32-bit code
            for i in range(start, bend):
                zeros = np.int64(0)
                while True:
                    p, acc, fill = _need(buf, p, stop, acc, fill, 32)
                    if fill == np.int64(0):
                        return False
                    if acc != _U0:
                        break
                    zeros += fill
                    fill = np.int64(0)
                    if zeros > most:
                        return False
                t = ctz64(acc)
                zeros += t
                if zeros > most:
                    return False
                acc >>= np.uint64(t + np.int64(1))
                fill -= t + np.int64(1)
                p, acc, fill = _need(buf, p, stop, acc, fill, k)
                if fill < k:
                    return False
                q = _unzigzag((np.uint64(zeros) << np.uint64(k)) | (acc & low))
                acc >>= np.uint64(k)
                fill -= k
                if delta:
                    q += previous
                previous = q
                out[i] = np.float64(q) * step
        elif code > np.int64(0):
            mask = (_U1 << np.uint64(code)) - _U1
            q = np.int64(0)
            for i in range(start, bend):
                p, acc, fill = _need(buf, p, stop, acc, fill, code)
                if fill < code:
                    return False
                q = _unzigzag(acc & mask)
                acc >>= np.uint64(code)
                fill -= code
                out[i] = np.float64(q) * step
            previous = q
        else:
            for i in range(start, bend):
                out[i] = 0.0
            previous = np.int64(0)
    return True
