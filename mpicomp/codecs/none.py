"""The identity codec: the raw bytes of the buffer (``codec="none"`` = no compression)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Codec

__all__ = ["NoneCodec"]


class NoneCodec(Codec):
    """Lossless pass-through; any fixed-size numeric dtype."""

    codec_id = "none"
    lossy = False
    dtypes = tuple(
        np.dtype(t)
        for t in (np.float16, np.float32, np.float64, np.int8, np.int16, np.int32,
                  np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.complex64,
                  np.complex128)
    )

    def __init__(self, rate: Any = None):
        # ``rate`` is accepted (and ignored) so that a policy can switch codecs
        # without dropping its rate; it is not part of the config.
        del rate

    def _params(self) -> dict[str, Any]:
        return {}

    def stream_nbytes(self, count: int, dtype: np.dtype) -> int:
        return count * dtype.itemsize

    def encode_into(self, x: np.ndarray, out: np.ndarray) -> None:
        out[:] = x.view(np.uint8)

    def decode_into(self, buf: np.ndarray, out: np.ndarray) -> None:
        out.view(np.uint8)[:] = buf
