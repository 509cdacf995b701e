"""The agreement step every compressed collective starts with.

Whether a collective can be compressed depends on data only one rank sees
(a NaN, a value so large that a sum of ``p`` of them overflows) and on
arguments every rank passes for itself (count, dtype, op, codec, rate). If
ranks decided alone, one could take the compressed path while another took
plain MPI, and both would wait forever. So before a compressed collective
the ranks make one MAX allreduce of four float64 numbers:

* the largest magnitude in this rank's input (+Inf for NaN/Inf),
* a 48-bit fingerprint of the call's settings, and its negation (so that
  ``max`` and ``-max(-x)`` give the largest and the smallest fingerprint:
  they differ exactly when two ranks disagree),
* ``rank + 1`` of a rank whose arguments failed a local check, else 0.

Every rank gets the same four numbers back and therefore takes the same
decision or raises the same error.

A speculative algorithm (the ring allreduce with a guarded codec, see
``Ctx.guarded``) passes no input here (``local_max_abs`` 0): only the
settings are agreed on, and the encoders find unsafe data while it runs.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
from mpi4py import MPI

__all__ = ["Agreement", "RankDisagreement", "agree", "fingerprint"]


class RankDisagreement(ValueError):
    """The ranks passed different counts, dtypes, ops or compression settings."""


@dataclasses.dataclass(frozen=True)
class Agreement:
    max_abs: float  #: largest magnitude over all ranks (+Inf: some rank holds NaN/Inf)


def fingerprint(*parts: object) -> float:
    """A 48-bit hash of ``parts`` as a float64 (exact: below 2**53)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=6).digest()
    return float(int.from_bytes(digest, "little"))


def agree(
    comm: MPI.Intracomm, op: str, local_max_abs: float, settings: str, failed: bool = False
) -> Agreement:
    """Run the agreement allreduce on ``comm``; raise the same error on every rank if needed."""
    fp = fingerprint(settings)
    vec = np.array([local_max_abs, fp, -fp, comm.Get_rank() + 1 if failed else 0], np.float64)
    out = np.empty_like(vec)
    comm.Allreduce(vec, out, op=MPI.MAX)
    if out[3] > 0:
        raise ValueError(
            f"{op}: rank {int(out[3]) - 1} rejected its arguments, so every rank stops here"
        )
    if out[1] != -out[2]:
        raise RankDisagreement(
            f"{op}: the ranks disagree on count, dtype, op or compression settings; "
            f"this rank (rank {comm.Get_rank()}) has {settings}"
        )
    return Agreement(float(out[0]))
