"""The ``pairwise`` marker's selection (tests/pairwise.py) holds every pair of values."""
from __future__ import annotations

import itertools
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))
import pairwise  # noqa: E402


def _items(**levels):
    names = sorted(levels)
    return [SimpleNamespace(callspec=SimpleNamespace(params=dict(zip(names, values,
                                                                     strict=True))))
            for values in itertools.product(*(levels[n] for n in names))]


def _held(items):
    return set().union(*(pairwise._pairs(pairwise.factors(i)) for i in items))


def test_the_cover_holds_every_pair_in_fewer_cases():
    # test_allreduce's shape: (kind, MPI path) x dtype x codec x algorithm
    items = _items(where=[(k, a) for k in ("numba", "cai") for a in ("1", "0")],
                   dtype=["f32", "f64"], config=[{"id": "bitplane"}, {"id": "cast"},
                                                 {"id": "errbound"}],
                   algorithm=["allgather", "ring", "direct", "recursive_doubling"])
    chosen = pairwise.cover(items)
    assert _held(chosen) == _held(items)
    assert 12 <= len(chosen) <= 16 < len(items) == 96  # 12: algorithm x codec at least
    # the tuple's elements pair with the others on their own: (cai, "0") with each codec
    for cfg in ("bitplane", "cast", "errbound"):
        assert any(i.callspec.params["where"][1] == "0"
                   and i.callspec.params["config"]["id"] == cfg for i in chosen)
    assert [id(i) for i in pairwise.cover(items)] == [id(i) for i in chosen]  # every rank


def test_one_parameter_keeps_every_value_and_none_keeps_the_item():
    items = _items(config=["a", "b", "c"])
    assert len(pairwise.cover(items)) == 3
    bare = SimpleNamespace()
    assert pairwise.cover([bare]) == [bare]
