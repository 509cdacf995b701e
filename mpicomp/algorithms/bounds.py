"""Error bounds of the compressed allreduce algorithms (``docs/algorithms.md``).

A codec with a pointwise bound quantizes a vector ``v`` with a per-value
error of at most ``c * max|v| + a`` (:func:`codec_constants`). Let
``G = sum over ranks of max|x_r|``: no input and no partial sum exceeds
``G`` (up to the errors themselves). An algorithm that quantizes ``m``
vectors on the way to a value (:func:`quantizations`) is then within

    m * c * G * (1 + c) ** m  +  (m + p) * a  +  p * eps * G * (1 + c) ** m

of the exact sum, the last term being float rounding of the additions
(``eps`` = 2**-24 for float32, 2**-53 for float64).
"""
from __future__ import annotations

import math

import numpy as np

from ..codecs import Codec

__all__ = ["allreduce_bound", "codec_constants", "homomorphic_bound", "quantizations"]


def codec_constants(codec: Codec, dtype: np.dtype) -> tuple[float, float] | None:
    """``(c, a)`` with ``|decode(encode(v)) - v| <= c * max|v| + a``; None for zfp (no bound)."""
    dt = np.dtype(dtype)
    cid = codec.codec_id
    if cid == "none":
        return 0.0, 0.0
    if cid == "bitplane":
        cfg = codec.get_config()
        ebits = 8 if dt == np.float32 else 16
        p_bits = math.floor(cfg["rate"] - ebits / cfg["block_size"])
        m = p_bits - 1  # magnitude bits
        bias = 127 if dt == np.float32 else 1023
        return 2.0 ** (1 - m), 2.0 ** (2 - bias - m)
    if cid == "cast":
        if codec.get_config()["dtype"] == "float16":
            return 2.0**-11, 2.0**-25
        extra = 0.0 if dt == np.float32 else 2.0**-24 + 2.0**-32
        return 2.0**-8 + extra, 2.0**-134 + 2.0**-150
    if cid == "errbound":  # its bound, absolute or relative to the encoded piece's max|v|
        cfg = codec.get_config()
        return (cfg["tolerance"], 0.0) if cfg["relative"] else (0.0, cfg["tolerance"])
    return None


def quantizations(algorithm: str, p: int, nodes: int | None = None) -> int:
    """How many quantized vectors add their error to each result value
    (``nodes``: the hierarchical algorithm's node count)."""
    if algorithm == "hierarchical":
        if nodes is None:
            raise ValueError("the hierarchical bound needs the number of nodes")
        return nodes  # the ring between the node leaders
    if algorithm == "allgather":
        return 1  # each input once: sum of c*max|x_r| <= c*G
    if algorithm == "ring":
        return p  # p - 1 hops of partial sums, one final chunk
    if algorithm == "direct":
        return 2  # each input once (their errors add to c*G), then the chunk's sum
    if algorithm == "recursive_doubling":
        q = 1 << (p.bit_length() - 1)
        return 2 * int(math.log2(q)) + (2 if p != q else 0)
    raise ValueError(f"no codec bound for algorithm {algorithm!r}")


def allreduce_bound(algorithm: str, p: int, c: float, a: float, g: float,
                    dtype: np.dtype, nodes: int | None = None) -> float:
    """The bound of the module docs for one allreduce."""
    m = quantizations(algorithm, p, nodes)
    eps = float(np.finfo(dtype).eps) / 2
    growth = (1.0 + c) ** m
    return m * c * g * growth + (m + p) * a + p * eps * g * growth


def homomorphic_bound(p: int, q_max: int, block_exp: np.ndarray, result: np.ndarray) -> np.ndarray:
    """Per-value bound of the homomorphic algorithm: ``p 2**e / (2 Q)`` plus one rounding."""
    from .homomorphic import BLOCK

    e = np.repeat(block_exp.astype(np.float64), BLOCK)[: result.size]
    eps = float(np.finfo(result.dtype).eps)
    return p * np.exp2(e) / (2 * q_max) + eps * np.abs(result.astype(np.float64))
