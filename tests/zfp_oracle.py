"""LLNL zfp (through zfpy) as the test oracle for the ``zfp`` codec.

``padded_array`` builds, in NumPy and independently of the kernels, the
array whose zfpy stream the codec must reproduce for a flat buffer of n
values (docs/format.md, "Partial blocks").
"""
from __future__ import annotations

import numpy as np
import zfpy


def _pad_block(v: np.ndarray, n: int) -> None:
    """zfp's pad_block on a 4-vector view ``v`` holding ``n`` (1..3) values."""
    if n <= 1:
        v[1] = v[0]
    if n <= 2:
        v[2] = v[1]
    if n <= 3:
        v[3] = v[0]


def padded_array(x: np.ndarray, dims: int) -> np.ndarray:
    """The array zfp codes for the flat buffer ``x`` with block dimensionality ``dims``."""
    n = x.size
    if dims == 1:
        return x.copy()
    row = 4 if dims == 2 else 16
    rows = -(-n // row)
    p = np.zeros(rows * row, dtype=x.dtype)
    p[:n] = x
    r = n % row
    if dims == 2:
        if r:
            _pad_block(p[-4:], r)
        return p.reshape(rows, 4)
    if r:
        plane = p[-16:].reshape(4, 4)
        ny = -(-r // 4)
        if r % 4:
            _pad_block(plane[ny - 1], r % 4)
        if ny < 4:
            for col in range(4):
                _pad_block(plane[:, col], ny)
    return p.reshape(rows, 4, 4)


def zfpy_encode(x: np.ndarray, rate: float, dims: int) -> np.ndarray:
    """zfpy's headerless fixed-rate stream for the flat buffer ``x``."""
    if x.dtype == np.float32 and dims == 1 and rate <= 2:
        raise ValueError("zfpy crashes on 1D float32 rates <= 2")
    stream = zfpy.compress_numpy(padded_array(x, dims), rate=rate, write_header=False)
    return np.frombuffer(stream, dtype=np.uint8)


def zfpy_decode(stream: np.ndarray, dtype: np.dtype, n: int, rate: float, dims: int) -> np.ndarray:
    """zfpy's decoding of a stream of the flat buffer of ``n`` values."""
    shape = padded_array(np.zeros(n, dtype=dtype), dims).shape
    y = zfpy._decompress(stream.tobytes(), zfpy.dtype_to_ztype(np.dtype(dtype)), shape, rate=rate)
    return np.asarray(y).reshape(-1)[:n]
