"""A communicator's compression settings: one object that the pipeline and the decision read.

:class:`CommSettings` holds what a :class:`mpicomp.Comm` was given (its
:class:`~mpicomp.policy.Policy`) and what it read from the environment at
creation, resolves the settings of each call (call > communicator >
``MPICOMP_*`` > :data:`~mpicomp.policy.DEFAULT`, cached per distinct per-call
settings), and checks once that every rank holds the same communicator-level
settings (:meth:`CommSettings.check`). What it learns opens the plain fast
path (:class:`mpicomp.fastpath.limits.FastPath`): sends once the default is
resolved, collectives once the ranks agreed.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from .decision.agreement import fingerprint
from .errors import RankDisagreement
from .fastpath.limits import FastPath
from .policy import Policy, Resolved, environment_policy, resolve

__all__ = ["P2P_AUTO", "RESOLVED_KEPT", "CommSettings"]

#: the plain-MPI reason of point-to-point calls under the codec auto
P2P_AUTO = "codec auto: point to point stays plain (name a codec to compress it)"

#: how many distinct per-call settings a communicator keeps resolved
RESOLVED_KEPT = 64


class CommSettings:
    """One communicator's settings (see the module docs).

    ``comm``: the communicator (its size); ``fast``: its fast path, told what the
    settings allow.
    """

    def __init__(self, policy: Policy, comm: MPI.Intracomm, fast: FastPath) -> None:
        #: the communicator's own settings (``None``: environment or default)
        self.policy = policy
        #: the ``MPICOMP_*`` variables, read when the communicator was made
        self.env = environment_policy()
        self.comm = comm
        self.fast = fast
        self._default: Resolved | None = None
        #: per-call settings resolved before (by their items), at most RESOLVED_KEPT
        self._resolved: dict[tuple[tuple[str, Any], ...], Resolved] = {}
        #: the ranks found their communicator-level settings equal (:meth:`check`); until
        #: then no collective takes the fast path (one rank: nothing to compare)
        self.agreed = False

    @property
    def default(self) -> Resolved:
        """The settings of a call that names none."""
        pol = self._default
        if pol is None:
            pol = self._default = resolve(Policy(), self.policy, env=self.env)
            size1 = self.comm.Get_size() == 1
            self.agreed = self.agreed or size1
            self.fast.default_known(pol.enabled, pol.auto, pol.threshold, size1,
                                    self.agreed, P2P_AUTO)
        return pol

    def resolve(self, **settings: Any) -> Resolved:
        """The settings a call with these keyword overrides uses (checked, not cached)."""
        if not settings:
            return self.default
        return resolve(Policy(**settings), self.policy, env=self.env)

    def for_call(self, settings: dict[str, Any]) -> Resolved:
        """The settings of a call with these keyword overrides (checked; resolved once per
        distinct hashable settings)."""
        if not settings:
            return self._default or self.default
        try:
            key = tuple(sorted(settings.items()))
            pol = self._resolved.get(key)
        except TypeError:  # an unhashable setting (a codec given as a dict)
            return self.resolve(**settings)
        if pol is None:
            pol = self.resolve(**settings)
            if len(self._resolved) < RESOLVED_KEPT:
                self._resolved[key] = pol
        return pol

    def check(self, private: MPI.Intracomm) -> None:
        """The same :class:`~mpicomp.errors.RankDisagreement` on every rank where the ranks'
        communicator-level settings differ (one MAX allreduce on ``private``, the
        communicator's private duplicate); then collectives may take the fast path."""
        pol = self.default
        if self.comm.Get_size() > 1:
            settings = pol.settings()
            fp = fingerprint(sorted(settings.items()))
            vec = np.array([fp, -fp], np.float64)
            out = np.empty_like(vec)
            private.Allreduce(vec, out, op=MPI.MAX)
            if out[0] != -out[1]:
                raise RankDisagreement(_settings_difference(private.allgather(settings)))
        self.agreed = True
        self.fast.agreed(pol.enabled, pol.threshold)


def _settings_difference(per_rank: list[dict[str, str]]) -> str:
    """The error message naming each setting on which the ranks differ, and their values."""
    parts = []
    for key in per_rank[0]:
        values: dict[str, list[int]] = {}
        for rank, settings in enumerate(per_rank):
            values.setdefault(settings[key], []).append(rank)
        if len(values) > 1:
            shown = "; ".join(f"{value} on rank(s) {_ranks(ranks)}"
                              for value, ranks in values.items())
            parts.append(f"{key}: {shown}")
    return ("mpicomp: the ranks' compression settings differ (" + " | ".join(parts) + "): "
            "set the MPICOMP_* variables and the Comm(...) settings alike on every rank")


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8
                                            else "")
