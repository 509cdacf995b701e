"""The performance model, its calibration, the automatic policy and the thread budget."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp import calibration, calibration_file, model, threads, topology
from mpicomp.algorithms import bounds, common
from mpicomp.algorithms.chain import chained
from mpicomp.algorithms.common import pieces_of
from mpicomp.codecs import get_codec
from mpicomp.decision.screen import ONE_NODE
from mpicomp.model import Calibration, Fit
from mpicomp.topology import Layout


def synthetic(p: int, nodes: int, gbs: float, codec_gbs: float = 1.0,
              latency: float = 50e-6) -> tuple[Calibration, tuple[float, float]]:
    """A calibration of ``p`` ranks on ``nodes`` nodes with links of ``gbs`` GB/s."""
    beta = 1e-9 / gbs
    lay = Layout(tuple(r * nodes // p for r in range(p)))
    fit = Fit(latency, beta)
    plain = {m: Fit(latency, beta * f) for m, f in (
        ("Allreduce", 2 * (p - 1) / p), ("Allgather", p - 1), ("Alltoall", (p - 1) / p),
        ("Bcast", 2.0), ("Reduce_scatter_block", (p - 1) / p))}
    cal = Calibration(lay, 1, latency, fit, plain, 1e-9 / 4, 0.0)
    return cal, (1e-9 / codec_gbs, 1e-9 / codec_gbs)


BITPLANE8 = get_codec("bitplane", rate=8.25)


def test_thread_budget_divides_the_cores_among_the_ranks_of_a_node():
    assert threads.compute_budget(2, 2) == 1
    assert threads.compute_budget(16, 4) == 4
    assert threads.compute_budget(2, 8) == 1
    assert threads.compute_budget(8, 1, forced=3) == 3
    assert threads.local_ranks({"MPI_LOCALNRANKS": "4"}) == (4, "MPI_LOCALNRANKS")
    assert threads.local_ranks({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"})[0] == 2
    assert threads.local_ranks({})[0] == 1
    with pytest.raises(ValueError, match="MPICOMP_THREADS must be a whole number"):
        threads._from_env({"MPICOMP_THREADS": "two"})
    assert "codec thread" in threads.describe()


def test_fit_through_two_points():
    f = Fit.through(1000, 2e-3, 3000, 4e-3)
    assert f.beta == pytest.approx(1e-6) and f.alpha == pytest.approx(1e-3)
    flat = Fit.through(1000, 5e-3, 3000, 4e-3)  # noise: never a negative slope
    assert flat.beta > 0 and flat.alpha >= 0
    # knots: interpolated between them, the line of the two largest beyond, the two
    # smallest below; a time below the one before it (noise) is raised to it
    k = Fit.through_all([(4000, 9e-3), (1000, 2e-3), (2000, 1e-3)])
    assert k.knots == ((1000, 2e-3), (2000, 2e-3), (4000, 9e-3))
    assert k.time(1500) == pytest.approx(2e-3) and k.time(3000) == pytest.approx(5.5e-3)
    assert k.time(8000) == pytest.approx(Fit.through(2000, 2e-3, 4000, 9e-3).time(8000))
    assert k.time(500) == pytest.approx(Fit.through(1000, 2e-3, 2000, 2e-3).time(500))
    assert Fit(**json.loads(json.dumps(dataclasses.asdict(k)))) == k
    assert flat.time(3000) == pytest.approx(4e-3)  # through the larger size's measurement


@pytest.mark.parametrize("second, kept", [(4.1, 4.1), (11.0, 11.0), (13.0, 12.0)])
def test_fit_measures_a_jump_in_cost_per_byte_again(monkeypatch, second, kept):
    # 1000 and 2000 bytes cost the same per byte; 4000 first reads 3x that: a stall
    # (measured again: the second reading counts) or a real step (confirmed: it stays)
    readings = {1000: [1.0], 2000: [2.0], 4000: [12.0, second]}
    asked: list[int] = []

    def scripted(comm, fn):
        n = fn()
        asked.append(n)
        return readings[n].pop(0)

    monkeypatch.setattr(calibration, "_slowest_mean", scripted)
    fit = calibration._fit(None, lambda n: (lambda: n), (1000, 2000, 4000), 4000)
    assert asked == [1000, 2000, 4000, 4000]
    assert fit.knots == ((1000, 1.0), (2000, 2.0), (4000, kept))


def test_fit_measures_a_steady_cost_per_byte_once(monkeypatch):
    asked: list[int] = []

    def steady(comm, fn):
        n = fn()
        asked.append(n)
        return n * (1.4 if n == 4000 else 1.0) * 1e-3  # 1.4x per byte: under JUMP

    monkeypatch.setattr(calibration, "_slowest_mean", steady)
    calibration._fit(None, lambda n: (lambda: n), (1000, 2000, 4000), 4000)
    assert asked == [1000, 2000, 4000]


def test_a_device_call_is_priced_with_the_device_pieces_and_the_measured_call_cost():
    """A device chunk's pieces (``pieces_of(..., device=True)``) and the codec calls' fixed
    cost measured on the device (``call_s``) price the ring: the codec term holds
    ``k (4p - 2) call_s`` with the device's k; a larger measured call cost makes the call
    dearer by exactly that term, and host calls keep the host's pieces."""
    p, n = 4, 64 << 20
    cal, speed = synthetic(p, p, gbs=1.0)
    cal = dataclasses.replace(cal, call_s=5e-6)
    count = n // 4 // p
    k_dev = pieces_of(BITPLANE8, count, np.float32, device=True)
    k_host = pieces_of(BITPLANE8, count, np.float32)
    assert k_dev < k_host
    cheap = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, speed, "ring",
                          on_device=True, call_s=5e-6)
    dear = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, speed, "ring",
                         on_device=True, call_s=105e-6)
    rho = BITPLANE8.encoded_nbytes(count * p, np.dtype(np.float32)) / n
    terms = model.ring_terms(dataclasses.replace(cal, call_s=105e-6), n, rho, *speed, k_dev)
    assert dear.candidates["ring"] == pytest.approx(terms["ring"])
    assert dear.candidates["ring"] - cheap.candidates["ring"] == pytest.approx(
        k_dev * (4 * p - 2) * 100e-6, rel=0.05)  # (the pipeline may hide a little of it)
    host = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, speed, "ring")
    host_terms = model.ring_terms(cal, n, rho, *speed, k_host, speculative=True)
    assert host.candidates["ring"] == pytest.approx(host_terms["ring"])


#: the made-up times of :func:`_timed_memory`'s codec calls: seconds per byte, and per call
PER_BYTE, PER_CALL = {"enc": 1e-11, "dec": 2e-11}, {"enc": 30e-6, "dec": 10e-6}


def _timed_memory(monkeypatch, on_device):
    """Host arrays posing as host or device memory whose codec calls take
    ``PER_CALL + PER_BYTE * bytes`` (the probe's timer reads them)."""
    from mpicomp.backend.host import HostMemory, Scratch

    fake = {"t": 0.0}

    class Timed(HostMemory):
        def encode(self, codec, x, out):
            fake["t"] = PER_CALL["enc"] + PER_BYTE["enc"] * x.nbytes
            return out

        def decode(self, codec, stream, out):
            fake["t"] = PER_CALL["dec"] + PER_BYTE["dec"] * out.nbytes
            return out

        def synchronize(self):
            pass

    def timed(comm, fn, repeat=3):
        comm.Barrier()  # (the collectives of the real one: a hang where ranks differ)
        fn()
        return comm.allreduce(fake["t"], op=MPI.MAX)

    monkeypatch.setattr(calibration, "_slowest_median", timed)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    memory = Timed(Scratch())
    memory.on_device = on_device
    return memory


def _check_probe(cal, speed, on_device):
    (e, d), call = speed, calibration.codec_call_s(cal, BITPLANE8, np.float32, on_device)
    if on_device:
        assert (e, d) == pytest.approx((PER_BYTE["enc"], PER_BYTE["dec"]))
        assert call == pytest.approx((PER_CALL["enc"] + PER_CALL["dec"]) / 2)
    else:  # one size: the fixed cost is spread over its bytes
        nbytes = calibration.CODEC_PROBE_VALUES * 4
        assert e == pytest.approx(PER_BYTE["enc"] + PER_CALL["enc"] / nbytes)
        assert call is None


def test_the_device_codec_probe_splits_a_calls_cost_from_its_bytes(monkeypatch):
    """On device memory the codec probe runs at two sizes: the slope is the seconds per
    byte, the intercept each call's fixed cost (``codec_call_s``); host memory keeps the
    one size, and no call cost."""
    comm = MPI.COMM_SELF
    for on_device in (True, False):
        cal, _ = synthetic(1, 1, gbs=1.0)
        memory = _timed_memory(monkeypatch, on_device)
        speed, measured = calibration.codec_speed(comm, cal, BITPLANE8, np.dtype(np.float32),
                                                  memory)
        assert measured
        _check_probe(cal, speed, on_device)
        # known now: asked again, nothing is measured
        assert not calibration.codec_speed(comm, cal, BITPLANE8, np.dtype(np.float32),
                                           memory)[1]


@pytest.mark.mpi(min_size=2)
def test_the_codec_probe_of_ranks_on_host_and_device_memory_runs_the_same_collectives(
        monkeypatch):
    """Rank 0's memory on a device (two probe sizes), the others' on the host (one): every
    rank times as many runs, so the probes' collectives match (a hang otherwise), and each
    rank fits its own sizes. (The made-up costs are the same on both memories: a probe's
    times are the slowest rank's, so real ones would mix the two.)"""
    comm = MPI.COMM_WORLD
    on_device = comm.Get_rank() == 0
    cal, _ = synthetic(comm.Get_size(), comm.Get_size(), gbs=1.0)
    memory = _timed_memory(monkeypatch, on_device)
    speed, measured = calibration.codec_speed(comm, cal, BITPLANE8, np.dtype(np.float32),
                                              memory)
    assert measured
    _check_probe(cal, speed, on_device)
    assert comm.allreduce(1) == comm.Get_size()  # (every rank got here)


def test_speculative_screening_drops_the_scan_where_the_encoders_screen(monkeypatch):
    """bitplane on host buffers: no scan before the ring allreduce and the data-movement
    collectives (their encoders screen); the other algorithms, other codecs and device
    buffers still pay it (device chunks cut as host ones here, so that the scan is the
    only difference)."""
    monkeypatch.setattr(common, "DEVICE_PIECE_BYTES", common.PIECE_BYTES)
    monkeypatch.setattr(common, "DEVICE_MAX_PIECES", common.MAX_PIECES)
    cal, speed = synthetic(4, 4, gbs=0.125)
    cal = dataclasses.replace(cal, scan_s_per_byte=1e-9)  # 1 GB/s: 16 ms on 16 MiB
    n = 16 << 20
    zfp = get_codec("zfp", rate=8)
    for method, way in (("Allreduce", "ring"), ("Alltoall", "alltoall"),
                        ("Allgather", "allgather"), ("Bcast", "bcast")):
        host = model.predict(cal, method, n, BITPLANE8, np.float32, speed, way)
        dev = model.predict(cal, method, n, BITPLANE8, np.float32, speed, way, on_device=True)
        assert dev.candidates[way] - host.candidates[way] == pytest.approx(n * 1e-9), method
        unguarded = model.predict(cal, method, n, zfp, np.float32, speed, way)
        no_scan = dataclasses.replace(cal, scan_s_per_byte=0.0)
        base = model.predict(no_scan, method, n, zfp, np.float32, speed, way)
        assert unguarded.candidates[way] - base.candidates[way] == pytest.approx(n * 1e-9)
    rd = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, speed, "recursive_doubling")
    rd0 = model.predict(dataclasses.replace(cal, scan_s_per_byte=0.0), "Allreduce", n,
                        BITPLANE8, np.float32, speed, "recursive_doubling")
    assert rd.candidates["recursive_doubling"] - rd0.candidates["recursive_doubling"] == \
        pytest.approx(n * 1e-9)


def test_slow_network_compresses_fast_network_does_not():
    slow, speed = synthetic(4, 4, gbs=0.125)  # 1 Gbit/s
    fast, _ = synthetic(4, 1, gbs=10.0)
    n = 16 << 20
    on_slow = model.predict(slow, "Allreduce", n, BITPLANE8, np.float32, speed)
    on_fast = model.predict(fast, "Allreduce", n, BITPLANE8, np.float32, speed)
    assert on_slow.compress and on_slow.algorithm == "ring" and on_slow.speedup > 1.5
    assert not on_fast.compress and on_fast.speedup < 1
    # every method has a prediction; small messages never pay
    for method in model.METHODS:
        big = model.predict(slow, method, n, BITPLANE8, np.float32, speed)
        tiny = model.predict(slow, method, 64, BITPLANE8, np.float32, speed)
        assert big.plain_s > 0 and big.compressed_s > 0
        assert not tiny.compress, method
    with pytest.raises(ValueError, match="the model knows"):
        model.predict(slow, "Frobnicate", n, BITPLANE8, np.float32, speed)


def test_direct_allreduce_is_priced_but_runs_only_when_named():
    """The direct allreduce sends the ring's bytes in two rounds of ``k`` pieces: its price
    is the ring's less exchange latencies (``2 (p - 1) k`` steps against ``2 k``), with the
    pipeline's fill and drain where the wire is the longer. Auto never takes it (measured
    slower than its price: docs/algorithms.md); named, it is what the prediction says."""
    n, count = 16 << 20, 4 << 20
    rho = BITPLANE8.encoded_nbytes(count, np.float32) / n
    cal, speed = synthetic(4, 4, gbs=0.125, latency=200e-6)
    k = pieces_of(BITPLANE8, count // 4, np.float32)
    times = model.compressed_times(cal, "Allreduce", n, rho, *speed, k=k, speculative=True)
    saved = (2 * 3 * k - 2 * k) * 200e-6
    assert times["ring"] - times["direct"] == pytest.approx(saved * (1 + 1 / k))
    auto = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, speed)
    named = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, speed, "direct")
    assert auto.algorithm == "ring" and "direct" not in auto.candidates
    assert named.algorithm == "direct"
    assert named.compressed_s == pytest.approx(times["direct"])


def test_a_variable_codec_is_priced_at_its_ratio_plus_its_size_exchange():
    """errbound's streams: at the upper bound without a learned ratio (no gain but in the
    Bcast's chain, which beats MPI's Bcast by its algorithm: faster than plain, compressed
    where that clears GAIN), at the ratio given, plus one int64 a rank exchanged where the
    algorithm needs the sizes (none in the ring and the chain)."""
    errbound = get_codec("errbound", tolerance=1e-3)
    n = 4 << 20
    k = pieces_of(errbound, n // 4, np.float32)  # the Bcast's pieces (of the whole buffer)
    for p in (4, 16):
        cal, speed = synthetic(p, p, gbs=0.125)
        chain = chained(p, k)
        assert chain == (p == 4)
        for method in ("Allgather", "Bcast", "Alltoall", "Allreduce"):
            upper = model.predict(cal, method, n, errbound, np.float32, speed, algorithm="ring")
            learned = model.predict(cal, method, n, errbound, np.float32, speed,
                                    algorithm="ring", rho=0.125)
            assert learned.compressed_s < upper.compressed_s / 2, (p, method)
            gains = method == "Bcast" and chain
            assert (upper.compressed_s < upper.plain_s) == gains, (p, method)
            assert upper.compress == (gains and upper.plain_s > model.GAIN
                                      * upper.compressed_s), (p, method)
            exchange = model.size_exchange(cal, method, learned.algorithm, k)
            if method == "Allgather" or (method == "Bcast" and not chain):
                assert exchange == pytest.approx(cal.plain[method].time(8.0)) and exchange > 0
            else:
                assert exchange == 0.0, method


def test_bcast_prediction_is_its_chains_formula_where_the_chain_runs():
    """The chain where its k + p - 2 piece times are at most a plain Bcast's min(ceil(log2
    p), 2) k; its prediction: the pipeline of its transfers and the root's encode and a
    decode."""
    assert chained(1, 1) and chained(2, 1) and chained(3, 1)
    assert not chained(4, 1) and chained(4, 2)
    assert not chained(8, 5) and chained(8, 6)
    cal, (e, d) = synthetic(4, 4, gbs=0.125, codec_gbs=2.0)
    n, p = 16 << 20, 4
    k = pieces_of(BITPLANE8, n // 4, np.float32)
    assert k > 2
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    got = model.predict(cal, "Bcast", n, BITPLANE8, np.float32, (e, d))
    wire = (k + p - 2) * cal.exchange.time(rho * n / k)
    codec = (e + d) * n + 3 * k * cal.call_s
    want = model._agree(cal, n, scan=False) + model._overlapped(wire, codec, k, cal.overlap)
    assert got.algorithm == "bcast" and got.compressed_s == pytest.approx(want)
    # many ranks, few pieces: the root's whole stream in one MPI_Bcast
    wide, _ = synthetic(16, 16, gbs=0.125, codec_gbs=2.0)
    n = 1 << 20
    assert not chained(16, pieces_of(BITPLANE8, n // 4, np.float32))
    flat = model.predict(wide, "Bcast", n, BITPLANE8, np.float32, (e, d))
    assert flat.compressed_s == pytest.approx(model._agree(wide, n, scan=False) + e * n
                                              + wide.plain["Bcast"].time(rho * n) + d * n)


def test_ring_prediction_is_its_formula(monkeypatch):
    cal, (e, d) = synthetic(4, 4, gbs=0.125, codec_gbs=2.0)
    n, p = 1 << 24, 4
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    pred = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, (e, d), algorithm="ring")
    x = cal.exchange
    k = min(common.MAX_PIECES, round(rho * n / p / common.PIECE_BYTES))  # pieces of a chunk
    assert k > 1
    wire = 2 * (p - 1) * k * x.time(rho * n / (p * k))
    codec = e * n + d * n * (2 * p - 1) / p + cal.add_s_per_byte * n * (p - 1) / p
    want = cal.agree_s + max(wire, codec) + (wire + codec) / k
    assert pred.algorithm == "ring" and pred.compressed_s == pytest.approx(want)
    assert pred.plain_s == pytest.approx(cal.plain["Allreduce"].time(n))
    assert "model: plain" in pred.describe()
    # the fixed cost of a call and one kernel call per piece and step (and the scan of the
    # input, which bitplane's ring skips: its encoders screen the data)
    costs = dataclasses.replace(cal, scan_s_per_byte=1e-10, fixed_s=3e-4, call_s=2e-5)
    more = model.predict(costs, "Allreduce", n, BITPLANE8, np.float32, (e, d), algorithm="ring")
    codec += k * (4 * p - 2) * 2e-5
    want = cal.agree_s + 3e-4 + max(wire, codec) + (wire + codec) / k
    assert more.compressed_s == pytest.approx(want)
    # device buffers pay the scan (their chunks cut as host ones here, so that the scan
    # is the only difference)
    monkeypatch.setattr(common, "DEVICE_PIECE_BYTES", common.PIECE_BYTES)
    monkeypatch.setattr(common, "DEVICE_MAX_PIECES", common.MAX_PIECES)
    scanned = model.predict(costs, "Allreduce", n, BITPLANE8, np.float32, (e, d),
                            algorithm="ring", on_device=True)
    assert scanned.compressed_s == pytest.approx(want + 1e-10 * n)


def test_ring_without_overlap_adds_codec_and_wire():
    """Where the calibration found that nothing hides behind a transfer (ranks sharing
    cores), the ring in pieces is predicted as codec time plus wire time."""
    cal, (e, d) = synthetic(4, 4, gbs=0.125, codec_gbs=2.0)
    n, p = 1 << 24, 4
    full = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, (e, d), algorithm="ring")
    half = model.predict(dataclasses.replace(cal, overlap=0.5), "Allreduce", n, BITPLANE8,
                         np.float32, (e, d), algorithm="ring")
    none = model.predict(dataclasses.replace(cal, overlap=0.0), "Allreduce", n, BITPLANE8,
                         np.float32, (e, d), algorithm="ring")
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    k = min(common.MAX_PIECES, round(rho * n / p / common.PIECE_BYTES))
    wire = 2 * (p - 1) * k * cal.exchange.time(rho * n / (p * k))
    codec = e * n + d * n * (2 * p - 1) / p + cal.add_s_per_byte * n * (p - 1) / p
    assert none.compressed_s == pytest.approx(cal.agree_s + wire + codec)
    assert full.compressed_s < half.compressed_s < none.compressed_s
    assert half.compressed_s == pytest.approx((full.compressed_s + none.compressed_s) / 2)


def test_hierarchical_is_a_candidate_where_nodes_hold_several_ranks():
    """With node fits (several ranks a node, several nodes) the model predicts the
    node-aware allreduce by its formula, and picks it when shared memory is fast and
    the network slow; without them it is no candidate and, named, runs the ring."""
    cal, (e, d) = synthetic(8, 2, gbs=0.125, codec_gbs=2.0)
    fast = Fit(1e-6, 1e-9 / 20)
    cal = dataclasses.replace(cal, node={"Reduce": fast, "Bcast": fast,
                                         "leader_exchange": cal.exchange})
    n = 1 << 24
    pred = model.predict(cal, "Allreduce", n, BITPLANE8, np.float32, (e, d))
    assert "hierarchical" in pred.candidates and pred.algorithm == "hierarchical"
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    k = min(common.MAX_PIECES, round(rho * n / 2 / common.PIECE_BYTES))
    wire = 2 * k * cal.exchange.time(rho * n / (2 * k))
    codec = e * n + d * n * 3 / 2 + cal.add_s_per_byte * n / 2
    want = (cal.agree_s + 2 * fast.time(n) + max(wire, codec) + (wire + codec) / k)
    assert pred.candidates["hierarchical"] == pytest.approx(want)
    flat, _ = synthetic(8, 2, gbs=0.125, codec_gbs=2.0)
    named = model.predict(flat, "Allreduce", n, BITPLANE8, np.float32, (e, d),
                          algorithm="hierarchical")
    assert "hierarchical" not in named.candidates and named.algorithm == "ring"


def test_hierarchical_by_rails_on_uniform_nodes():
    """Nodes of the same size with the rails' fits: the node-aware allreduce is priced by
    rails (node Reduce_scatter, the L rails' rings at once on n / L bytes, node
    Allgather), below the leaders' price for the same links; without those fits (a
    calibration from before them) it is priced by leaders."""
    cal, (e, d) = synthetic(8, 2, gbs=0.125, codec_gbs=2.0)
    fast = Fit(1e-6, 1e-9 / 20)
    leaders = dataclasses.replace(cal, node={"Reduce": fast, "Bcast": fast,
                                             "leader_exchange": cal.exchange})
    rails = dataclasses.replace(cal, node={**leaders.node, "Reduce_scatter": fast,
                                           "Allgather": fast, "rail_exchange": cal.exchange})
    n = 1 << 24
    pred = model.predict(rails, "Allreduce", n, BITPLANE8, np.float32, (e, d))
    assert pred.algorithm == "hierarchical"
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    m = n / 4  # a rail's part: 4 ranks a node
    k = common.pieces_of(BITPLANE8, n // 4 // 8, np.dtype(np.float32))
    wire = 2 * k * cal.exchange.time(rho * m / (2 * k))
    codec = (e * m + d * m * 3 / 2 + cal.add_s_per_byte * m / 2 + k * 6 * cal.call_s)
    rings = max(wire, codec) + (wire + codec) / k  # (overlap 1 in synthetic)
    node = 2 * fast.time(n)
    want = cal.agree_s + node + rings - min(node, rings) * (1 - 1 / 4)  # 4 segments of 4 MiB
    assert pred.candidates["hierarchical"] == pytest.approx(want)
    by_leaders = model.predict(leaders, "Allreduce", n, BITPLANE8, np.float32, (e, d))
    assert pred.candidates["hierarchical"] < by_leaders.candidates["hierarchical"]
    uneven = dataclasses.replace(rails, layout=Layout((0, 0, 0, 1, 1, 1, 1, 1)))
    assert model.predict(uneven, "Allreduce", n, BITPLANE8, np.float32, (e, d)
                         ).candidates["hierarchical"] != pytest.approx(want)


def test_calibration_round_trips_through_json():
    cal, _ = synthetic(3, 2, gbs=1.0)
    cal.codecs["x|float32|host"] = (1e-9, 2e-9)
    back = Calibration.from_dict(json.loads(json.dumps(cal.as_dict())), "test")
    assert back.as_dict() == cal.as_dict()
    assert "3 ranks on 2 node(s)" in back.describe()


@pytest.mark.mpi
def test_calibration_measures_node_fits_on_pretend_nodes(comm):
    """Nodes of two ranks (a pretend layout; the probes are real MPI): the calibration
    measures the node Reduce, node Bcast and leader exchange, and on an even rank count
    (every node of two ranks) the node Reduce_scatter, node Allgather and rail exchange;
    one node: none."""
    p = comm.Get_size()
    cal = calibration.measure(comm, Layout(tuple(r // 2 for r in range(p))))
    one = calibration.measure(comm, Layout((0,) * p))
    if p > 2:
        rails = {"Reduce_scatter", "Allgather", "rail_exchange"} if p % 2 == 0 else set()
        assert set(cal.node) == {"Reduce", "Bcast", "leader_exchange"} | rails
        assert all(f.beta > 0 for f in cal.node.values())
        back = Calibration.from_dict(json.loads(json.dumps(cal.as_dict())), "test")
        assert back.node == cal.node
    else:
        assert cal.node is None
    assert one.node is None
    assert -1.0 <= cal.overlap <= 1.0
    assert cal.scan_s_per_byte > 0 and cal.call_s > 0 and cal.fixed_s >= 0
    if p > 1:
        assert cal.fixed_s > 0  # a ring allreduce's Python work takes some time


@pytest.mark.mpi
def test_layout_and_calibration_are_the_same_on_every_rank(comm):
    lay = topology.layout(comm)
    assert lay.size == comm.Get_size() and lay.nodes == 1  # the test runs on one machine
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25)
    cal = mc.calibrate()
    assert mc.calibration is cal
    text = json.dumps(cal.as_dict(), sort_keys=True)
    assert len(set(comm.allgather(text))) == 1
    assert cal.exchange.beta > 0 and all(f.beta > 0 for f in cal.plain.values())
    assert len(cal.codecs) >= 1
    pred = mc.predict("Allreduce", 1 << 20)
    assert len(set(comm.allgather(repr(pred)))) == 1


@pytest.mark.mpi
def test_calibration_file_is_saved_and_loaded(comm, tmp_path, monkeypatch):
    path = comm.bcast(str(tmp_path / "cal.json") if comm.Get_rank() == 0 else None)
    monkeypatch.setenv(calibration_file.ENV, path)
    first = mpicomp.Comm(comm, codec="bitplane").calibrate(force=True)
    comm.Barrier()
    saved = json.load(open(path)) if comm.Get_rank() == 0 else None
    if comm.Get_rank() == 0:
        assert saved["layout"] == list(first.layout.node_of)
    calibration_file._CACHE.clear()  # a new job: nothing in memory
    again = mpicomp.Comm(comm, codec="bitplane").calibrate()
    assert again.source.startswith("loaded from")
    assert again.exchange == first.exchange


@pytest.mark.mpi
def test_default_policy_on_one_node_is_plain_mpi_and_exact(comm):
    """No settings: one node never compresses (no probe), results are MPI's own bits."""
    p = comm.Get_size()
    mc = mpicomp.Comm(comm)
    assert mc.resolved_policy().auto
    r = comm.Get_rank()
    x = (np.random.default_rng(r).standard_normal(1 << 18)).astype(np.float32)
    y, want = np.empty_like(x), np.empty_like(x)
    for _ in range(3):
        mc.Allreduce(x, y)
    comm.Allreduce(x, want)
    np.testing.assert_array_equal(y, want)
    small = np.ones(10, np.float32)
    mc.Allreduce(small, np.empty_like(small))
    st = mc.stats()["Allreduce"]
    assert st["calls"] == 4 and st["compressed"] == 0
    if p > 1:
        # once one node is known, every size goes plain at once (the fast path)
        assert st["fallbacks"] == {ONE_NODE: 4}
        assert mc.calibration is None  # one node: the probe never ran
    g = np.empty(p * x.size, np.float32)
    mc.Allgather(x, g)
    mc.Bcast(y)
    assert mc.stats()["Allgather"]["compressed"] == 0


@pytest.mark.mpi(min_size=2)
def test_auto_compresses_when_the_model_predicts_a_gain(comm):
    """With a calibration that says the network is slow, the default policy compresses,
    the same way on every rank, within the algorithm's error bound."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    slow, speed = synthetic(p, p, gbs=0.01)
    mc._pipeline.screen.layout = slow.layout  # as if every rank were on a node of its own
    mc._predictor.cal = slow
    pol = mc.resolved_policy()
    key = (json.dumps(pol.codec.get_config(), sort_keys=True), "float32", False)
    mc._predictor.speeds[key] = speed
    x = (np.random.default_rng(r).standard_normal(1 << 18)).astype(np.float32)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 1
    pred = mc.predict("Allreduce", x.nbytes)
    assert pred.compress and st["algorithms"] == {pred.algorithm: 1}
    exact = np.empty(x.size, np.float64)
    comm.Allreduce(x.astype(np.float64), exact)
    c, a = bounds.codec_constants(pol.codec, np.dtype(np.float32))
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    bound = bounds.allreduce_bound(pred.algorithm, p, c, a, g, np.dtype(np.float32))
    assert float(np.abs(y - exact).max()) <= bound
    assert len(set(comm.allgather(y.tobytes()))) == 1
    # on a network faster than the codec the same call goes plain, exact
    mc._predictor.cal = synthetic(p, p, gbs=100.0)[0]
    mc.Allreduce(x, y)
    assert mc.stats()["Allreduce"]["fallbacks"] == {"model: plain MPI predicted faster": 1}
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    np.testing.assert_array_equal(y, want)


@pytest.mark.mpi
def test_default_policy_nonblocking_on_one_node_is_exact(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm)
    x = np.full(1 << 17, r + 1, np.float32)
    y, g = np.empty_like(x), np.empty(p * x.size, np.float32)
    reqs = [mc.Iallreduce(x, y), mc.Iallgather(x, g)]
    MPI.Request.Waitall(reqs)
    np.testing.assert_array_equal(y, np.full_like(x, p * (p + 1) / 2))
    np.testing.assert_array_equal(g, np.repeat(np.arange(1, p + 1, dtype=np.float32), x.size))
    st = mc.stats()
    assert st["Iallreduce"]["compressed"] == 0 and st["Iallgather"]["compressed"] == 0


def test_node_aware_alltoall_prices_only_the_blocks_between_nodes():
    """8 ranks on 2 nodes: the node-aware Alltoall codes half the blocks and sends the
    others plain; the model prices it so and chooses it (auto and hierarchical), never on
    one node or with one rank a node."""
    cal, (e, d) = synthetic(8, 2, gbs=0.125, codec_gbs=2.0)
    n = 1 << 24
    pred = model.predict(cal, "Alltoall", n, BITPLANE8, np.float32, (e, d))
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    f = 1 - 4 / 8
    want = cal.agree_s + (e + d) * n * f + cal.plain["Alltoall"].time(rho * n)
    assert pred.algorithm == "alltoall-hierarchical"
    assert pred.compressed_s == pytest.approx(want)
    assert pred.candidates["alltoall"] > pred.compressed_s
    flat = model.predict(cal, "Alltoall", n, BITPLANE8, np.float32, (e, d), algorithm="ring")
    assert flat.algorithm == "alltoall"
    for nodes in (1, 8):
        one, _ = synthetic(8, nodes, gbs=0.125, codec_gbs=2.0)
        assert model.predict(one, "Alltoall", n, BITPLANE8, np.float32,
                             (e, d)).algorithm == "alltoall"


def test_node_aware_allgather_and_bcast_are_priced_by_their_formulas():
    """8 ranks on 2 nodes with node fits: the node-aware Allgather and Bcast are priced by
    their formulas (docs of mpicomp.model) and run wherever a job spans nodes of several
    ranks (auto and hierarchical); the flat ones where the algorithm names another way,
    on one node, or with one rank a node."""
    cal, (e, d) = synthetic(8, 2, gbs=0.125, codec_gbs=2.0)
    fast = Fit(1e-6, 1e-9 / 20)
    leaders = Fit(60e-6, 1e-9 / 0.125)
    cal = dataclasses.replace(cal, node={"Reduce": fast, "Bcast": fast,
                                         "leader_exchange": leaders})
    n = 1 << 22
    rho = BITPLANE8.encoded_nbytes(n // 4, np.float32) / n
    ag = model.predict(cal, "Allgather", n, BITPLANE8, np.float32, (e, d))
    pack = rho * n * 4
    want = (cal.agree_s + e * n + fast.time(pack) + (leaders.time(pack) + fast.time(pack))
            + d * n * 8)
    assert ag.algorithm == "allgather-hierarchical"
    assert ag.compressed_s == pytest.approx(want)
    assert ag.candidates["allgather"] == pytest.approx(
        cal.agree_s + e * n + cal.plain["Allgather"].time(rho * n) + d * n * 8)
    bc = model.predict(cal, "Bcast", n, BITPLANE8, np.float32, (e, d), algorithm="hierarchical")
    want = cal.agree_s + e * n + 2 * fast.time(rho * n) + leaders.time(rho * n) + d * n
    assert bc.algorithm == "bcast-hierarchical" and bc.compressed_s == pytest.approx(want)
    named = model.predict(cal, "Bcast", n, BITPLANE8, np.float32, (e, d), algorithm="ring")
    assert named.algorithm == "bcast"
    for nodes in (1, 8):
        flat, _ = synthetic(8, nodes, gbs=0.125, codec_gbs=2.0)
        for method in ("Allgather", "Bcast"):
            got = model.predict(flat, method, n, BITPLANE8, np.float32, (e, d)).algorithm
            assert got == method.lower()


@pytest.mark.mpi
def test_calibration_is_cached_per_user_and_measured_again_when_stale(comm, tmp_path,
                                                                       monkeypatch):
    """Without MPICOMP_CALIBRATION the calibration goes to the per-user cache (here
    MPICOMP_CACHE_DIR), a later job loads it, one older than MAX_AGE_S is measured again,
    and MPICOMP_CALIBRATION=off neither loads nor saves."""
    import os
    import time

    folder = comm.bcast(str(tmp_path / "cache") if comm.Get_rank() == 0 else None)
    monkeypatch.delenv(calibration_file.ENV, raising=False)
    monkeypatch.setenv(calibration_file.CACHE_ENV, folder)
    first = mpicomp.Comm(comm, codec="bitplane").calibrate(force=True)
    comm.Barrier()
    path, ages = calibration_file.file_for(first.layout)
    assert ages and os.path.dirname(path) == folder
    if comm.Get_rank() == 0:
        assert os.path.isfile(path)
    calibration_file._CACHE.clear()  # a new job
    again = mpicomp.Comm(comm, codec="bitplane").calibrate()
    assert again.source == f"loaded from {path}" and again.exchange == first.exchange
    if comm.Get_rank() == 0:
        old = time.time() - calibration_file.MAX_AGE_S - 60
        os.utime(path, (old, old))
    comm.Barrier()
    calibration_file._CACHE.clear()
    stale = mpicomp.Comm(comm, codec="bitplane").calibrate()
    assert stale.source == "measured"
    comm.Barrier()
    if comm.Get_rank() == 0:
        assert time.time() - os.path.getmtime(path) < calibration_file.MAX_AGE_S  # saved anew
    monkeypatch.setenv(calibration_file.ENV, "off")
    assert calibration_file.file_for(first.layout) == (None, False)
    calibration_file._CACHE.clear()
    assert mpicomp.Comm(comm, codec="bitplane").calibrate().source == "measured"


@pytest.mark.slow
def test_calibrate_command_fills_the_cache_for_a_later_job(tmp_path):
    """``mpiexec -n 2 python -m mpicomp calibrate`` (what make venv runs): the first job
    measures and saves, the second finds it in the cache."""
    import os
    import subprocess
    import sys

    import launcher  # tests/launcher.py

    mpiexec = launcher.find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec next to the interpreter or on PATH")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "OMPI_", "MPICOMP_"))}
    env.update(launcher.launcher_env(mpiexec), MPICOMP_CACHE_DIR=str(tmp_path),
               MPIEXEC_TIMEOUT="120", OMP_WAIT_POLICY="PASSIVE")
    lines = []
    for _ in range(2):
        p = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "mpicomp", "calibrate"],
                           env=env, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p
        lines.append(p.stdout.strip().splitlines()[-1])
    saved = list(tmp_path.glob("calibration-*.json"))
    assert len(saved) == 1, lines
    assert ", measured in " in lines[0] and f"loaded from {saved[0]}" in lines[1], lines
