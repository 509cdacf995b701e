"""Pure-NumPy reference of the ``bitplane`` wire format (the test oracle).

Vectorized over whole arrays and written independently of the Numba
kernels (``np.packbits`` for the planes, ``np.ldexp`` for the scale), it
produces the exact bytes described in ``docs/format.md``, section bitplane.
It is slow and memory-hungry (about ``nplanes`` bytes of temporaries per
value) and meant for tests and for reading.

>>> import numpy as np
>>> x = np.array([1.0, -0.5, 0.25, 3.0], dtype=np.float32)
>>> buf = reference_encode(x, nplanes=8, block_size=8)
>>> buf.size  # one block: 8 plane bytes + 1 exponent byte
9
>>> reference_decode(buf, 4, np.float32, nplanes=8, block_size=8)
array([ 1.  , -0.5 ,  0.25,  3.  ], dtype=float32)
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["FORMATS", "reference_decode", "reference_encode", "reference_error_bound"]

#: per dtype: (unsigned view, mantissa bits, exponent bits, bias, exponent bytes on the wire)
FORMATS = {
    np.dtype(np.float32): (np.uint32, 23, 8, 127, 1),
    np.dtype(np.float64): (np.uint64, 52, 11, 1023, 2),
}


def _blocks(n: int, block_size: int) -> int:
    return -(-n // block_size)


def _fields(x: np.ndarray, block_size: int):
    """Zero-padded (nblocks, block_size) sign, effective exponent and significand."""
    utype, mant_bits, ebits, _, _ = FORMATS[x.dtype]
    nb = _blocks(x.size, block_size)
    u = np.zeros(nb * block_size, dtype=np.uint64)
    u[: x.size] = x.reshape(-1).view(utype)
    u = u.reshape(nb, block_size)
    ef = ((u >> np.uint64(mant_bits)) & np.uint64((1 << ebits) - 1)).astype(np.int64)
    sign = u >> np.uint64(mant_bits + ebits)
    implicit = (ef > 0).astype(np.uint64) << np.uint64(mant_bits)
    sig = (u & np.uint64((1 << mant_bits) - 1)) | implicit
    return sign, np.maximum(ef, 1), sig


def reference_encode(x: np.ndarray, nplanes: int, block_size: int) -> np.ndarray:
    """The stream for ``x`` (float32 or float64), ``nplanes`` = P bits per value.

    NaN and Inf are not rejected here: their blocks get the all-ones
    exponent, which is what the codec checks for.
    """
    x = np.ascontiguousarray(x)
    _, mant_bits, ebits, _, ebytes = FORMATS[x.dtype]
    word_bits = 1 + ebits + mant_bits
    m = nplanes - 1
    sign, ee, sig = _fields(x, block_size)
    emax = ee.max(axis=1)
    shift = (mant_bits + 1 - m) + (emax[:, None] - ee)
    big = shift > word_bits - 1
    s = np.where(big, 1, shift).astype(np.uint64)
    q = (sig + (np.uint64(1) << (s - np.uint64(1)))) >> s
    q[big] = 0
    q = np.minimum(q, np.uint64((1 << m) - 1))
    code = (sign << np.uint64(m)) | q
    # plane j holds bit P-1-j of each code; packbits(little) puts value i at bit i
    shifts = np.arange(nplanes - 1, -1, -1, dtype=np.uint64)
    bits = ((code[:, None, :] >> shifts[None, :, None]) & np.uint64(1)).astype(np.uint8)
    planes = np.packbits(bits, axis=-1, bitorder="little").reshape(-1)
    exps = emax.astype("<u2" if ebytes == 2 else np.uint8).view(np.uint8)
    return np.concatenate([planes, exps])


def reference_decode(
    buf: Any, count: int, dtype: Any, nplanes: int, block_size: int
) -> np.ndarray:
    """Decode ``count`` values of ``dtype`` from ``buf``; returns a new array."""
    dtype = np.dtype(dtype)
    _, _, _, bias, ebytes = FORMATS[dtype]
    buf = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    nb = _blocks(count, block_size)
    pbytes = nb * nplanes * block_size // 8
    m = nplanes - 1
    planes = buf[:pbytes].reshape(nb, nplanes, block_size // 8)
    bits = np.unpackbits(planes, axis=-1, bitorder="little").astype(np.int64)
    weights = np.int64(1) << np.arange(m - 1, -1, -1, dtype=np.int64)
    q = np.einsum("bji,j->bi", bits[:, 1:, :], weights)  # P >= 2, so m >= 1
    exps = buf[pbytes:pbytes + nb * ebytes].view("<u2" if ebytes == 2 else np.uint8)
    emax = exps.astype(np.int64)
    mag = np.ldexp(q.astype(np.float64), (emax - bias + 1 - m)[:, None])
    x = np.where(bits[:, 0, :] == 1, -mag, mag)
    return x.reshape(-1)[:count].astype(dtype)


def reference_error_bound(
    x: np.ndarray, nplanes: int, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per value: the quantum ``2**(Emax - BIAS + 1 - m)`` of its block, and its bound.

    The bound is ``quantum / 2``, or ``quantum`` for a value whose rounded
    magnitude reached ``2**m`` and was clamped to ``2**m - 1``.
    """
    x = np.ascontiguousarray(x)
    bias = FORMATS[x.dtype][3]
    m = nplanes - 1
    _, ee, _ = _fields(x, block_size)
    emax = ee.max(axis=1)
    quantum = np.ldexp(1.0, emax - bias + 1 - m)
    qv = np.repeat(quantum, block_size)[: x.size]
    clamped = np.abs(x.astype(np.float64)) >= (2.0**m - 0.5) * qv
    return qv, np.where(clamped, qv, qv / 2)
