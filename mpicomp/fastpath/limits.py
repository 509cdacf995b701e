"""A communicator's plain fast path: below which sizes its calls go to plain MPI at once.

Once a communicator's default policy is known, calls without settings on
NumPy arrays below a size go straight to MPI (the compiled methods of
:mod:`mpicomp.fastpath.install`), counted by size with their reason. The
limits follow what the communicator learns:

* the default policy resolved: sends below the threshold (every send under
  the codecs ``none`` and ``auto``); collectives none yet, as the ranks have
  not compared their settings;
* the ranks agreed on their settings: collectives below the threshold (all
  of them under ``none`` or on one rank);
* the codec ``auto`` found the communicator on one node: every collective;
* a probe holds messages (:mod:`mpicomp.mailbox`): receives must look there
  first, so point to point leaves the fast path until none is held.

The same limits in debug mode (``MPICOMP_DEBUG``): none, every call runs its
Python method and is reported.
"""
from __future__ import annotations

from typing import Any

from . import install
from .methods import NO_LIMITS, PlainLimits, collective_limit, p2p_limit

__all__ = ["FastPath"]


class FastPath:
    """The fast path's limits of one communicator, kept in its compiled state and its stats.

    ``comm`` is the communicator whose ``_shortcut`` slot holds the compiled
    state; ``stats`` its :class:`mpicomp.stats.Stats`, which counts the calls
    the compiled methods took under the reasons of the limits in force.
    """

    def __init__(self, comm: Any, stats: Any, debug: bool) -> None:
        self.comm, self.stats, self.debug = comm, stats, debug
        #: the limits the policy asks for; :attr:`limits` holds them, but for point to
        #: point while a probe holds messages
        self.wanted = self.limits = NO_LIMITS
        self.held = False
        self.size1 = False

    @property
    def off(self) -> bool:
        """No limits set yet (the default policy unknown), or debug mode."""
        return self.wanted is NO_LIMITS

    def default_known(self, enabled: bool, auto: bool, threshold: float, size1: bool,
                      agreed: bool, auto_reason: str) -> None:
        """The default policy was resolved (``auto``: its codec is ``auto``, which sends
        point to point plain for ``auto_reason``); collectives join once ``agreed``."""
        if self.debug or not self.off:
            return
        self.size1 = size1
        self.stats.threshold = threshold
        self._set(collective_limit(enabled, threshold, size1) if agreed else (0.0, ""),
                  p2p_limit(enabled, auto, threshold, auto_reason))

    def agreed(self, enabled: bool, threshold: float) -> None:
        """The ranks agreed on their settings: collectives take the fast path."""
        if not self.off:
            self._set(collective_limit(enabled, threshold, self.size1))

    def every_collective_plain(self, reason: str) -> None:
        """Every collective on host memory goes plain (``reason``)."""
        if not self.off:
            self._set((float("inf"), reason))

    def holding(self, held: bool) -> None:
        """A probe holds messages (``held``), or no longer: point to point off or on."""
        self.held = held
        if not self.off:
            self._apply()

    def _set(self, collective: tuple[float, str], p2p: tuple[float, str] | None = None) -> None:
        old = self.wanted
        self.wanted = PlainLimits(
            *collective, *(p2p if p2p is not None else (old.p2p, old.p2p_reason)))
        self._apply()

    def _apply(self) -> None:
        limits = self.wanted
        if self.held:  # every receive must look in the mailbox first: no shortcut
            limits = PlainLimits(limits.collective, limits.collective_reason)
        self.limits = limits
        self.stats.attach_shortcuts(install.update(self.comm, limits), limits)
