"""SZ3 (PyPI ``pysz``, optional) as a codec-like object for the benchmarks' comparisons.

SZ3 is the reference error-bounded compressor (prediction, quantization,
Huffman and zstd, one thread here). :func:`available` says whether ``pysz``
imports; :class:`SZ3` encodes with a bound relative to the value range
(SZ3's ``REL`` mode) and decodes.
"""
from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

__all__ = ["SZ3", "available"]


def available() -> bool:
    """Whether ``pysz`` is installed (``pip install pysz``, or ``mpicomp[bench]``)."""
    return importlib.util.find_spec("pysz") is not None


class SZ3:
    """SZ3 with a bound of ``tolerance * (max(x) - min(x))`` on every value."""

    def __init__(self, tolerance: float):
        import pysz

        self._sz = pysz.sz
        self.config = pysz.szConfig()
        self.config.errorBoundMode = pysz.szErrorBoundMode.REL
        self.config.relErrorBound = float(tolerance)

    def encode(self, x: np.ndarray) -> np.ndarray:
        stream, _ = self._sz.compress(np.ascontiguousarray(x), self.config)
        return stream

    def decode(self, stream: np.ndarray, out: np.ndarray) -> Any:
        y, _ = self._sz.decompress(stream, out.dtype, out.shape)
        out[...] = y
        return out
