"""All-pairs selection of a test's simulator cases (the ``pairwise`` marker).

Numba's CUDA simulator runs a kernel's every thread in Python: a device case
of a few thousand values takes 5 to 70 s there. A test marked
``@pytest.mark.pairwise`` runs, in CI's simulator stages, only a set of its
device cases in which every pair of parameter values (of any two of its
parameters) still occurs; the others get the ``exhaustive`` marker, which
``make test-device`` and a GPU run (``tests/run_tests.py --sim-all``).

A parameter whose value is a tuple (the ``where`` fixture's ``(kind,
cuda_aware)``) counts as one parameter per element, so that the buffer kind
and the MPI path pair with the other parameters independently. The choice is
greedy over the items in collection order: the same on every rank, which
must run the same tests.
"""
from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

import pytest


def factors(item: pytest.Item) -> tuple[tuple[str, str], ...]:
    """The item's (parameter, value) pairs, a tuple value split into its elements."""
    spec = getattr(item, "callspec", None)
    if spec is None:
        return ()
    out = []
    for name in sorted(spec.params):
        value = spec.params[name]
        if isinstance(value, tuple):
            out += [(f"{name}[{i}]", _key(v)) for i, v in enumerate(value)]
        else:
            out.append((name, _key(value)))
    return tuple(out)


def _key(value: object) -> str:
    """A value as the same text on every rank (``repr`` without an object's address)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _pairs(fs: tuple[tuple[str, str], ...]) -> set:
    """The value pairs an item holds, and its single values (a test of one parameter)."""
    return set(itertools.combinations(fs, 2)) | {(f,) for f in fs}


def cover(items: Sequence[pytest.Item]) -> list[pytest.Item]:
    """A subset of ``items`` holding every pair of parameter values that ``items`` hold:
    each step takes the first item that adds the most pairs not yet held. An item
    without parameters is always kept."""
    todo = [(item, _pairs(factors(item))) for item in items]
    chosen = [item for item, pairs in todo if not pairs]
    wanted = set().union(*(p for _, p in todo)) if todo else set()
    while wanted:
        best, gain = None, 0
        for item, pairs in todo:
            g = len(pairs & wanted)
            if g > gain:
                best, gain = (item, pairs), g
        item, pairs = best  # (gain > 0: every wanted pair comes from some item)
        chosen.append(item)
        wanted -= pairs
        todo.remove(best)
    return chosen


def mark_beyond_cover(items: Sequence[pytest.Item]) -> None:
    """Per test function marked ``pairwise``: its device cases outside the cover are
    marked ``exhaustive``."""
    groups: dict[object, list[pytest.Item]] = {}
    for item in items:
        if (item.get_closest_marker("pairwise") is not None
                and item.get_closest_marker("device") is not None
                and item.get_closest_marker("exhaustive") is None):
            groups.setdefault(getattr(item, "function", item), []).append(item)
    for group in groups.values():
        kept = {id(i) for i in cover(group)}
        for item in group:
            if id(item) not in kept:
                item.add_marker(pytest.mark.exhaustive)
