"""Compressed allreduce algorithms, one per module, and the automatic choice.

* :mod:`.allgather_sum` (``algorithm="allgather"``): everyone's compressed buffer to
  everyone, local sum.
* :mod:`.ring`: ring reduce-scatter with recompression, ring allgather.
* :mod:`.direct`: direct reduce-scatter and allgather (every rank to every other at once).
* :mod:`.recursive_doubling`: log2(p) exchange rounds, any p.
* :mod:`.homomorphic`: shared per-block scales, exact integer sum.
* :mod:`.hierarchical`: plain inside each node, the ring between nodes.

Also here, for the other collectives: :mod:`.ring`'s reduce-scatter and
allgather, and :mod:`.chain`, the Bcast down a chain of pieces.

Error bounds per algorithm: ``docs/algorithms.md``.
"""
from __future__ import annotations

from types import ModuleType

from . import allgather_sum, direct, hierarchical, homomorphic, recursive_doubling, ring
from .common import Ctx

__all__ = ["BY_NAME", "Ctx", "allgather_sum", "choose", "direct", "hierarchical", "homomorphic",
           "recursive_doubling", "ring"]

#: each ``algorithm=`` name's module
BY_NAME: dict[str, ModuleType] = {"allgather": allgather_sum, "ring": ring,
                                  "direct": direct,
                                  "recursive_doubling": recursive_doubling,
                                  "homomorphic": homomorphic, "hierarchical": hierarchical}

#: below this many bytes (per rank) recursive doubling beats the ring
SMALL = 256 * 1024


def choose(nbytes: int, p: int) -> str:
    """The algorithm ``auto`` runs for a buffer of ``nbytes`` on ``p`` ranks.

    Two ranks: allgather (one exchange, each input quantized once). Small
    buffers: recursive doubling (log2 p rounds of latency). Otherwise the
    ring, which sends about 2 (p - 1) / p of the compressed buffer per rank
    (``direct`` sends as much in two rounds, but was the slower on the
    simulated cluster: ``docs/algorithms.md``; it runs only when named).
    """
    if p <= 2:
        return "allgather"
    if nbytes < SMALL:
        return "recursive_doubling"
    return "ring"
