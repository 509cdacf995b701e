"""What each ``osu_*`` benchmark sends, how it times it, and how it checks the result.

Sizes are OSU's: the buffer of Allreduce and Bcast, one rank's contribution
to Allgather, one pair's block of Alltoall, the whole send buffer of
Reduce_scatter (split evenly, ``Reduce_scatter_block``), the message of the
point-to-point tests. Rank ``r``'s data is
``mpicomp.bench.data.generate(kind, n, dtype, seed=r)`` (the Bcast root is
rank 0).

Timing (OMB v7.4's loops):

* collectives: every call timed alone, an untimed ``Barrier`` after it; a
  rank's figure is its mean over the timed calls; the table's average is
  the mean over ranks, min and max are over ranks;
* ``osu_latency``: ping-pong between ranks 0 and 1 (other ranks idle),
  latency = half the round trip, averaged over the timed iterations on
  rank 0; min and max are over the iterations' half round trips;
* ``osu_bw``: rank 0 posts a window of 64 ``Isend`` to rank 1, waits for
  them and for a 4-byte acknowledgement (plain MPI, uncounted); bandwidth =
  bytes sent / time, in MB/s (1e6 bytes). The time per message is kept too
  (min and max: the fastest and slowest window).

Checks (one extra untimed call after the timing, on fresh buffers): sums
against the exact sum (float64) within the error bound of
``mpicomp.algorithms.bounds`` for the algorithm that ran (zfp, which has no
pointwise bound: the bound with ``c`` = twice the codec's worst relative
error seen on the inputs, as the library's tests do); moved data bit for bit
against ``codec.decode(codec.encode(x))`` of each block the collective
encodes, or against ``x`` itself when the call went to plain MPI.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from mpi4py import MPI

from mpicomp import Request, topology
from mpicomp.algorithms import bounds

from . import data as bench_data
from .metrics import error_stats
from .osu_buffers import Buffers

__all__ = ["BENCHMARKS", "Benchmark", "Check", "Env", "Timing"]

#: messages up to this size (bytes) get the "small" iteration counts (OSU's LARGE_MESSAGE_SIZE)
LARGE_MESSAGE = 8192
#: osu_bw's window of back-to-back Isends
WINDOW = 64

_TAG, _ACK_TAG, _CHECK_TAG = 11, 12, 13


@dataclasses.dataclass
class Env:
    """What every benchmark runs with."""

    world: MPI.Intracomm  #: MPI.COMM_WORLD: exact results, reductions of the figures
    comm: Any  #: the mpicomp.Comm measured
    plain: MPI.Intracomm  #: the baseline (plain MPI, or mpicomp with codec none for device buffers)
    buffers: Buffers
    dtype: np.dtype
    data: str

    @property
    def rank(self) -> int:
        return self.world.Get_rank()

    @property
    def size(self) -> int:
        return self.world.Get_size()

    def values(self, n: int, seed: int) -> np.ndarray:
        return bench_data.generate(self.data, n, self.dtype, seed=seed)

    def round_trip(self, x: np.ndarray, block: int) -> np.ndarray:
        """``decode(encode(.))`` with the communicator's codec, each ``block`` values apart."""
        codec = self.comm.resolved_policy().codec
        out = np.empty_like(x)
        for i in range(0, x.size, block):
            codec.decode(codec.encode(x[i:i + block]), out=out[i:i + block])
        return out


@dataclasses.dataclass(frozen=True)
class Timing:
    """One loop's figures, the same on every rank (seconds)."""

    avg_s: float
    min_s: float
    max_s: float
    iterations: int


@dataclasses.dataclass(frozen=True)
class Check:
    """The checked call, the same on every rank."""

    ok: bool
    rel_l2: float  #: worst rank's relative L2 error against the exact result
    max_abs_err: float  #: worst rank's largest absolute error
    detail: str  #: what was compared (a failing rank's, when one failed)
    path: str  #: how the call ran: "compressed (ALGORITHM)" or "plain (REASON)"


def _path(stats: dict[str, Any], method: str) -> tuple[bool, str]:
    """(compressed?, "compressed (alg)" / "plain (reason)") of the one call in ``stats``."""
    st = stats.get(method)
    if not st or not st["calls"]:
        return False, "plain (no call)"
    if st["compressed"]:
        return True, "compressed (" + ", ".join(st["algorithms"]) + ")"
    return False, "plain (" + ", ".join(st["fallbacks"]) + ")"


def _gather_check(env: Env, ok: bool, rel_l2: float, max_abs: float, detail: str,
                  path: str) -> Check:
    """Combine the ranks' checks: all must pass; errors are the worst rank's."""
    rows = env.world.allgather((ok, detail, path))
    failing = [d for good, d, _ in rows if not good]
    return Check(
        ok=not failing,
        rel_l2=env.world.allreduce(rel_l2, op=MPI.MAX),
        max_abs_err=env.world.allreduce(max_abs, op=MPI.MAX),
        detail=failing[0] if failing else rows[0][1],
        path=rows[0][2],
    )


def _equal_check(env: Env, method: str, got: np.ndarray, exact: np.ndarray,
                 block: int, exact_blocks: frozenset[int] = frozenset()) -> Check:
    """Moved data: bit for bit ``decode(encode(block))`` (compressed) or ``exact`` (plain);
    the blocks numbered in ``exact_blocks`` exact in either case (moved plain)."""
    compressed, path = _path(env.comm.stats(), method)
    codec = env.comm.resolved_policy().codec
    if compressed and getattr(codec, "shape", None) is not None:
        # a field's slabs are predicted piece by piece: its values depend on the cut, so
        # the check is the bound (and the moved-plain blocks exact)
        bound = codec.bound(exact)
        limit = np.full(got.size, bound)
        for i in exact_blocks:
            limit[i * block:(i + 1) * block] = 0.0
        err = np.abs(got.astype(np.float64) - exact.astype(np.float64))
        ok = bool(np.all(err <= limit))
        detail = (f"every value within the bound {bound:.3g} (a shaped codec's values depend "
                  f"on the pieces)" if ok else f"{int(np.count_nonzero(err > limit))} of "
                  f"{got.size} values past the bound {bound:.3g} on rank {env.rank}")
    else:
        expected = env.round_trip(exact, block) if compressed else exact
        for i in exact_blocks:
            expected[i * block:(i + 1) * block] = exact[i * block:(i + 1) * block]
        ok = bool(np.array_equal(got, expected))
        what = "decode(encode(x))" if compressed else "x (plain MPI)"
        if exact_blocks and compressed:
            what += f" (blocks of ranks {sorted(exact_blocks)}: x)"
        if ok:
            detail = f"bit for bit equal to {what}"
        else:
            bad = int(np.count_nonzero(got != expected))
            detail = f"{bad} of {got.size} values differ from {what} on rank {env.rank}"
    s = error_stats(exact, got) if exact.size else {"rel_l2": 0.0, "max_abs_err": 0.0}
    return _gather_check(env, ok, s["rel_l2"], s["max_abs_err"], detail, path)


def _sum_check(env: Env, method: str, x: np.ndarray, got: np.ndarray,
               exact: np.ndarray) -> Check:
    """A sum: ``got`` (this rank's part of the result) within the bound of what ran.

    Collective: every rank took the same path (the agreement step sees to it).
    """
    p, dt = env.size, env.dtype
    g = env.world.allreduce(float(np.max(np.abs(x))) if x.size else 0.0)
    compressed, path = _path(env.comm.stats(), method)
    pol = env.comm.resolved_policy()
    err = np.abs(got.astype(np.float64) - exact)
    max_err = float(err.max()) if err.size else 0.0
    if not compressed:
        # plain MPI: float rounding of the p - 1 additions only
        bound = bounds.allreduce_bound("allgather", p, 0.0, 0.0, g, dt)
        how = "plain MPI, float rounding"
    else:
        (alg,) = env.comm.stats()[method]["algorithms"]
        if alg == "homomorphic":
            bound = _homomorphic_bound(env, x, got, pol.rate)
            how = "homomorphic bound"
        else:
            consts = bounds.codec_constants(pol.codec, dt)
            how = f"{pol.codec.codec_id} {alg} bound"
            if consts is None:
                consts = (_observed_c(env, x), 0.0)
                how += f" with c = {consts[0]:.2e} (twice the codec's worst relative error seen)"
            nodes = topology.layout(env.world).nodes if alg == "hierarchical" else None
            bound = bounds.allreduce_bound(alg, p, consts[0], consts[1], g, dt, nodes)
    if np.ndim(bound):
        ok = bool(np.all(err <= bound))
        worst = int(np.argmax(err - bound)) if err.size else 0
        detail = (f"max abs err {max_err:.3e}; worst value {err[worst]:.3e} vs its bound "
                  f"{bound[worst]:.3e} ({how})") if err.size else f"empty ({how})"
    else:
        ok = max_err <= bound
        detail = f"max abs err {max_err:.3e} {'<=' if ok else '>'} bound {bound:.3e} ({how})"
    if not ok:
        detail += f" on rank {env.rank}"
    s = error_stats(exact, got) if exact.size else {"rel_l2": 0.0, "max_abs_err": 0.0}
    return _gather_check(env, ok, s["rel_l2"], s["max_abs_err"], detail, path)


def _observed_c(env: Env, x: np.ndarray) -> float:
    """Twice the codec's worst relative round-trip error on any rank's input (zfp)."""
    m = float(np.max(np.abs(x))) if x.size else 0.0
    rel = float(np.max(np.abs(env.round_trip(x, x.size) - x))) / m if m > 0 else 0.0
    return 2.0 * env.world.allreduce(rel, op=MPI.MAX)


def _homomorphic_bound(env: Env, x: np.ndarray, got: np.ndarray, rate: float) -> np.ndarray:
    """The homomorphic allreduce's per-value bound (``bounds.homomorphic_bound``).

    Its block exponent is the smallest power of two above the block's largest
    magnitude over all ranks; ``frexp`` gives one that is never smaller, so
    the bound is never tighter than the algorithm's.
    """
    from mpicomp.algorithms.homomorphic import BLOCK, choose_format

    blocks = -(-x.size // BLOCK)
    padded = np.zeros(blocks * BLOCK, np.float64)
    padded[: x.size] = np.abs(x)
    m = padded.reshape(blocks, BLOCK).max(axis=1)
    env.world.Allreduce(MPI.IN_PLACE, m, op=MPI.MAX)
    exponents = np.frexp(m)[1]
    return bounds.homomorphic_bound(env.size, choose_format(rate, env.size).q_max, exponents,
                                    got)


def _over_ranks(world: MPI.Intracomm, mean: float, iterations: int) -> Timing:
    p = world.Get_size()
    return Timing(world.allreduce(mean) / p, world.allreduce(mean, op=MPI.MIN),
                  world.allreduce(mean, op=MPI.MAX), iterations)


class Benchmark:
    """One OSU-style benchmark (subclasses say what is sent, timed and checked)."""

    name: ClassVar[str]
    #: OSU's title, after "MPI "
    title: ClassVar[str]
    #: the method's name in comm.stats()
    method: ClassVar[str]
    #: ... and in comm.predict() (the model knows Send, not Isend)
    predict_method: ClassVar[str] = ""
    min_ranks: ClassVar[int] = 1
    #: (iterations, warm-up) up to LARGE_MESSAGE bytes, then above it (OSU's defaults)
    small: ClassVar[tuple[int, int]] = (1000, 100)
    large: ClassVar[tuple[int, int]] = (100, 10)
    #: result columns: "latency" (us) or "bandwidth" (MB/s)
    measures: ClassVar[str] = "latency"

    def __init__(self) -> None:
        self.predict_method = self.predict_method or self.method

    def iterations(self, size: int) -> tuple[int, int]:
        return self.small if size <= LARGE_MESSAGE else self.large

    def skip(self, size: int, env: Env) -> str | None:
        """Why ``size`` cannot be run (None: it can)."""
        return None

    def raw_bytes(self, size: int, p: int) -> int:
        """The call's raw bytes as ``comm.stats()`` counts them (what ``comm.predict`` takes)."""
        return size

    def prepare(self, env: Env, size: int) -> Any:
        """Buffers for one size (also used by :meth:`check`)."""
        raise NotImplementedError

    def time(self, env: Env, comm: Any, state: Any, iterations: int, warmup: int) -> Timing:
        raise NotImplementedError

    def check(self, env: Env, state: Any) -> Check:
        raise NotImplementedError


class Collective(Benchmark):
    """A collective timed in OSU's loop; subclasses give the call."""

    def call(self, comm: Any, state: Any) -> None:
        raise NotImplementedError

    def time(self, env: Env, comm: Any, state: Any, iterations: int, warmup: int) -> Timing:
        sync = env.buffers.synchronize
        total = 0.0
        comm.Barrier()
        for i in range(warmup + iterations):
            t0 = time.perf_counter()
            self.call(comm, state)
            sync()
            elapsed = time.perf_counter() - t0
            if i >= warmup:
                total += elapsed
            comm.Barrier()
        return _over_ranks(env.world, total / iterations, iterations)


@dataclasses.dataclass
class _Bufs:
    x: np.ndarray  #: this rank's input, on the host
    send: Any
    recv: Any


class Allreduce(Collective):
    name, title, method = "osu_allreduce", "Allreduce Latency Test", "Allreduce"

    def prepare(self, env: Env, size: int) -> _Bufs:
        n = size // env.dtype.itemsize
        x = env.values(n, env.rank)
        return _Bufs(x, env.buffers.put(x), env.buffers.zeros(n, env.dtype))

    def call(self, comm: Any, state: _Bufs) -> None:
        comm.Allreduce(state.send, state.recv)

    def check(self, env: Env, state: _Bufs) -> Check:
        recv = env.buffers.zeros(state.x.size, env.dtype)
        env.comm.reset_stats()
        env.comm.Allreduce(state.send, recv)
        env.buffers.synchronize()
        exact = np.empty(state.x.size, np.float64)
        env.world.Allreduce(state.x.astype(np.float64), exact)
        return _sum_check(env, self.method, state.x, env.buffers.get(recv), exact)


class ReduceScatter(Collective):
    name, title, method = "osu_reduce_scatter", "Reduce_scatter Latency Test", \
        "Reduce_scatter_block"

    def skip(self, size: int, env: Env) -> str | None:
        unit = env.size * env.dtype.itemsize
        return None if size % unit == 0 else f"not a multiple of P x {env.dtype.itemsize} B"

    def prepare(self, env: Env, size: int) -> _Bufs:
        n = size // env.dtype.itemsize
        x = env.values(n, env.rank)
        return _Bufs(x, env.buffers.put(x), env.buffers.zeros(n // env.size, env.dtype))

    def call(self, comm: Any, state: _Bufs) -> None:
        comm.Reduce_scatter_block(state.send, state.recv)

    def check(self, env: Env, state: _Bufs) -> Check:
        m = state.x.size // env.size
        recv = env.buffers.zeros(m, env.dtype)
        env.comm.reset_stats()
        env.comm.Reduce_scatter_block(state.send, recv)
        env.buffers.synchronize()
        exact = np.empty(m, np.float64)
        env.world.Reduce_scatter_block(state.x.astype(np.float64), exact)
        return _sum_check(env, self.method, state.x, env.buffers.get(recv), exact)


class Allgather(Collective):
    name, title, method = "osu_allgather", "Allgather Latency Test", "Allgather"

    def prepare(self, env: Env, size: int) -> _Bufs:
        n = size // env.dtype.itemsize
        x = env.values(n, env.rank)
        return _Bufs(x, env.buffers.put(x), env.buffers.zeros(n * env.size, env.dtype))

    def call(self, comm: Any, state: _Bufs) -> None:
        comm.Allgather(state.send, state.recv)

    def check(self, env: Env, state: _Bufs) -> Check:
        n = state.x.size
        recv = env.buffers.zeros(n * env.size, env.dtype)
        env.comm.reset_stats()
        env.comm.Allgather(state.send, recv)
        env.buffers.synchronize()
        exact = np.empty(n * env.size, env.dtype)
        env.world.Allgather(state.x, exact)
        return _equal_check(env, self.method, env.buffers.get(recv), exact, n)


class Alltoall(Collective):
    name, title, method = "osu_alltoall", "All-to-All Personalized Exchange Latency Test", \
        "Alltoall"

    def raw_bytes(self, size: int, p: int) -> int:
        return size * p

    def prepare(self, env: Env, size: int) -> _Bufs:
        n = size // env.dtype.itemsize * env.size
        x = env.values(n, env.rank)
        return _Bufs(x, env.buffers.put(x), env.buffers.zeros(n, env.dtype))

    def call(self, comm: Any, state: _Bufs) -> None:
        comm.Alltoall(state.send, state.recv)

    def check(self, env: Env, state: _Bufs) -> Check:
        recv = env.buffers.zeros(state.x.size, env.dtype)
        env.comm.reset_stats()
        env.comm.Alltoall(state.send, recv)
        env.buffers.synchronize()
        exact = np.empty_like(state.x)
        env.world.Alltoall(state.x, exact)
        local = frozenset({env.rank})  # the own block is copied, exact
        if "alltoall-hierarchical" in env.comm.stats()[self.method]["algorithms"]:
            # node-aware: blocks from ranks of this node moved plain (docs/algorithms.md)
            from mpicomp import topology

            lay = topology.layout(env.world)
            local = frozenset(i for i, nd in enumerate(lay.node_of)
                              if nd == lay.node_of[env.rank])
        return _equal_check(env, self.method, env.buffers.get(recv), exact,
                            state.x.size // env.size, local)


class Bcast(Collective):
    """Root 0. A compressed Bcast leaves the decoded values in the root's buffer too, so
    later timed calls send already-decoded data; the check starts from fresh buffers."""

    name, title, method = "osu_bcast", "Broadcast Latency Test", "Bcast"

    def prepare(self, env: Env, size: int) -> _Bufs:
        n = size // env.dtype.itemsize
        x = env.values(n, 0)
        buf = env.buffers.put(x) if env.rank == 0 else env.buffers.zeros(n, env.dtype)
        return _Bufs(x, buf, None)

    def call(self, comm: Any, state: _Bufs) -> None:
        comm.Bcast(state.send, root=0)

    def check(self, env: Env, state: _Bufs) -> Check:
        n = state.x.size
        buf = env.buffers.put(state.x) if env.rank == 0 else env.buffers.zeros(n, env.dtype)
        env.comm.reset_stats()
        env.comm.Bcast(buf, root=0)
        env.buffers.synchronize()
        exact = state.x.copy() if env.rank == 0 else np.zeros(n, env.dtype)
        env.world.Bcast(exact, root=0)
        return _equal_check(env, self.method, env.buffers.get(buf), exact, n)


class PointToPoint(Benchmark):
    """Ranks 0 and 1 exchange messages; other ranks wait at the reductions."""

    min_ranks = 2

    def prepare(self, env: Env, size: int) -> _Bufs:
        n = size // env.dtype.itemsize
        x = env.values(n, env.rank)
        return _Bufs(x, env.buffers.put(x), env.buffers.zeros(n, env.dtype))

    def check(self, env: Env, state: _Bufs) -> Check:
        """One message from rank 0 to rank 1, as the timed loop sends it."""
        n = state.x.size
        recv_method = "Irecv" if self.method == "Isend" else "Recv"
        env.comm.reset_stats()
        ok, rel_l2, max_abs, detail, path = True, 0.0, 0.0, "", "-"
        if env.rank == 0:
            if self.method == "Isend":
                Request.Waitall([env.comm.Isend(state.send, 1, _CHECK_TAG)])
            else:
                env.comm.Send(state.send, 1, _CHECK_TAG)
            env.world.Send(state.x, 1, _CHECK_TAG)
        elif env.rank == 1:
            recv = env.buffers.zeros(n, env.dtype)
            if self.method == "Isend":
                Request.Waitall([env.comm.Irecv(recv, 0, _CHECK_TAG)])
            else:
                env.comm.Recv(recv, 0, _CHECK_TAG)
            env.buffers.synchronize()
            exact = np.empty(n, env.dtype)
            env.world.Recv(exact, 0, _CHECK_TAG)
            got = env.buffers.get(recv)
            compressed, path = _path(env.comm.stats(), recv_method)
            expected = env.round_trip(exact, n) if compressed else exact
            ok = bool(np.array_equal(got, expected))
            what = "decode(encode(x))" if compressed else "x (plain MPI)"
            detail = (f"bit for bit equal to {what}" if ok else
                      f"{int(np.count_nonzero(got != expected))} of {n} values differ from "
                      f"{what} on rank 1")
            s = error_stats(exact, got) if n else {"rel_l2": 0.0, "max_abs_err": 0.0}
            rel_l2, max_abs = s["rel_l2"], s["max_abs_err"]
        _, detail, path = env.world.bcast((ok, detail, path), root=1)
        return Check(ok=env.world.allreduce(ok, op=MPI.LAND),
                     rel_l2=env.world.allreduce(rel_l2, op=MPI.MAX),
                     max_abs_err=env.world.allreduce(max_abs, op=MPI.MAX),
                     detail=detail, path=path)


class Latency(PointToPoint):
    name, title, method = "osu_latency", "Latency Test", "Send"
    small, large = (10000, 100), (1000, 10)

    def time(self, env: Env, comm: Any, state: _Bufs, iterations: int, warmup: int) -> Timing:
        sync = env.buffers.synchronize
        stamps = np.zeros(iterations + 1)
        comm.Barrier()
        if env.rank == 0:
            for i in range(warmup + iterations):
                if i >= warmup:
                    stamps[i - warmup] = time.perf_counter()
                comm.Send(state.send, 1, _TAG)
                comm.Recv(state.recv, 1, _TAG)
                sync()
            stamps[iterations] = time.perf_counter()
        elif env.rank == 1:
            for _ in range(warmup + iterations):
                comm.Recv(state.recv, 0, _TAG)
                sync()
                comm.Send(state.send, 0, _TAG)
        half = np.diff(stamps) / 2
        figures = (float(stamps[-1] - stamps[0]) / (2 * iterations), float(half.min()),
                   float(half.max()))
        avg, lo, hi = env.world.bcast(figures, root=0)
        return Timing(avg, lo, hi, iterations)


class Bandwidth(PointToPoint):
    """Times are per message; the bandwidth is ``size / time``."""

    name, title, method, predict_method = "osu_bw", "Bandwidth Test", "Isend", "Send"
    small, large = (100, 10), (20, 2)
    measures = "bandwidth"

    def time(self, env: Env, comm: Any, state: _Bufs, iterations: int, warmup: int) -> Timing:
        sync = env.buffers.synchronize
        ack = np.zeros(4, np.uint8)
        windows = np.zeros(iterations)
        t_start = 0.0
        waitall: Callable[[list[Any]], Any] = Request.Waitall
        comm.Barrier()
        if env.rank == 0:
            for i in range(warmup + iterations):
                t0 = time.perf_counter()
                if i == warmup:
                    t_start = t0
                waitall([comm.Isend(state.send, 1, _TAG) for _ in range(WINDOW)])
                MPI.Intracomm.Recv(comm, [ack, MPI.BYTE], 1, _ACK_TAG)
                if i >= warmup:
                    windows[i - warmup] = time.perf_counter() - t0
            t_end = time.perf_counter()
        elif env.rank == 1:
            for _ in range(warmup + iterations):
                waitall([comm.Irecv(state.recv, 0, _TAG) for _ in range(WINDOW)])
                sync()
                MPI.Intracomm.Send(comm, [ack, MPI.BYTE], 0, _ACK_TAG)
        figures = None
        if env.rank == 0:
            figures = ((t_end - t_start) / (iterations * WINDOW), float(windows.min()) / WINDOW,
                       float(windows.max()) / WINDOW)
        avg, lo, hi = env.world.bcast(figures, root=0)
        return Timing(avg, lo, hi, iterations)


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Allreduce(), Allgather(), Alltoall(), ReduceScatter(), Bcast(), Latency(), Bandwidth())}
