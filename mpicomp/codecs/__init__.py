"""Codecs: header-free encodings of float buffers, fixed-size but for ``errbound``.

>>> import numpy as np
>>> from mpicomp.codecs import get_codec
>>> c = get_codec("zfp", rate=8.0, dims=1)
>>> x = np.linspace(0, 1, 1000, dtype=np.float32)
>>> buf = c.encode(x)
>>> buf.size == c.encoded_nbytes(x.size, x.dtype)
True
>>> y = c.decode(buf, out=np.empty_like(x))
"""
from ..errors import UncompressibleError, UnknownCodecError
from .base import Codec
from .bitplane import BitplaneCodec
from .cast import CastCodec
from .errbound import ErrboundCodec
from .none import NoneCodec
from .registry import get_codec, register_codec, registered_codecs
from .zfp import ZfpCodec

register_codec(NoneCodec)
register_codec(ZfpCodec)
register_codec(BitplaneCodec)
register_codec(CastCodec)
register_codec(ErrboundCodec)

__all__ = [
    "BitplaneCodec",
    "CastCodec",
    "Codec",
    "ErrboundCodec",
    "NoneCodec",
    "UncompressibleError",
    "UnknownCodecError",
    "ZfpCodec",
    "get_codec",
    "register_codec",
    "registered_codecs",
]
