"""The numbers a calibration measured (:mod:`mpicomp.calibration`), and their JSON form.

:class:`Fit`: seconds as a function of bytes, linear or through measured
knots; :class:`Calibration`: one job layout's fits, costs and codec
speeds, what the performance model (:mod:`mpicomp.model`) predicts from.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .topology import Layout

__all__ = ["FORMAT_VERSION", "Calibration", "Fit"]

#: the version of the calibration file (MPICOMP_CALIBRATION) that Calibration.as_dict writes
FORMAT_VERSION = 5


@dataclasses.dataclass(frozen=True)
class Fit:
    """Seconds as a function of bytes: through measured ``knots`` where there are some.

    With ``knots`` ((bytes, seconds) pairs, increasing bytes) the time is
    interpolated linearly between them (caches and protocol switches make
    the cost per byte differ from size to size), and beyond them it follows
    ``alpha + beta * nbytes``, the line through the two largest knots (above)
    or the two smallest (below). Without knots it is that line everywhere.
    """

    alpha: float
    beta: float
    knots: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "knots", tuple((float(n), float(t)) for n, t in self.knots))

    def time(self, nbytes: float) -> float:
        k = self.knots
        if len(k) >= 2 and nbytes < k[-1][0]:
            if nbytes <= k[0][0]:
                low = Fit.through(k[0][0], k[0][1], k[1][0], k[1][1])
                return low.alpha + low.beta * nbytes
            for (n0, t0), (n1, t1) in zip(k, k[1:]):
                if nbytes <= n1:
                    return t0 + (t1 - t0) * (nbytes - n0) / (n1 - n0)
        return self.alpha + self.beta * nbytes

    @classmethod
    def through(cls, n0: float, t0: float, n1: float, t1: float) -> Fit:
        """The line through two measurements; when noise makes it fall or start below
        zero, the line through the origin and the larger measurement instead."""
        beta = (t1 - t0) / (n1 - n0)
        alpha = t0 - beta * n0
        if beta <= 0 or alpha < 0:
            return cls(0.0, t1 / n1)
        return cls(alpha, beta)

    @classmethod
    def through_all(cls, points: list[tuple[int, float]]) -> Fit:
        """Knots at ``points`` (sorted by size; a time below the one before it, noise,
        is raised to it), the line of :meth:`through` the two largest beyond them."""
        points = sorted(points)
        knots = [points[0]]
        for n, t in points[1:]:
            knots.append((n, max(t, knots[-1][1])))
        (n0, t0), (n1, t1) = knots[-2], knots[-1]
        line = cls.through(n0, t0, n1, t1)
        return cls(line.alpha, line.beta, tuple(knots))


@dataclasses.dataclass
class Calibration:
    """Measured speeds of one communicator layout (see the module docs)."""

    layout: Layout
    threads: int
    agree_s: float
    exchange: Fit
    plain: dict[str, Fit]
    add_s_per_byte: float
    probe_seconds: float
    overlap: float = 1.0
    #: seconds per byte of the scan for the largest magnitude (NaN/Inf) that every
    #: compressed call runs on its input before the agreement
    scan_s_per_byte: float = 0.0
    #: seconds of one codec or add kernel call on a tiny input (dispatch, thread launch):
    #: the ring in pieces pays it for every piece it codes
    call_s: float = 0.0
    #: seconds of a compressed call's own work beyond its kernels and messages (Python:
    #: the pieces' layout, the recorder, the requests), measured on the ring allreduce
    #: of one codec block per rank
    fixed_s: float = 0.0
    #: "Reduce", "Bcast" (inside a node), "leader_exchange", and on uniform nodes
    #: "Reduce_scatter", "Allgather" (inside a node), "rail_exchange": None on one node or
    #: one rank a node
    node: dict[str, Fit] | None = None
    source: str = "measured"
    #: "codec-config-json|dtype|memory" -> (encode, decode) seconds per raw byte
    codecs: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    #: the same keys, device memory only -> (encode, decode) seconds of one call beyond its
    #: bytes (launches, staging copies, fences: what each piece of a device chunk costs)
    codec_calls: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        link = self.exchange
        lines = [
            f"calibration ({self.source}, probe {self.probe_seconds * 1e3:.0f} ms): "
            f"{self.layout.describe()}, {self.threads} codec thread(s)",
            f"  ring exchange: {link.alpha * 1e6:.1f} us + {_gbs(link.beta)} GB/s; "
            f"agreement {self.agree_s * 1e6:.1f} us; scan {_gbs(self.scan_s_per_byte)} GB/s; "
            f"add {_gbs(self.add_s_per_byte)} GB/s; kernel call {self.call_s * 1e6:.1f} us; "
            f"fixed {self.fixed_s * 1e6:.0f} us; "
            f"overlap {self.overlap:.2f}",
        ]
        lines += [f"  plain {m}: {f.alpha * 1e6:.1f} us + {_gbs(f.beta)} GB/s"
                  for m, f in self.plain.items()]
        lines += [f"  node-aware {m}: {f.alpha * 1e6:.1f} us + {_gbs(f.beta)} GB/s"
                  for m, f in (self.node or {}).items()]
        lines += [f"  codec {k}: encode {_gbs(e)} GB/s, decode {_gbs(d)} GB/s"
                  + (f" + {self.codec_calls[k][0] * 1e6:.1f} / {self.codec_calls[k][1] * 1e6:.1f}"
                     " us a call" if k in self.codec_calls else "")
                  for k, (e, d) in self.codecs.items()]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "layout": list(self.layout.node_of),
            "threads": self.threads,
            "agree_s": self.agree_s,
            "exchange": dataclasses.asdict(self.exchange),
            "plain": {m: dataclasses.asdict(f) for m, f in self.plain.items()},
            "add_s_per_byte": self.add_s_per_byte,
            "probe_seconds": self.probe_seconds,
            "overlap": self.overlap,
            "scan_s_per_byte": self.scan_s_per_byte,
            "call_s": self.call_s,
            "fixed_s": self.fixed_s,
            "node": None if self.node is None else {
                m: dataclasses.asdict(f) for m, f in self.node.items()},
            "codecs": {k: list(v) for k, v in self.codecs.items()},
            "codec_calls": {k: list(v) for k, v in self.codec_calls.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str) -> Calibration:
        return cls(
            layout=Layout(tuple(int(i) for i in d["layout"])),
            threads=int(d["threads"]),
            agree_s=float(d["agree_s"]),
            exchange=Fit(**d["exchange"]),
            plain={m: Fit(**f) for m, f in d["plain"].items()},
            add_s_per_byte=float(d["add_s_per_byte"]),
            probe_seconds=float(d["probe_seconds"]),
            overlap=float(d["overlap"]),
            scan_s_per_byte=float(d["scan_s_per_byte"]),
            call_s=float(d["call_s"]),
            fixed_s=float(d["fixed_s"]),
            node=None if d["node"] is None else {m: Fit(**f) for m, f in d["node"].items()},
            source=source,
            codecs={k: (float(v[0]), float(v[1])) for k, v in d.get("codecs", {}).items()},
            codec_calls={k: (float(v[0]), float(v[1]))
                         for k, v in d.get("codec_calls", {}).items()},
        )


def _gbs(seconds_per_byte: float) -> str:
    return f"{1e-9 / seconds_per_byte:.3g}" if seconds_per_byte > 0 else "inf"
