"""Compression policies: which codec, at what rate, above what size, by which algorithm.

A :class:`Policy` holds five optional settings. ``None`` means "not set
here": a setting is taken from the first place that sets it, in this order:

1. the arguments of the call (``comm.Allreduce(a, b, rate=8)``),
2. the communicator's policy (``mpicomp.Comm(MPI.COMM_WORLD, codec="bitplane")``),
3. the environment (``MPICOMP_CODEC``, ``MPICOMP_RATE``, ``MPICOMP_THRESHOLD``,
   ``MPICOMP_ALGORITHM``, ``MPICOMP_TOLERANCE``),
4. :data:`DEFAULT`: codec ``auto`` at 16 bits per value above 64 KiB,
   automatic algorithm.

The codec ``auto`` is bitplane at the policy's rate, used only when the
performance model (:mod:`mpicomp.model`, calibrated on the job's own
network and codecs) predicts that compressing the call pays; otherwise
the call goes to plain MPI. So an unchanged program that does ``from
mpicomp import COMM_WORLD`` pays only the wrapper's call overhead where
compression cannot pay (on one node the model always picks plain MPI), and
compresses by itself where the network is slow. Naming a codec (call, communicator or environment) compresses every
call above the threshold, with the algorithm still chosen by the model
unless one is given; ``MPICOMP_CODEC=none`` turns compression off.

A ``tolerance`` (``1e-3``: absolute; ``"rel:1e-3"``: relative to the
largest magnitude of the call's input over all ranks) bounds the error of
a whole collective on every rank: it selects the error-bounded codec
``errbound`` when no codec is named (and compresses every call above the
threshold, as naming a codec does, on one node too), and each call derives
its codec's bound from it (:mod:`mpicomp.tolerance`). Naming another codec
with it is an error: only ``errbound`` has a bound to set.

The environment is read when a communicator is created
(``mpicomp.COMM_WORLD``: when ``mpicomp`` is imported).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .codecs import Codec, get_codec
from .codecs.registry import registered_codecs
from .errors import UnknownCodecError

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "DEFAULT",
    "ENV",
    "Policy",
    "Resolved",
    "resolve",
]

#: allreduce algorithms; "auto" picks one by message size and rank count
ALGORITHMS = ("auto", "allgather", "ring", "direct", "recursive_doubling", "homomorphic",
              "hierarchical")

#: the codec setting that lets the performance model decide
AUTO = "auto"
#: the codec ``auto`` compresses with (at the policy's rate)
AUTO_CODEC = "bitplane"

#: environment variable of each setting
ENV = {
    "codec": "MPICOMP_CODEC",
    "rate": "MPICOMP_RATE",
    "threshold": "MPICOMP_THRESHOLD",
    "algorithm": "MPICOMP_ALGORITHM",
    "tolerance": "MPICOMP_TOLERANCE",
}


@dataclasses.dataclass(frozen=True)
class Policy:
    """Optional settings; ``None`` defers to the next level (see module docs).

    codec
        ``"auto"`` (see the module docs), a codec id (``"zfp"``,
        ``"bitplane"``, ``"cast"``, ``"none"``), a config dict (``{"id": "zfp", "dims": 3}``) or a JSON string of one.
    rate
        Maximum bits per value on the wire, passed to the codec (and used by
        the homomorphic algorithm).
    threshold
        Buffers of fewer bytes than this go to plain MPI.
    algorithm
        One of :data:`ALGORITHMS`.
    tolerance
        The largest error of a whole collective's result: a number (absolute),
        or ``"rel:X"`` / ``"abs:X"``; kept as ``(X, relative)``.
    """

    codec: str | Mapping[str, Any] | None = None
    rate: float | None = None
    threshold: int | None = None
    algorithm: str | None = None
    tolerance: Any = None

    def __post_init__(self) -> None:
        if self.codec is not None:
            object.__setattr__(self, "codec", _check_codec_spec(self.codec))
        if self.rate is not None:
            object.__setattr__(self, "rate", _check_rate(self.rate, "rate"))
        if self.threshold is not None:
            object.__setattr__(self, "threshold", _check_threshold(self.threshold, "threshold"))
        if self.algorithm is not None:
            object.__setattr__(self, "algorithm", _check_algorithm(self.algorithm, "algorithm"))
        if self.tolerance is not None:
            object.__setattr__(self, "tolerance", _check_tolerance(self.tolerance, "tolerance"))

    def override(self, **settings: Any) -> Policy:
        """This policy with the settings that are not ``None`` in ``settings`` replaced."""
        unknown = set(settings) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown policy settings {sorted(unknown)}")
        given = {k: v for k, v in settings.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self

    def merged_over(self, base: Policy) -> Policy:
        """This policy where set, ``base`` elsewhere (both checked when made: a setting is
        checked once, where it is given, not again at each level it passes)."""
        merged = object.__new__(Policy)
        for field in dataclasses.fields(self):
            mine = getattr(self, field.name)
            object.__setattr__(merged, field.name,
                               mine if mine is not None else getattr(base, field.name))
        return merged



@dataclasses.dataclass(frozen=True)
class Resolved:
    """A fully resolved policy: every setting known, the codec built."""

    codec: Codec
    rate: float
    threshold: int
    algorithm: str
    #: True when the codec is ``auto``: the model decides whether to compress
    auto: bool = False
    #: ``(value, relative)``: the bound of a whole collective (the codec is errbound)
    tolerance: tuple[float, bool] | None = None
    #: False when the codec is ``none`` (everything goes to plain MPI)
    enabled: bool = dataclasses.field(init=False)
    #: every setting in one line (what the agreement step fingerprints)
    description: str = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        # set once: a call reads them, and a frozen policy never changes
        object.__setattr__(self, "enabled", self.codec.codec_id != "none")
        object.__setattr__(self, "description", (
            f"codec={'auto:' if self.auto else ''}"
            f"{json.dumps(self.codec.get_config(), sort_keys=True)} rate={self.rate:g} "
            f"threshold={self.threshold} algorithm={self.algorithm}"
            + (f" tolerance={_tolerance_text(self.tolerance)}" if self.tolerance else "")))

    def settings(self) -> dict[str, str]:
        """Each setting as text (the error that names differing settings compares these)."""
        return {
            "codec": ("auto:" if self.auto else "")
            + json.dumps(self.codec.get_config(), sort_keys=True),
            "rate": f"{self.rate:g}",
            "threshold": str(self.threshold),
            "algorithm": self.algorithm,
            "tolerance": _tolerance_text(self.tolerance) if self.tolerance else "none",
        }

    def describe(self) -> str:
        return self.description


def environment_policy(environ: Mapping[str, str] | None = None) -> Policy:
    """The policy set by the ``MPICOMP_*`` variables (unset ones are ``None``)."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, var in ENV.items():
        raw = env.get(var)
        if raw is None or raw.strip() == "":
            continue
        raw = raw.strip()
        if name == "codec":
            values[name] = _check_codec_spec(raw, source=var)
        elif name == "rate":
            values[name] = _check_rate(_parse_number(raw, var), var)
        elif name == "threshold":
            values[name] = _check_threshold(_parse_size(raw, var), var)
        elif name == "tolerance":
            values[name] = _check_tolerance(raw, var)
        else:
            values[name] = _check_algorithm(raw, var)
    return Policy(**values)


def resolve(call: Policy, comm: Policy, environ: Mapping[str, str] | None = None,
            env: Policy | None = None) -> Resolved:
    """Resolve call > communicator > environment > :data:`DEFAULT`.

    ``env``: the environment's policy, if already read (else it is read from
    ``environ`` or ``os.environ``).
    """
    env_policy = env if env is not None else environment_policy(environ)
    merged = call.merged_over(comm.merged_over(env_policy.merged_over(DEFAULT)))
    spec = merged.codec
    # the homomorphic algorithm carries no codec: naming it asks for compression
    auto = spec == AUTO and merged.algorithm != "homomorphic"
    config = dict(spec) if isinstance(spec, Mapping) else {
        "id": AUTO_CODEC if spec == AUTO else spec}
    tolerance = merged.tolerance
    if tolerance is not None:
        if merged.algorithm == "homomorphic":
            raise ValueError(f"tolerance {_tolerance_text(tolerance)}: the homomorphic "
                             "algorithm has no error bound to set (it sums fixed-point "
                             "values at its rate); choose another algorithm")
        if spec == AUTO:
            config, auto = {"id": "errbound"}, False
        elif config["id"] not in ("errbound", "none"):
            raise ValueError(f"tolerance {_tolerance_text(tolerance)} with codec "
                             f"{config['id']!r}: only the errbound codec has an error "
                             "bound to set; name codec 'errbound' or leave the codec unset")
        if config["id"] == "errbound":
            config.update(tolerance=tolerance[0], relative=tolerance[1])
        else:
            tolerance = None
    codec_id = config["id"]
    # the policy's rate goes to the codec unless the codec config names its own
    if "rate" not in config and codec_id not in ("none",):
        config["rate"] = merged.rate
    codec = _build_codec(json.dumps(config, sort_keys=True))
    return Resolved(codec, float(merged.rate), int(merged.threshold), str(merged.algorithm),
                    auto, tolerance)


@functools.lru_cache(maxsize=256)
def _build_codec(config_json: str) -> Codec:
    config = json.loads(config_json)
    try:
        return get_codec(config)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, UnknownCodecError):
            raise
        raise type(exc)(f"policy codec {config}: {exc}") from None


# -- validation ---------------------------------------------------------------
def _check_codec_spec(spec: Any, source: str = "codec") -> str | Mapping[str, Any]:
    if isinstance(spec, Codec):
        return spec.get_config()
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("{"):
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{source}: {text!r} is not a JSON codec config ({exc})") from None
        else:
            if text == AUTO:
                return text
            if text not in registered_codecs():
                raise UnknownCodecError(text, registered_codecs())
            return text
    if isinstance(spec, Mapping):
        if "id" not in spec:
            raise ValueError(f"{source}: a codec config needs an 'id' key, got {dict(spec)!r}")
        if spec["id"] not in registered_codecs():
            raise UnknownCodecError(spec["id"], registered_codecs())
        return dict(spec)
    raise TypeError(
        f"{source} must be a codec id, a config dict or a Codec, got {type(spec).__name__}"
    )


def _check_rate(rate: Any, source: str) -> float:
    if isinstance(rate, (bool, np.bool_)) or not isinstance(
        rate, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"{source} must be a number of bits per value, got {rate!r}")
    rate = float(rate)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"{source} must be a positive number of bits per value, got {rate!r}")
    return rate


def _check_threshold(threshold: Any, source: str) -> int:
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, np.integer)):
        raise TypeError(f"{source} must be an integer number of bytes, got {threshold!r}")
    if threshold < 0:
        raise ValueError(f"{source} must be >= 0 bytes, got {threshold}")
    return int(threshold)


def _check_algorithm(algorithm: Any, source: str) -> str:
    if not isinstance(algorithm, str):
        raise TypeError(f"{source} must be one of {list(ALGORITHMS)}, got {algorithm!r}")
    name = algorithm.strip().lower().replace("-", "_")
    if name not in ALGORITHMS:
        raise ValueError(f"{source} must be one of {list(ALGORITHMS)}, got {algorithm!r}")
    return name


def _check_tolerance(tolerance: Any, source: str) -> tuple[float, bool]:
    """``(value, relative)`` from a number (absolute), ``"rel:X"``, ``"abs:X"``, ``"X"`` or
    an already checked pair."""
    relative = False
    value = tolerance
    if isinstance(tolerance, tuple) and len(tolerance) == 2 and isinstance(tolerance[1], bool):
        value, relative = tolerance
    elif isinstance(tolerance, str):
        text = tolerance.strip().lower()
        kind, _, number = text.rpartition(":")
        if kind not in ("", "abs", "rel"):
            raise ValueError(f"{source} must be a number, 'abs:X' or 'rel:X', "
                             f"got {tolerance!r}")
        relative = kind == "rel"
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"{source} must be a number, 'abs:X' or 'rel:X', "
                             f"got {tolerance!r}") from None
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{source} must be a number, 'abs:X' or 'rel:X', got {tolerance!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{source} must be finite and > 0, got {tolerance!r}")
    return value, relative


def _tolerance_text(tolerance: tuple[float, bool]) -> str:
    return f"{'rel' if tolerance[1] else 'abs'}:{tolerance[0]:g}"


def _parse_number(raw: str, var: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{var} must be a number, got {raw!r}") from None


_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
                "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def _parse_size(raw: str, var: str) -> int:
    """``"65536"``, ``"64K"``, ``"1MiB"`` -> bytes (binary multiples)."""
    text = raw.strip().upper().replace(" ", "")
    digits = text.rstrip("KMGIB")
    suffix = text[len(digits):]
    if not digits.isdigit() or suffix not in _SIZE_SUFFIX:
        raise ValueError(f"{var} must be a byte count like 65536, 64K or 1MiB, got {raw!r}")
    return int(digits) * _SIZE_SUFFIX[suffix]


#: the settings used when neither call, communicator nor environment sets them
DEFAULT = Policy(codec=AUTO, rate=16.0, threshold=64 * 1024, algorithm="auto")
