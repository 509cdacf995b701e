"""Codec registry: codec ids to classes, and ``get_codec``."""
from __future__ import annotations

from typing import Any

from ..errors import UnknownCodecError
from .base import Codec

__all__ = ["get_codec", "register_codec", "registered_codecs"]

_REGISTRY: dict[str, type[Codec]] = {}


def register_codec(cls: type[Codec], codec_id: str | None = None) -> type[Codec]:
    """Register a codec class under ``codec_id`` (default ``cls.codec_id``).

    Usable as a decorator. Registering an id again replaces the earlier class.
    """
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise TypeError(f"register_codec needs a Codec subclass, got {cls!r}")
    _REGISTRY[codec_id or cls.codec_id] = cls
    return cls


def registered_codecs() -> list[str]:
    """The ids of all registered codecs, sorted."""
    return sorted(_REGISTRY)


def get_codec(spec: str | dict[str, Any] | Codec, **params: Any) -> Codec:
    """Build a codec from an id and parameters, or from a config dict.

    >>> get_codec("zfp", rate=8.0, dims=1).get_config()["rate"]
    8.0
    >>> get_codec({"id": "cast", "dtype": "bfloat16"}).codec_id
    'cast'
    """
    if isinstance(spec, Codec):
        if params:
            raise TypeError("parameters cannot be given together with a codec instance")
        return spec
    if isinstance(spec, dict):
        config = dict(spec)
        if "id" not in config:
            raise ValueError(f"codec config needs an 'id' key, got keys {sorted(config)}")
        codec_id = config.pop("id")
        config.update(params)
    elif isinstance(spec, str):
        codec_id, config = spec, params
    else:
        raise TypeError(
            f"codec must be a str id, a config dict or a Codec, got {type(spec).__name__}"
        )
    cls = _REGISTRY.get(codec_id)
    if cls is None:
        raise UnknownCodecError(codec_id, list(_REGISTRY))
    return cls(**config)
