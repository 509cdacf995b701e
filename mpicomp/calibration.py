"""The calibration probe: how fast this job's MPI and codecs really are.

:mod:`mpicomp.model` predicts call times from a handful of measured
numbers. :func:`measure` measures them, collectively, on a private
communicator (once per communicator layout, :mod:`mpicomp.topology`, and
process: :func:`mpicomp.calibration_file.obtain`, which keeps them in a file):

* ``agree_s``: one 96-byte MAX allreduce (the agreement step's twelve float64);
* ``exchange``: every rank ``Sendrecv``-ing to its right neighbour while
  receiving from its left one (the step of the ring algorithms), measured at and
  interpolated between five sizes (64 KiB to 4 MiB, and on to 16 MiB while
  a measurement takes under 4 ms; :class:`mpicomp.model.Fit`), each the mean of as many
  runs as fill about 20 ms (3 to 20), measured twice where its cost per byte
  jumps (:data:`JUMP`: a stalled run, or a real step);
* ``plain[method]``: MPI's own ``Allreduce``, ``Allgather``, ``Alltoall``,
  ``Bcast`` and ``Reduce_scatter_block`` at the same sizes, fitted the
  same way: plain MPI is the baseline every decision compares against, and
  the compressed collectives call these same functions on their streams;
* ``add_s_per_byte``: ``acc += x`` on this rank's thread budget, and
  ``scan_s_per_byte``: the scan for the largest magnitude (and NaN/Inf)
  that every compressed call runs on its input, both on 16 MiB (streamed
  from memory, as in large calls); ``call_s``: the fixed cost of one such
  kernel call (dispatch and thread launch), paid per piece of the ring;
  ``fixed_s``: the rest of a tiny compressed ring allreduce (its Python work, and
  where ranks share cores the waits of its steps), never below its Python work;
* ``node``: where nodes hold several ranks and the communicator spans
  nodes: plain ``Reduce`` and ``Bcast`` inside each node, and the ring
  exchange between the node leaders (one rank per node), each fitted as
  above: the costs of the node-aware (hierarchical) allreduce by leaders;
  where every node holds the same number of ranks also plain
  ``Reduce_scatter`` (``Reduce_scatter_block``) and ``Allgather`` inside
  each node (of a whole buffer's bytes) and ``rail_exchange``, a ring step
  of every rail at once (each rank with its peers of the same place on the
  other nodes): the costs of the allreduce by rails;
* ``overlap``: how much codec work this machine hides behind a transfer
  (:func:`_overlap`): 1 where every rank has a core to itself, less where
  ranks (or simulated hosts) share cores and the codec, the waits and the
  network stack compete for them;
* per codec config, dtype and memory kind (:func:`codec_speed`, measured the
  first time a call needs it): encode and decode seconds per raw byte.

Each other figure is the slowest rank's median of a few repetitions (a MAX
allreduce), so every rank holds the same numbers and takes the same
decisions.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from . import threads
from .calibration_data import Calibration, Fit
from .topology import Layout

__all__ = ["PLAIN_METHODS", "codec_speed", "measure", "speed_key"]

#: MPI collectives whose plain times are measured
PLAIN_METHODS = ("Allreduce", "Allgather", "Alltoall", "Bcast", "Reduce_scatter_block")

#: the probe sizes (bytes per rank; Allgather: each rank's part, at most
#: ALLGATHER_PROBE_TOTAL / p): large messages are where compression can pay,
#: and caches make what 1 MiB costs a poor guide to what 16 MiB costs
PROBE_SIZES = (64 * 1024, 256 * 1024, 1 << 20, 2 << 20, 4 << 20)
ALLGATHER_PROBE_TOTAL = 32 << 20
#: repetitions per measurement (the median counts)
REPEAT = 3
#: repetitions of the probes of tiny calls (a kernel call, a ring allreduce of one block
#: per rank, its chain of exchanges): their difference is the fixed cost of every
#: compressed call, and a few runs stalled by a rank that lost its core (more ranks than
#: cores) must not decide it; each run takes a few milliseconds at most
TINY_REPEAT = 9
#: the MPI fits' figures: runs filling about FIT_BUDGET_S, at most FIT_REPEAT_MAX
FIT_BUDGET_S = 0.02
FIT_REPEAT_MAX = 20
#: the MPI fits go on doubling their largest size up to EXTEND_TO bytes while a
#: measurement takes under EXTEND_BELOW_S seconds (the same decision on every rank: the
#: times are the slowest rank's)
EXTEND_TO = 16 << 20
EXTEND_BELOW_S = 4e-3
#: a size whose time per byte exceeds JUMP times the smaller size's is measured twice, and
#: the lower mean counts (the same decision on every rank: the times are the slowest rank's)
JUMP = 1.5
#: values of the codec probe
#: bytes of the add and scan probes: more than the caches of a core hold
STREAM_PROBE_BYTES = 16 << 20
CODEC_PROBE_VALUES = 1 << 18
#: values of the codec probe on device buffers under Numba's CUDA simulator (slow)
CODEC_PROBE_VALUES_SIMULATOR = 1 << 11

def _slowest_mean(comm: MPI.Intracomm, fn: Callable[[], None]) -> float:
    """The mean over several runs of the slowest rank's time of ``fn`` (after one warm-up):
    as many runs as fill about :data:`FIT_BUDGET_S`, from :data:`REPEAT` to
    :data:`FIT_REPEAT_MAX` (the count from the slowest warm-up, so the same on every
    rank). A call's mean time over many calls is what a job pays, and what OSU's loops
    report; a median of 3 missed the slow calls of busy links and cores."""
    t = time.perf_counter()
    fn()
    warm = comm.allreduce(time.perf_counter() - t, op=MPI.MAX)
    repeat = int(min(max(round(FIT_BUDGET_S / max(warm, 1e-9)), REPEAT), FIT_REPEAT_MAX))
    return float(_slowest_runs(comm, fn, repeat).mean())


def _slowest_runs(comm: MPI.Intracomm, fn: Callable[[], None], repeat: int) -> np.ndarray:
    """The slowest rank's time of each of ``repeat`` runs of ``fn``, a Barrier before each."""
    times = np.empty(repeat)
    for i in range(repeat):
        comm.Barrier()
        t = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return slowest


def _slowest_median(comm: MPI.Intracomm, fn: Callable[[], None], repeat: int = REPEAT) -> float:
    """The median over ``repeat`` runs of the slowest rank's time of ``fn`` (after one
    warm-up): a typical time, as a job sees over many calls (the best of a few runs made
    every prediction optimistic where the network or the cores are shared)."""
    fn()
    return float(np.median(_slowest_runs(comm, fn, repeat)))


def _plain_probe(comm: MPI.Intracomm, method: str, nbytes: int) -> Callable[[], None]:
    p = comm.Get_size()
    if method == "Allreduce":
        a = np.ones(nbytes // 4, np.float32)
        b = np.empty_like(a)
        return lambda: comm.Allreduce(a, b)
    if method == "Reduce_scatter_block":
        a = np.ones(max(nbytes // 4 // p, 1) * p, np.float32)
        b = np.empty(a.size // p, np.float32)
        return lambda: comm.Reduce_scatter_block(a, b)
    if method == "Allgather":
        a = np.ones(nbytes, np.uint8)
        b = np.empty(nbytes * p, np.uint8)
        return lambda: comm.Allgather(a, b)
    if method == "Alltoall":
        a = np.ones(max(nbytes // p, 1) * p, np.uint8)
        b = np.empty_like(a)
        return lambda: comm.Alltoall(a, b)
    if method == "Bcast":
        a = np.ones(nbytes, np.uint8)
        return lambda: comm.Bcast(a, root=0)
    raise ValueError(f"no probe for {method!r}")


def _exchange_probe(comm: MPI.Intracomm, nbytes: int) -> Callable[[], None]:
    p, r = comm.Get_size(), comm.Get_rank()
    a, b = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    right, left = (r + 1) % p, (r - 1) % p
    return lambda: comm.Sendrecv(a, right, 0, b, left, 0)


def _node_fits(comm: MPI.Intracomm, lay: Layout) -> dict[str, Fit] | None:
    """The node-aware allreduce's costs (see the module docs), or None where it has no use."""
    from .topology import node_comms, rail_comm

    if not lay.spans_nodes or lay.ppn == 1:
        return None
    node, leaders = node_comms(comm, lay)
    rail = rail_comm(comm, lay) if lay.uniform else None
    try:
        def node_reduce(n: int) -> Callable[[], None]:
            a = np.ones(n // 4, np.float32)
            b = np.empty_like(a) if node.Get_rank() == 0 else None
            return lambda: node.Reduce(a, b, op=MPI.SUM, root=0)

        def node_bcast(n: int) -> Callable[[], None]:
            a = np.ones(n, np.uint8)
            return lambda: node.Bcast(a, root=0)

        def leader_exchange(n: int) -> Callable[[], None]:
            if leaders == MPI.COMM_NULL:
                return lambda: None
            return _exchange_probe(leaders, n)

        fits = {"Reduce": _fit(comm, node_reduce), "Bcast": _fit(comm, node_bcast),
                "leader_exchange": _fit(comm, leader_exchange)}
        if rail is not None:
            size = node.Get_size()

            def node_reduce_scatter(n: int) -> Callable[[], None]:
                a = np.ones(max(n // 4 // size, 1) * size, np.float32)
                b = np.empty(a.size // size, np.float32)
                return lambda: node.Reduce_scatter_block(a, b, op=MPI.SUM)

            def node_allgather(n: int) -> Callable[[], None]:
                a = np.ones(max(n // size, 1), np.uint8)
                b = np.empty(a.size * size, np.uint8)
                return lambda: node.Allgather(a, b)

            fits.update({"Reduce_scatter": _fit(comm, node_reduce_scatter),
                         "Allgather": _fit(comm, node_allgather),
                         "rail_exchange": _fit(comm, lambda n: _exchange_probe(rail, n))})
        return fits
    finally:
        if rail is not None:
            rail.Free()
        node.Free()
        if leaders != MPI.COMM_NULL:
            leaders.Free()


def _allgather_sizes(p: int) -> tuple[int, ...]:
    """The Allgather probe's parts: PROBE_SIZES, the largest at most ALLGATHER_PROBE_TOTAL / p
    (and the others in the same proportions below it)."""
    scale = min(1.0, max(ALLGATHER_PROBE_TOTAL // p, 8192) / PROBE_SIZES[-1])
    return tuple(max(int(n * scale), 1024) for n in PROBE_SIZES)


def _fit(comm: MPI.Intracomm, make: Callable[[int], Callable[[], None]],
         sizes: tuple[int, ...] = PROBE_SIZES, largest: int = EXTEND_TO) -> Fit:
    """The fit through the mean times (:func:`_slowest_mean`) at ``sizes``, then at twice
    the largest size and so on up to ``largest`` bytes while the last one took under
    :data:`EXTEND_BELOW_S`: where transfers are fast (shared memory, fast networks)
    their time per byte changes as buffers outgrow the caches, and probing is cheap.
    A size that costs more than :data:`JUMP` times the previous one per byte is measured
    again: one stalled run must not price every larger call."""
    points: list[tuple[int, float]] = []

    def measure_at(n: int) -> None:
        t = _slowest_mean(comm, make(n))
        if points and t / n > JUMP * points[-1][1] / points[-1][0]:
            # a jump in the cost per byte: a protocol or cache step, or a stalled run (a
            # TCP stall once read 2.3x at 10 Gbit/s); a second reading tells them apart
            t = min(t, _slowest_mean(comm, make(n)))
        points.append((n, t))

    for n in sizes:
        measure_at(n)
    while points[-1][1] < EXTEND_BELOW_S and 2 * points[-1][0] <= largest:
        measure_at(2 * points[-1][0])
    return Fit.through_all(points)


def _overlap(comm: MPI.Intracomm) -> float:
    """The fraction of the shorter of a transfer and some codec work that runs hidden
    behind the other when one thread does both, as the ring in pieces does.

    The transfer: a ring step of the larger probe size in 8 nonblocking pieces;
    the work: bit-plane encoding, repeated so that it takes about as long as
    the transfer. Measured alone, then interleaved (encode a piece, send it);
    ``(transfer + work - both) / min(transfer, work)``, clipped to [-1, 1]: below
    zero where doing both takes longer than the two apart (the codec, the waits
    and the network stack competing for shared cores).
    """
    from .algorithms.common import poll

    p, r = comm.Get_size(), comm.Get_rank()
    if p == 1:
        return 1.0
    right, left, k, nbytes = (r + 1) % p, (r - 1) % p, 8, 1 << 20
    sent, got = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    codec = _probe_codec()
    values = _probe_data(nbytes // 4, np.dtype(np.float32))
    stream = np.empty(codec.encoded_nbytes(values.size, values.dtype), np.uint8)
    piece, vpiece = nbytes // k, values.size // k

    def work(j: int, reps: int) -> None:
        for _ in range(reps):
            codec.encode(values[j * vpiece : (j + 1) * vpiece], out=stream[: stream.size // k])

    def transfer(reps: int) -> None:
        reqs = [comm.Irecv(got[j * piece : (j + 1) * piece], left, 7) for j in range(k)]
        for j in range(k):
            work(j, reps)
            reqs.append(comm.Isend(sent[j * piece : (j + 1) * piece], right, 7))
        poll(lambda: MPI.Request.Testall(reqs))

    wire = _slowest_median(comm, lambda: transfer(0))
    once = _slowest_median(comm, lambda: [work(j, 1) for j in range(k)])
    reps = int(min(max(round(wire / once), 1), 64)) if once > 0 else 1
    alone = _slowest_median(comm, lambda: [work(j, reps) for j in range(k)])
    both = _slowest_median(comm, lambda: transfer(reps))
    shorter = min(wire, alone)
    return float(min(max((wire + alone - both) / shorter, -1.0), 1.0)) if shorter > 0 else 1.0


def _probe_codec() -> Any:
    """The codec the overlap, kernel-call and fixed-cost probes run (bitplane 8.25)."""
    from .codecs import get_codec

    return get_codec({"id": "bitplane", "rate": 8.25})


def _kernel_call(comm: MPI.Intracomm) -> float:
    """Seconds of one kernel call on one codec block: the mean of an encode, a decode
    and an add of 32 values, the fixed cost the ring pays per piece and step."""
    from .kernels.scan_cpu import add_into

    codec = _probe_codec()
    values = _probe_data(32, np.dtype(np.float32))
    stream = codec.encode(values)
    out = np.empty_like(values)

    def three() -> None:
        codec.encode(values, out=stream)
        codec.decode(stream, out=out, count=values.size, dtype=values.dtype)
        add_into(out, values)

    return _slowest_median(comm, three, TINY_REPEAT) / 3


def _fixed_cost(comm: MPI.Intracomm, call_s: float) -> float:
    """Seconds of a compressed call's work that grows with neither size nor pieces: the
    ring allreduce of one codec block per rank, less its ``4p - 2`` kernel calls and its
    ``2 (p - 1)`` exchanges of one block's stream, timed as the ring makes them: back to
    back, in one run.

    That difference also holds what the ring's steps cost beyond isolated exchanges
    (waiting on a neighbour's codec work where ranks share cores), but it is a difference
    of two times, and where every step waits on a rank that lost its core both are mostly
    scheduling: then it can come out at or below zero. It is never taken below the
    ring's own Python work, measured in the same runs: each rank's time outside its
    codec calls and MPI calls (:class:`~.stats.Recorder` times both), less its ``p - 1``
    add calls.
    """
    from .algorithms import ring
    from .algorithms.common import Ctx
    from .backend.host import HostMemory, Scratch
    from .stats import Recorder, Stats

    p = comm.Get_size()
    if p == 1:
        return 0.0
    codec = _probe_codec()
    x = _probe_data(32 * p, np.dtype(np.float32))
    out = np.empty_like(x)
    memory = HostMemory(Scratch())
    python_s: list[float] = []

    def tiny_ring() -> None:
        rec = Recorder(Stats(), "probe", 0, x.nbytes)
        t = time.perf_counter()
        ring.allreduce(Ctx(comm, codec, rec, memory), x, out)
        python_s.append(time.perf_counter() - t - rec.codec_seconds - rec.mpi_seconds)

    step = _exchange_probe(comm, codec.encoded_nbytes(32, x.dtype))

    def steps() -> None:
        for _ in range(2 * (p - 1)):
            step()

    whole = _slowest_median(comm, tiny_ring, TINY_REPEAT)
    exchanges = _slowest_median(comm, steps, TINY_REPEAT)
    mine = np.array(python_s[-TINY_REPEAT:])  # the timed runs, not the warm-up
    slowest = np.empty_like(mine)
    comm.Allreduce(mine, slowest, op=MPI.MAX)
    own = float(np.median(slowest)) - (p - 1) * call_s
    return max(whole - (4 * p - 2) * call_s - exchanges, own, 0.0)


def measure(comm: MPI.Intracomm, lay: Layout) -> Calibration:
    """Run the probe on ``comm`` (collective; a plain, private communicator)."""
    from .kernels.scan_cpu import add_into, max_abs

    start = time.perf_counter()
    vec, out = np.zeros(12), np.empty(12)  # the agreement step's twelve float64
    agree_s = _slowest_median(comm, lambda: comm.Allreduce(vec, out, op=MPI.MAX), repeat=10)
    exchange = _fit(comm, lambda n: _exchange_probe(comm, n))
    p = comm.Get_size()
    plain = {m: _fit(comm, lambda n, m=m: _plain_probe(comm, m, n), _allgather_sizes(p),
                     ALLGATHER_PROBE_TOTAL // p) if m == "Allgather"
             else _fit(comm, lambda n, m=m: _plain_probe(comm, m, n))
             for m in PLAIN_METHODS}
    # large calls stream their buffers through memory: so do the probes of add and scan
    acc = np.ones(STREAM_PROBE_BYTES // 4, np.float32)
    add_s = _slowest_median(comm, lambda: add_into(acc, acc)) / acc.nbytes
    scan_s = _slowest_median(comm, lambda: max_abs(acc)) / acc.nbytes
    call_s = _kernel_call(comm)
    fixed_s = _fixed_cost(comm, call_s)
    overlap = _overlap(comm)
    node = _node_fits(comm, lay)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return Calibration(lay, threads.budget(), agree_s, exchange, plain, add_s, seconds,
                       overlap, scan_s, call_s, fixed_s, node)


def _probe_data(n: int, dtype: np.dtype) -> np.ndarray:
    """Gradient-like values (Gaussian with a log-normal scale), fixed seed."""
    rng = np.random.default_rng(12345)
    return (rng.standard_normal(n) * np.exp(2.0 * rng.standard_normal(n))).astype(dtype)


def speed_key(codec: Any, dtype: Any, on_device: bool) -> str:
    """Where :attr:`Calibration.codecs` keeps ``codec``'s speed on ``dtype``."""
    return (f"{json.dumps(codec.get_config(), sort_keys=True)}|{np.dtype(dtype).name}|"
            f"{'device' if on_device else 'host'}")


def codec_speed(comm: MPI.Intracomm, cal: Calibration, codec: Any, dtype: np.dtype,
                memory: Any) -> tuple[tuple[float, float], bool]:
    """(encode, decode) seconds per raw byte of ``codec`` on ``dtype`` (collective if new),
    and whether they were measured now (then the caller saves the calibration).

    Whether the figure is known is agreed first (a MIN allreduce), so a rank
    that measured it on another communicator never skips a probe the others run.
    On device memory the probe runs at two sizes (16x apart; 2x under the
    simulator): the slope is the seconds per byte, and what a call costs beyond
    its bytes (its launches, a staged call's copies and fences) goes to
    ``cal.codec_calls`` (a GPU codes a megabyte in microseconds, so one size
    would price a large call's bytes at a small call's fixed cost). Every rank
    times as many runs (a host rank among device ones repeats its one size), so
    that the probes' collectives match where ranks pass different memory; the
    times are the slowest rank's, as in every probe, so such a job's figures mix
    the two memories (the model prices it for neither: docs/usage.md).
    """
    key = speed_key(codec, dtype, memory.on_device)
    known = key in cal.codecs and (not memory.on_device or key in cal.codec_calls)
    if comm.allreduce(int(known), op=MPI.MIN):
        value, calls = comm.bcast((cal.codecs[key], cal.codec_calls.get(key))
                                  if comm.Get_rank() == 0 else None, root=0)
        cal.codecs[key] = value
        if calls is not None:
            cal.codec_calls[key] = calls
        return value, False
    simulated = memory.on_device and os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"
    n = CODEC_PROBE_VALUES_SIMULATOR if simulated else CODEC_PROBE_VALUES
    if not memory.on_device:
        sizes = [n]
    else:  # (the simulator's kernels take seconds: two sizes of its own, 2x apart)
        sizes = [n // 2, n] if simulated else [n, 16 * n]
    own = len(sizes)  # (the runs after them only match another rank's collectives)
    sizes += [sizes[-1]] * (comm.allreduce(own, op=MPI.MAX) - own)
    x_host = _probe_data(sizes[-1], np.dtype(dtype))
    x = memory.values("probe-values", x_host.size, x_host.dtype)
    memory.copy(x, x_host)
    y = memory.values("probe-decoded", x_host.size, x_host.dtype)
    stream = memory.wire("probe-stream", codec.encoded_nbytes(x_host.size, x_host.dtype))
    times = []  # (bytes, encode s, decode s) per size
    for m in sizes:
        nbytes = codec.encoded_nbytes(m, x_host.dtype)

        def encode(m: int = m, nbytes: int = nbytes) -> None:
            memory.encode(codec, x[:m], stream[:nbytes])
            memory.synchronize()

        def decode(m: int = m, nbytes: int = nbytes) -> None:
            memory.decode(codec, stream[:nbytes], y[:m])
            memory.synchronize()

        times.append((m * x_host.itemsize, _slowest_median(comm, encode),
                      _slowest_median(comm, decode)))
    (b0, e0, d0), (b1, e1, d1) = times[0], times[own - 1]
    if own == 1 or b1 <= b0:
        speed = (e1 / b1, d1 / b1)
    else:  # the slope, or (noise: a larger call no slower) the larger call's mean
        speed = tuple(max(t1 - t0, 0.0) / (b1 - b0) or t1 / b1
                      for t0, t1 in ((e0, e1), (d0, d1)))
        cal.codec_calls[key] = (max(e0 - speed[0] * b0, 0.0), max(d0 - speed[1] * b0, 0.0))
    cal.codecs[key] = (float(speed[0]), float(speed[1]))  # (saved by the caller)
    return cal.codecs[key], True


def codec_call_s(cal: Calibration, codec: Any, dtype: Any, on_device: bool) -> float | None:
    """The measured seconds one codec call costs beyond its bytes on the device (the mean
    of an encode's and a decode's), None on the host or where not measured (the model
    then takes ``cal.call_s``)."""
    calls = cal.codec_calls.get(speed_key(codec, dtype, on_device)) if on_device else None
    return None if calls is None else (calls[0] + calls[1]) / 2
