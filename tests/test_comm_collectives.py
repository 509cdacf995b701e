"""Every compressed method through one suite: drop-in equality and error bounds.

``run_suite(c)`` makes the same calls, in the same order, on any
communicator ``c`` and returns what each call produced. Run against
``MPI.COMM_WORLD`` and against ``mpicomp.Comm(..., codec="none")`` the
results must be bitwise identical; run against a compressing communicator
they must be within the codec's bound of the plain results.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from mpi4py import MPI
from real_like import gradient_like

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.codecs import get_codec

N = 2500  # values per rank and block (not a multiple of any codec block)

#: results of reductions (error grows with p) vs data movement (one quantization)
REDUCTIONS = {"Allreduce", "Allreduce-inplace", "Allreduce-double-spec", "Reduce",
              "Reduce_scatter_block", "Reduce_scatter", "Iallreduce"}


def data(rank: int, n: int, dtype=np.float32, salt: int = 0) -> np.ndarray:
    return gradient_like(n, dtype, seed=1000 * salt + rank)


def run_suite(c, dt=np.float32) -> dict[str, np.ndarray]:
    """The same calls on any communicator; returns name -> result (this rank's view).

    ``dt`` is the dtype of the float buffers (one call always uses float64).
    """
    p, r = c.Get_size(), c.Get_rank()
    mpi_dt = MPI.FLOAT if dt == np.float32 else MPI.DOUBLE
    out: dict[str, np.ndarray] = {}
    x = data(r, N, dt)

    y = np.empty(N, dt)
    c.Allreduce(x, y)
    out["Allreduce"] = y
    y = x.copy()
    c.Allreduce(MPI.IN_PLACE, y)
    out["Allreduce-inplace"] = y
    xd = data(r, N, np.float64, 1)
    y = np.zeros(N + 10, np.float64)
    c.Allreduce([xd, N, MPI.DOUBLE], [y, N, MPI.DOUBLE])
    out["Allreduce-double-spec"] = y
    yi = np.empty(N, np.int64)
    c.Allreduce(np.arange(N, dtype=np.int64) * (r + 1), yi)
    out["Allreduce-int64"] = yi
    y = np.empty(N, dt)
    c.Allreduce(x, y, op=MPI.MAX)
    out["Allreduce-max"] = y

    y = np.zeros(N, dt)
    c.Reduce([x, mpi_dt], [y, mpi_dt] if r == p - 1 else None, root=p - 1)
    out["Reduce"] = y
    xb = data(r, p * N, dt, salt=2)
    y = np.empty(N, dt)
    c.Reduce_scatter_block(xb, y)
    out["Reduce_scatter_block"] = y
    counts = [N - 3 * i for i in range(p)]
    y = np.empty(counts[r], dt)
    c.Reduce_scatter(xb[: sum(counts)], y, counts)
    out["Reduce_scatter"] = y

    y = np.empty(p * N, dt)
    c.Allgather(x, y)
    out["Allgather"] = y
    y = np.zeros(p * N, dt)
    y[r * N : (r + 1) * N] = x
    c.Allgather(MPI.IN_PLACE, y)
    out["Allgather-inplace"] = y
    vcounts = [N - 11 * i for i in range(p)]
    displs = [int(d) for d in np.cumsum([0] + vcounts[:-1])]
    y = np.empty(sum(vcounts), dt)
    c.Allgatherv(x[: vcounts[r]], [y, vcounts, displs, mpi_dt])
    out["Allgatherv"] = y
    y = np.empty(p * N, dt)
    c.Alltoall(xb, y)
    out["Alltoall"] = y
    y = data(r, N, dt, salt=3) if r == 0 else np.zeros(N, dt)
    c.Bcast(y, root=0)
    out["Bcast"] = y
    y = np.empty(p * N, dt) if r == 0 else None
    c.Gather(x, y, root=0)
    out["Gather"] = y if y is not None else np.empty(0, dt)
    y = np.empty(N, dt)
    c.Scatter(xb if r == p - 1 else None, y, root=p - 1)
    out["Scatter"] = y
    if r == 0:  # the root in place keeps its whole send buffer untouched
        y = xb.copy()
        c.Scatter(y, MPI.IN_PLACE, root=0)
    else:
        y = np.empty(N, dt)
        c.Scatter(None, y, root=0)
    out["Scatter-inplace"] = y

    y = np.empty(N, dt)
    c.Sendrecv(x, (r + 1) % p, 7, y, (r - 1) % p, 7)
    out["Sendrecv"] = y
    y = np.empty(N, dt)
    rreq = c.Irecv(y, (r - 1) % p, 8)
    sreq = c.Isend(x, (r + 1) % p, 8)
    MPI.Request.Waitall([sreq, rreq])
    out["Isend-Irecv"] = y

    y1, y2 = np.empty(N, dt), np.empty(p * N, dt)
    y3, y4 = np.empty(p * N, dt), data(r, N, dt, salt=4)
    reqs = [c.Iallreduce(x, y1), c.Iallgather(x, y2), c.Ialltoall(xb, y3), c.Ibcast(y4, root=0)]
    MPI.Request.Waitall(reqs[::-1])
    out.update({"Iallreduce": y1, "Iallgather": y2, "Ialltoall": y3, "Ibcast": y4})
    return out


def digests(comm, results: dict[str, np.ndarray]) -> list[dict[str, str]]:
    mine = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in results.items()}
    return comm.allgather(mine)


@pytest.mark.mpi
def test_codec_none_is_bitwise_plain_mpi(comm):
    plain = run_suite(comm)
    mc = mpicomp.Comm(comm, codec="none", threshold=0)
    wrapped = run_suite(mc)
    stats = mc.stats()
    assert set(plain) == set(wrapped)
    for name in plain:
        np.testing.assert_array_equal(wrapped[name], plain[name], err_msg=name)
    assert all(s["compressed"] == 0 for s in stats.values())
    for name, s in stats.items():
        allowed = {"sender sent plain data"} if name == "Recv" else {"codec none"}
        assert set(s["fallbacks"]) == allowed, name


def zfp_constant(comm, codec, xs: list[np.ndarray]) -> float:
    """zfp has no pointwise bound: twice its worst relative error seen on the inputs."""
    rel = 0.0
    for x in xs:
        y = codec.decode(codec.encode(x), out=np.empty_like(x))
        rel = max(rel, float(np.abs(y.astype(np.float64) - x).max() / np.abs(x).max()))
    return 2.0 * comm.allreduce(rel, op=MPI.MAX)


@pytest.mark.mpi
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    "config",
    [{"id": "bitplane", "rate": 16.25}, {"id": "cast", "dtype": "bfloat16"},
     {"id": "cast", "dtype": "float16"}, {"id": "zfp", "rate": 32, "dims": 1},
     {"id": "errbound", "tolerance": 1e-3},
     {"id": "errbound", "tolerance": 1e-4, "relative": True}],
    ids=["bitplane16", "bf16", "f16", "zfp32", "errbound-abs", "errbound-rel"],
)
def test_compressed_suite_within_bounds(comm, config, dt):
    p = comm.Get_size()
    plain = run_suite(comm, dt)
    mc = mpicomp.Comm(comm, codec=config, threshold=0)
    got = run_suite(mc, dt)
    all_digests = digests(comm, got)
    r = comm.Get_rank()
    # G of each reduction: the sum over ranks of max|input| (see mpicomp/algorithms/bounds.py)
    inputs = {"Allreduce": data(r, N, dt), "Allreduce-double-spec": data(r, N, np.float64, 1),
              "Reduce_scatter": data(r, p * N, dt, salt=2)}
    g = {k: comm.allreduce(float(np.abs(v).max()), op=MPI.SUM) for k, v in inputs.items()}
    gmax = comm.allreduce(
        max(float(np.abs(data(r, p * N, dt, salt=s)).max()) for s in (0, 2, 3, 4)), op=MPI.MAX
    )
    codec = get_codec(config)
    zfp_c = zfp_constant(comm, codec, [data(r, k, d, salt=s) for s in (0, 1, 2, 3, 4)
                                       for d in (np.float32, np.float64) for k in (N, p * N)])
    stats = mc.stats()

    for name, ref in plain.items():
        y = got[name]
        if name in ("Allreduce-int64", "Allreduce-max") and config["id"] != "cast":
            np.testing.assert_array_equal(y, ref, err_msg=f"{name} must go to plain MPI")
            continue
        c, a = bounds.codec_constants(codec, y.dtype) or (zfp_c, 0.0)
        if p == 1 and name in REDUCTIONS:
            bound = 0.0
        elif name in REDUCTIONS:
            # Reduce and Reduce_scatter run the ring; Allreduce what "auto" picked (the
            # loosest bound of the algorithms its calls ran: the model may pick another
            # once a variable codec's calls have learned its ratio)
            ring = name.startswith("Reduce")
            flat = [a for a in stats["Allreduce"]["algorithms"]
                    if a in ("ring", "direct", "allgather", "recursive_doubling")]
            ran = ["ring"] if ring else (
                flat or [mc.predict("Allreduce", N * y.itemsize, y.dtype).algorithm])
            key = "Reduce_scatter" if name.startswith("Reduce_scatter") else (
                "Allreduce-double-spec" if name == "Allreduce-double-spec" else "Allreduce")
            bound = max(bounds.allreduce_bound(alg, p, c, a, g[key], y.dtype) for alg in ran)
            if name == "Allreduce-double-spec":
                y, ref = y[:N], ref[:N]
        else:
            bound = c * gmax + a
        err = float(np.abs(y.astype(np.float64) - ref).max()) if y.size else 0.0
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g}"
    # collectives whose results every rank holds agree bitwise across ranks
    for name in ("Allreduce", "Allreduce-inplace", "Allgather", "Allgatherv", "Bcast",
                 "Iallreduce", "Iallgather", "Ibcast"):
        assert len({d[name] for d in all_digests}) == 1, name
    if p > 1:
        assert stats["Allreduce"]["compressed"] >= 2
        assert stats["Bcast"]["compressed"] == 1
        assert stats["Iallreduce"]["compressed"] == 1
        x = data(comm.Get_rank(), N, dt)
        # zfp 32 on float32: no gain; a variable codec's frame: known once built
        framed = int((mpicomp.frame_format.build(codec, x).nbytes if codec.variable
                      else mpicomp.frame_format.frame_nbytes(codec, x)) < x.nbytes)
        assert stats["Isend"]["compressed"] == framed and stats["Irecv"]["compressed"] == framed


@pytest.mark.mpi
def test_bcast_leaves_identical_bits_on_every_rank_root_included(comm):
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=4.25, threshold=0)
    x = data(0, 4000, salt=9) if r == 0 else np.zeros(4000, np.float32)
    original = x.copy()
    mc.Bcast(x, root=0)
    all_digests = comm.allgather(hashlib.sha256(x.tobytes()).hexdigest())
    assert len(set(all_digests)) == 1
    if comm.Get_size() > 1 and r == 0:
        assert not np.array_equal(x, original)  # the root holds the decoded values too


@pytest.mark.mpi
@pytest.mark.parametrize("spec", ["bitplane:8.25", "errbound:1e-3"])
def test_bcast_down_the_chain_gives_every_rank_the_round_trip_from_every_root(comm, spec):
    """A buffer of several pieces (the chain's pipeline: each piece forwarded before it is
    decoded, a variable codec's pieces with only the bytes used): every rank, the root
    included, ends with the codec's round trip of the root's buffer, bit for bit, from every
    root, blocking and nonblocking; the root sends the stream once, the last rank of the
    chain nothing."""
    from mpicomp.algorithms.chain import chained
    from mpicomp.algorithms.common import pieces_of, split

    p, r = comm.Get_size(), comm.Get_rank()
    name, value = spec.split(":")
    codec = get_codec(name, **({"rate": float(value)} if name == "bitplane"
                               else {"tolerance": float(value)}))
    n = 1 << 19
    k = pieces_of(codec, n, np.float32)
    assert k >= 2 and (p == 1 or chained(p, k))
    mc = mpicomp.Comm(comm, codec=codec, threshold=0)
    for root in range(p):
        for nonblocking in (False, True):
            mc.reset_stats()
            x = gradient_like(n, seed=root + 17) * 1e-2
            want = x.tobytes() if p == 1 else codec.decode(
                codec.encode(x), count=n, dtype=np.float32).tobytes()
            b = x.copy() if r == root else np.zeros(n, np.float32)
            if nonblocking:
                mc.Ibcast(b, root=root).Wait()
            else:
                mc.Bcast(b, root=root)
            assert b.tobytes() == want, (root, nonblocking)
            if p > 1:
                st = mc.stats()["Ibcast" if nonblocking else "Bcast"]
                assert st["algorithms"] == {"bcast": 1}
                last = (r - root) % p == p - 1
                stream = sum(codec.encode(x[d:d + c]).nbytes
                             for c, d in zip(*split(n, k), strict=True))
                assert st["wire_bytes"] == (0 if last else stream), (root, nonblocking)


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["hierarchical", "auto"])
def test_node_aware_alltoall_sends_only_between_nodes_compressed(comm, monkeypatch, algorithm):
    """On pretend nodes of two ranks each (the layout is replaced; the transfers are real
    MPI): blocks between ranks of one node arrive exact, blocks between nodes are the
    codec's round trip bit for bit, and only those count as compressed wire bytes.
    ``auto`` runs it where a job spans nodes that hold several ranks, else the flat
    compressed Alltoall (every other rank's block through the codec). The own block is
    copied, exact, either way."""
    from mpicomp import topology

    p, r = comm.Get_size(), comm.Get_rank()
    monkeypatch.setattr(topology, "layout",
                        lambda c: topology.Layout(tuple(i // 2 for i in range(c.Get_size()))))
    codec = get_codec("bitplane", rate=8.25)
    mc = mpicomp.Comm(comm, codec=codec, threshold=0, algorithm=algorithm)
    x = data(r, p * N, salt=7)
    # in place too: a node's plain blocks must not land in blocks still being sent
    for nonblocking, in_place in ((False, False), (True, False), (False, True)):
        mc.reset_stats()
        y = np.full(p * N, np.nan, np.float32)
        if in_place:
            y[:] = x
            mc.Alltoall(MPI.IN_PLACE, y)
        elif nonblocking:
            mc.Ialltoall(x, y).Wait()
        else:
            mc.Alltoall(x, y)
        name = "Ialltoall" if nonblocking else "Alltoall"
        st = mc.stats()[name]
        node_aware = algorithm == "hierarchical" or p > 2  # auto: spans nodes, ppn 2
        sent_by = comm.alltoall([x[j * N:(j + 1) * N] for j in range(p)])
        for i in range(p):
            got, want = y[i * N:(i + 1) * N], sent_by[i]
            if i == r or (node_aware and i // 2 == r // 2):
                assert got.tobytes() == want.tobytes(), f"block from rank {i}: not exact"
            else:
                trip = codec.decode(codec.encode(want), count=N, dtype=np.float32)
                assert got.tobytes() == trip.tobytes(), f"block from rank {i}"
        if p == 1:
            continue
        assert st["compressed"] == 1
        remote = sum(1 for j in range(p) if j // 2 != r // 2) if node_aware else p - 1
        local = p - 1 - remote
        nb = codec.encoded_nbytes(N, np.float32)
        assert st["wire_bytes"] == remote * nb + local * N * 4, st
        if not nonblocking:
            assert st["algorithms"] == {("alltoall-hierarchical" if node_aware
                                         else "alltoall"): 1}


@pytest.mark.mpi
@pytest.mark.parametrize("layout", ["pairs", "round robin"])
@pytest.mark.parametrize("algorithm", ["hierarchical", "auto"])
def test_node_aware_allgather_and_bcast_give_every_rank_the_same_round_trip(
        comm, monkeypatch, algorithm, layout):
    """Pretend nodes (the layout is replaced; the transfers are real MPI), of two ranks
    each, or in round-robin placement (a node's ranks not contiguous): the node-aware
    Allgather gives every rank every block as the codec's round trip, bit for bit (own
    block included), in place too; the node-aware Bcast gives every rank, the root
    included, the round trip of the root's buffer, from every root. ``auto`` runs them
    where a job spans nodes that hold several ranks."""
    from mpicomp import topology

    p, r = comm.Get_size(), comm.Get_rank()
    nodes = max(1, p // 2)
    node_of = (lambda i: i // 2) if layout == "pairs" else (lambda i: i % nodes)
    monkeypatch.setattr(topology, "layout",
                        lambda c: topology.Layout(tuple(node_of(i) for i in range(c.Get_size()))))
    codec = get_codec("bitplane", rate=8.25)
    mc = mpicomp.Comm(comm, codec=codec, threshold=0, algorithm=algorithm)
    placed = [node_of(i) for i in range(p)]
    spans, ppn = len(set(placed)) > 1, max(placed.count(k) for k in placed)
    node_aware = algorithm == "hierarchical" or (spans and ppn > 1)
    label = "-hierarchical" if node_aware else ""
    # (the flat Allgather of small blocks on up to 8 ranks: the direct one)
    gathered = "-hierarchical" if node_aware else "-direct"

    def trip(v: np.ndarray) -> bytes:
        if p == 1:  # a single rank: plain MPI, exact
            return v.tobytes()
        return codec.decode(codec.encode(v), count=v.size, dtype=np.float32).tobytes()

    x = data(r, N, salt=11)
    everyone = comm.allgather(x)
    for in_place in (False, True):
        mc.reset_stats()
        y = np.full(p * N, np.nan, np.float32)
        if in_place:
            y[r * N:(r + 1) * N] = x
            mc.Allgather(MPI.IN_PLACE, y)
        else:
            mc.Allgather(x, y)
        for i in range(p):
            assert y[i * N:(i + 1) * N].tobytes() == trip(everyone[i]), f"block of rank {i}"
        if p > 1:
            assert mc.stats()["Allgather"]["algorithms"] == {"allgather" + gathered: 1}
    for root in range(p):
        mc.reset_stats()
        b = data(root, N, salt=12) if r == root else np.zeros(N, np.float32)
        mc.Bcast(b, root=root)
        assert b.tobytes() == trip(data(root, N, salt=12)), f"root {root}"
        if p > 1:
            assert mc.stats()["Bcast"]["algorithms"] == {"bcast" + label: 1}


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["allgather", "direct"])
@pytest.mark.parametrize("spec", ["bitplane:4.25", "zfp:8", "errbound:1e-3"])
def test_direct_reduce_scatter_adds_each_ranks_round_trip_to_the_own_block(comm, spec,
                                                                          algorithm):
    """``algorithm="allgather"`` or ``"direct"``: rank r's result is, in rank order, the sum
    of every other rank's round trip of block r and its own block exact (each input
    quantized once), the same bits blocking, nonblocking, in place and with counts."""
    from mpicomp.backend.host import HOST
    from mpicomp.tolerance import codec_for

    p, r = comm.Get_size(), comm.Get_rank()
    name, value = spec.split(":")
    settings = {"codec": name, "algorithm": algorithm,
                ("tolerance" if name == "errbound" else "rate"): float(value)}
    mc = mpicomp.Comm(comm, threshold=0)
    pol = mc.resolved_policy(**settings)
    # a tolerance is divided among the p - 1 encodes that reach a value of the result
    codec = (codec_for(pol, 0.0, p - 1)[0] if pol.tolerance is not None
             else get_codec(pol.codec))

    def expected(x, counts):
        """This rank's block of the direct reduce-scatter of every rank's ``x``."""
        every = comm.allgather(x)
        start, n = sum(counts[:r]), counts[r]
        acc = None
        for i, xi in enumerate(every):
            term = xi[start:start + n].copy()
            if i != r:
                term = HOST.roundtrip(codec, term)
            acc = term if acc is None else acc + term
        return acc

    xb = data(r, p * N, np.float32, salt=6)
    want = expected(xb, [N] * p)
    y = np.empty(N, np.float32)
    mc.Reduce_scatter_block(xb, y, **settings)
    np.testing.assert_array_equal(y, want)
    y = np.empty(N, np.float32)
    mc.Ireduce_scatter_block(xb, y, **settings).Wait()
    np.testing.assert_array_equal(y, want)
    y = xb.copy()
    mc.Reduce_scatter_block(MPI.IN_PLACE, y, **settings)
    np.testing.assert_array_equal(y[:N], want)
    counts = [N - 5 * i for i in range(p)]
    x = data(r, sum(counts), np.float32, salt=5)
    y = np.empty(counts[r], np.float32)
    mc.Reduce_scatter(x, y, counts, **settings)
    np.testing.assert_array_equal(y, expected(x, counts))
    if p > 1:
        stats = mc.stats()
        assert stats["Reduce_scatter_block"]["algorithms"] == {"direct": 2}
        assert stats["Ireduce_scatter_block"]["algorithms"] == {"direct": 1}
        assert stats["Reduce_scatter"]["algorithms"] == {"direct": 1}


@pytest.mark.mpi
@pytest.mark.parametrize("spec", ["bitplane:3.25", "zfp:8", "errbound:1e-3"])
def test_direct_and_ring_allgather_give_the_same_bits(comm, spec):
    """The direct allgather (auto's on few ranks and small blocks) and the ring's decode the
    same streams: the same bits, blocking, nonblocking, in place, in several pieces, and
    Allgatherv's uneven counts; auto picks direct up to 256 KiB a block, the ring above."""
    p, r = comm.Get_size(), comm.Get_rank()
    name, value = spec.split(":")
    settings = {"codec": name, ("tolerance" if name == "errbound" else "rate"): float(value)}
    mc = mpicomp.Comm(comm, threshold=0)
    results = {}
    for n in (N, 300_000):  # one piece; several (300,000 values: 1.2 MB a block)
        x = data(r, n, np.float32, salt=8)
        for algorithm in ("ring", "direct"):
            y = np.full(p * n, np.nan, np.float32)
            mc.Allgather(x, y, algorithm=algorithm, **settings)
            z = np.full(p * n, np.nan, np.float32)
            mc.Iallgather(x, z, algorithm=algorithm, **settings).Wait()
            w = np.full(p * n, np.nan, np.float32)
            w[r * n:(r + 1) * n] = x
            mc.Allgather(MPI.IN_PLACE, w, algorithm=algorithm, **settings)
            results[n, algorithm] = (y, z, w)
        mc.reset_stats()
        mc.Allgather(x, np.empty(p * n, np.float32), **settings)
        auto = mc.stats()["Allgather"]["algorithms"]
        if p > 1:
            small = n * 4 <= 256 * 1024
            assert auto == {("allgather-direct" if small else "allgather-ring"): 1}, (n, auto)
    counts = [N - 7 * i for i in range(p)]
    displs = [sum(counts[:i]) for i in range(p)]
    xv = data(r, counts[r], np.float32, salt=9)
    for algorithm in ("ring", "direct"):
        yv = np.full(sum(counts), np.nan, np.float32)
        mc.Allgatherv(xv, [yv, (counts, displs)], algorithm=algorithm, **settings)
        results["v", algorithm] = (yv,)
    for key in {k[0] for k in results}:
        for a, b in zip(results[key, "ring"], results[key, "direct"], strict=True):
            assert a.tobytes() == b.tobytes(), key
    every = comm.allgather(results[N, "direct"][0].tobytes())
    assert all(e == every[0] for e in every)


@pytest.mark.mpi
def test_nonblocking_reduce_scatter_is_the_blocking_ring(comm):
    """Ireduce_scatter_block with settings: the blocking ring's bits; without, mpi4py's own
    call (plain, not counted), whatever the communicator's codec."""
    r = comm.Get_rank()
    p = comm.Get_size()
    settings = {"codec": "bitplane", "rate": 8.25, "threshold": 0}
    mc = mpicomp.Comm(comm, **settings)
    xb = data(r, p * N, np.float32, salt=7)
    y, y2 = np.empty(N, np.float32), np.empty(N, np.float32)
    mc.Reduce_scatter_block(xb, y)
    req = mc.Ireduce_scatter_block(xb, y2, **settings)
    assert isinstance(req, MPI.Request)
    req.Wait()
    np.testing.assert_array_equal(y, y2)
    if p > 1:
        assert mc.stats()["Ireduce_scatter_block"]["compressed"] == 1
    counted = mc.stats()["Ireduce_scatter_block"]["calls"]
    plain, exact = np.empty(N, np.float32), np.empty(N, np.float32)
    mc.Ireduce_scatter_block(xb, plain).Wait()
    comm.Reduce_scatter_block(xb, exact)
    np.testing.assert_array_equal(plain, exact)
    assert mc.stats()["Ireduce_scatter_block"]["calls"] == counted
