"""Layer-selective rules: which compression settings a named gradient gets.

A rule is ``(match, settings)``: ``match`` is a shell-style pattern on the
gradient's name (``"*.bias"``, ``"*norm*"``) or a callable ``(name, array)
-> bool``; ``settings`` is a dict of the communicator's per-call settings
(``codec``, ``rate``, ``algorithm``, ``threshold``) and, optionally,
``bucket``: a label; gradients of different labels never share a bucket.
Rules are tried in order and the first match wins (as TAGC's layer rules
do); a gradient no rule matches gets the reducer's own settings.

Why a label: a lossy codec quantizes blocks of values, and a block's error
depends on every value in it. Under tensor parallelism the parameters that
are not split (norms, embeddings, a row-parallel layer's bias) get the same
gradient on every rank of the tensor-parallel group, while the split ones
differ; packed into one bucket, a block that holds both is quantized
differently on each tensor-parallel rank, and the unsplit parameters drift
apart. ``("*", {"bucket": "unsplit"})`` for those names keeps them in
buckets of their own, whose contents and so whose results are the same on
every tensor-parallel rank.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

__all__ = ["Rule", "check_rules", "settings_for"]

Match = Union[str, Callable[[str, Any], bool]]
Rule = tuple[Match, Mapping[str, Any]]

ALLOWED = ("codec", "rate", "algorithm", "threshold", "bucket")


def check_rules(rules: Sequence[Rule]) -> list[Rule]:
    """The rules as a list; TypeError/ValueError naming a malformed one."""
    out = []
    for i, rule in enumerate(rules):
        if not (isinstance(rule, (tuple, list)) and len(rule) == 2):
            raise TypeError(f"rule {i} must be (pattern or callable, settings dict), got {rule!r}")
        match, settings = rule
        if not (isinstance(match, str) or callable(match)):
            raise TypeError(f"rule {i}: the match must be a name pattern or a callable, "
                            f"got {match!r}")
        if not isinstance(settings, Mapping):
            raise TypeError(f"rule {i}: settings must be a dict, got {settings!r}")
        unknown = sorted(set(settings) - set(ALLOWED))
        if unknown:
            raise ValueError(f"rule {i}: unknown settings {unknown}; allowed: {list(ALLOWED)}")
        if "bucket" in settings and not isinstance(settings["bucket"], str):
            raise TypeError(f"rule {i}: bucket must be a label (str), "
                            f"got {settings['bucket']!r}")
        out.append((match, dict(settings)))
    return out


def settings_for(name: str, array: Any, rules: Sequence[Rule],
                 default: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of the first rule matching ``name`` (and ``array``), else ``default``."""
    for match, settings in rules:
        hit = fnmatch.fnmatchcase(name, match) if isinstance(match, str) else bool(
            match(name, array))
        if hit:
            return {**default, **settings}
    return dict(default)
