"""Per-operation statistics of a communicator, and the ``MPICOMP_DEBUG`` log.

``comm.stats()`` returns, per method name (``"Allreduce"``, ``"Send"``, ...):
calls, compressed calls, raw bytes (what the caller's buffers hold), bytes
on the wire (what this rank handed to MPI to send), seconds spent in codecs
and in MPI, plain-MPI calls with their reasons, the algorithms that ran, the
largest error a compressed call guaranteed under a ``tolerance``
(``error_bound``, absolute; 0 without one), and where the data was
(``memory``: ``host``; ``device, CUDA-aware MPI``: device buffers handed to
MPI; ``device, staged through pinned host``: only the compressed bytes
copied through reused page-locked host buffers; ``device, staged through
host (plain data)``: a plain call on device buffers with an MPI that is not
CUDA-aware). ``MPICOMP_DEBUG=1`` prints one line per call,
on stderr, saying which path ran, why, and where.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any

from .fastpath import methods as fast_methods
from .fastpath.methods import BELOW_THRESHOLD, RECEIVED_PLAIN

__all__ = ["BELOW_THRESHOLD", "OpStats", "Recorder", "Stats", "below_threshold",
           "debug_enabled", "live_tables"]

def below_threshold(nbytes: int, threshold: float) -> str:
    """The reason a call of ``nbytes`` below ``threshold`` went plain, as the stats name it."""
    return f"{BELOW_THRESHOLD} ({nbytes} B < {threshold} B)"


def debug_enabled() -> bool:
    return os.environ.get("MPICOMP_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


@dataclasses.dataclass
class OpStats:
    """Counters of one operation (all ranks keep their own)."""

    calls: int = 0
    compressed: int = 0
    raw_bytes: int = 0
    wire_bytes: int = 0
    codec_seconds: float = 0.0
    mpi_seconds: float = 0.0
    fallbacks: Counter = dataclasses.field(default_factory=Counter)
    algorithms: Counter = dataclasses.field(default_factory=Counter)
    memory: Counter = dataclasses.field(default_factory=Counter)
    error_bound: float = 0.0

    @property
    def ratio(self) -> float:
        """raw bytes / bytes on the wire (1.0 when nothing was sent)."""
        return self.raw_bytes / self.wire_bytes if self.wire_bytes else 1.0

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fallbacks"] = dict(self.fallbacks)
        d["algorithms"] = dict(self.algorithms)
        d["memory"] = dict(self.memory)
        d["ratio"] = self.ratio
        return d


class Stats:
    """Thread-safe table of :class:`OpStats` by operation name."""

    def __init__(self) -> None:
        _LIVE.add(self)
        self._ops: dict[str, OpStats] = {}
        #: the compiled plain-MPI shortcut's state, and the reasons its collectives and its
        #: sends went plain
        self._shortcut: Any = None
        self._limits = fast_methods.NO_LIMITS
        self._lock = threading.Lock()
        #: the default policy's threshold (names the fast path's "below threshold" reason)
        self.threshold = 0

    def op(self, name: str) -> OpStats:
        with self._lock:
            return self._ops.setdefault(name, OpStats())

    def as_dict(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            self._fold_fast()
            return {name: s.as_dict() for name, s in sorted(self._ops.items())}

    def reset(self) -> None:
        with self._lock:
            self._fold_fast()  # drains the shortcut's counts too
            self._ops.clear()

    def attach_shortcuts(self, state: Any, limits: fast_methods.PlainLimits) -> None:
        """Count the calls of this shortcut state (:mod:`mpicomp.fastpath`; None: there is
        no compiled shortcut) as plain: collectives and sends for the reasons of
        ``limits``, receives as "sender sent plain data".

        The calls it took so far are folded in first, under the reasons they
        were taken for.
        """
        with self._lock:
            self._fold_fast()
            self._shortcut, self._limits = state, limits

    def _fold_fast(self) -> None:
        """Move the compiled fast path's counts into the table (caller holds the lock)."""
        if self._shortcut is None:
            return
        for index, name in enumerate(fast_methods.METHODS):
            reason = (RECEIVED_PLAIN if name == "Recv"
                      else self._limits.collective_reason
                      if name in fast_methods.COLLECTIVES else self._limits.p2p_reason)
            for nbytes, calls in self._shortcut.take(index).items():
                s = self._ops.setdefault(name, OpStats())
                s.calls += calls
                s.raw_bytes += calls * nbytes
                if name not in fast_methods.RECEIVING:  # (wire bytes: what this rank sent)
                    s.wire_bytes += calls * nbytes
                why = below_threshold(nbytes, self.threshold) if reason == BELOW_THRESHOLD \
                    else reason
                s.fallbacks[why] += calls
                s.memory["host"] += calls

    def __repr__(self) -> str:
        return f"Stats({self.as_dict()!r})"


#: every communicator's table while it lives (the job summary of ``python -m mpicomp --stats``)
_LIVE: weakref.WeakSet[Stats] = weakref.WeakSet()


def live_tables() -> list[Stats]:
    """The tables of this process's communicators that are still alive."""
    return list(_LIVE)


class Recorder:
    """Collects what one call did; :meth:`commit` adds it to the stats and logs it.

    The paths time themselves with ``with rec.codec():`` and ``with rec.mpi():``
    and count the bytes they send with :meth:`sent`.
    """

    def __init__(self, stats: Stats, op: str, rank: int, raw_bytes: int) -> None:
        self.stats, self.op, self.rank = stats, op, rank
        self.raw_bytes = raw_bytes
        self.wire_bytes = 0
        self.codec_seconds = 0.0
        self.mpi_seconds = 0.0
        self.path = "plain"
        self.reason = ""
        self.detail = ""
        self.memory = "host"
        self.error_bound = 0.0  #: a tolerance's bound of the whole call (absolute)
        #: a variable codec's encodes: the bytes they read and the stream bytes they wrote
        self.encoded_raw = 0
        self.encoded_used = 0
        self.prediction: Any = None  #: the model's mpicomp.model.Prediction, if it was asked

    @contextlib.contextmanager
    def codec(self) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.codec_seconds += time.perf_counter() - t

    @contextlib.contextmanager
    def mpi(self) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.mpi_seconds += time.perf_counter() - t

    def sent(self, nbytes: int) -> None:
        self.wire_bytes += int(nbytes)

    def encoded(self, raw: int, used: int) -> None:
        """A variable codec's encode read ``raw`` bytes and wrote ``used``."""
        self.encoded_raw += int(raw)
        self.encoded_used += int(used)

    def plain(self, reason: str) -> None:
        self.path, self.reason = "plain", reason

    def predicted(self, prediction: Any) -> None:
        """Keep the model's prediction for this call (shown in the debug line)."""
        self.prediction = prediction

    def where(self, memory: str) -> None:
        """Where the call's data was (see the module docs)."""
        self.memory = memory

    def compressed(self, algorithm: str, detail: str = "") -> None:
        self.path, self.reason, self.detail = "compressed", algorithm, detail

    def commit(self) -> None:
        s = self.stats.op(self.op)
        with self.stats._lock:
            s.calls += 1
            s.raw_bytes += self.raw_bytes
            s.wire_bytes += self.wire_bytes
            s.codec_seconds += self.codec_seconds
            s.mpi_seconds += self.mpi_seconds
            if self.path == "compressed":
                s.compressed += 1
                s.algorithms[self.reason] += 1
                s.error_bound = max(s.error_bound, self.error_bound)
            else:
                s.fallbacks[self.reason] += 1
            s.memory[self.memory] += 1
        if debug_enabled():
            what = (
                f"compressed ({self.reason}{', ' + self.detail if self.detail else ''})"
                if self.path == "compressed"
                else f"plain MPI ({self.reason})"
            )
            print(
                f"[mpicomp rank {self.rank}] {self.op}: {what}; {self.memory}; "
                f"raw {self.raw_bytes} B, "
                f"sent {self.wire_bytes} B, codec {self.codec_seconds * 1e3:.3f} ms, "
                f"MPI {self.mpi_seconds * 1e3:.3f} ms"
                + (f"; {self.prediction.describe()}" if self.prediction is not None else ""),
                file=sys.stderr,
                flush=True,
            )
