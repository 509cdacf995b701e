"""Compressed Allreduce: every algorithm x codec x dtype against the exact sum.

Runs on every stage (1 rank: plain MPI by design; 2, 3, 4 ranks:
compressed). Every rank makes the same collective calls in the same order;
assertions come after the last collective of a test, so a failure on one
rank cannot leave the others waiting.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from mpi4py import MPI
from real_like import exact_sum, gradient_like

import mpicomp
from mpicomp.algorithms import bounds, homomorphic
from mpicomp.codecs import get_codec

ALGORITHMS = ["allgather", "ring", "direct", "recursive_doubling"]
CODECS = [
    {"id": "bitplane", "rate": 8.25},
    {"id": "bitplane", "rate": 16.25},
    {"id": "cast", "dtype": "float16"},
    {"id": "cast", "dtype": "bfloat16"},
    {"id": "zfp", "rate": 32, "dims": 1},
    {"id": "none"},
]
DTYPES = [np.float32, np.float64]


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(a.tobytes()).hexdigest()


def zfp_constant(comm, codec, x: np.ndarray) -> float:
    """zfp has no pointwise bound: use twice its worst relative error seen on the inputs."""
    y = codec.decode(codec.encode(x), out=np.empty_like(x))
    rel = float(np.abs(y.astype(np.float64) - x).max() / max(np.abs(x).max(), 1e-300))
    return 2.0 * comm.allreduce(rel, op=MPI.MAX)


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("config", CODECS, ids=lambda c: "-".join(str(v) for v in c.values()))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n", [1000, 6000])
def test_allreduce_within_bound_and_identical(comm, algorithm, config, dtype, n):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm=algorithm)
    x = gradient_like(n, dtype, seed=100 + r)
    y = np.full(n, np.nan, dtype)
    mc.Allreduce(x, y)
    exact = exact_sum(comm, x)
    digests = comm.allgather(digest(y))
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    codec = get_codec(config)
    consts = bounds.codec_constants(codec, np.dtype(dtype))
    if consts is None:
        consts = (zfp_constant(comm, codec, x), 0.0)
    stats = mc.stats()["Allreduce"]
    plain = np.empty_like(x)
    comm.Allreduce(x, plain)

    assert len(set(digests)) == 1, "ranks disagree bitwise"
    err = float(np.abs(y.astype(np.float64) - exact).max())
    if p == 1 or config["id"] == "none":
        np.testing.assert_array_equal(y, plain)  # plain MPI, bit for bit
        assert stats["compressed"] == 0
        return
    bound = bounds.allreduce_bound(algorithm, p, consts[0], consts[1], g, np.dtype(dtype))
    assert err <= bound, f"max error {err:.3g} > bound {bound:.3g}"
    assert stats["compressed"] == 1 and stats["algorithms"] == {algorithm: 1}


@pytest.mark.mpi
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("rate", [16, 24])
def test_homomorphic_within_bound_and_identical(comm, dtype, rate):
    p, r = comm.Get_size(), comm.Get_rank()
    n = 5000
    mc = mpicomp.Comm(comm, threshold=0, algorithm="homomorphic", rate=rate)
    x = gradient_like(n, dtype, seed=7 + r)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    exact = exact_sum(comm, x)
    digests = comm.allgather(digest(y))
    # the shared per-block exponents, as the algorithm computes them
    exps = np.empty(-(-n // homomorphic.BLOCK), np.int16)
    from mpicomp.kernels.fixedpoint_cpu import block_exponents

    block_exponents(x, homomorphic.BLOCK, exps)
    gexps = np.empty_like(exps)
    comm.Allreduce(exps, gexps, op=MPI.MAX)

    assert len(set(digests)) == 1
    if p == 1:
        np.testing.assert_array_equal(y, x)
        return
    fmt = homomorphic.choose_format(float(rate), p)
    bound = bounds.homomorphic_bound(p, fmt.q_max, gexps, y)
    err = np.abs(y.astype(np.float64) - exact)
    assert np.all(err <= bound), f"worst excess {float((err - bound).max()):.3g}"
    assert fmt.bits_per_value <= rate


def test_homomorphic_format_choice():
    fmt = homomorphic.choose_format(8.0, 4)
    assert (fmt.k, fmt.q_max) == (7, 15) and fmt.bits_per_value <= 8
    assert homomorphic.choose_format(16.25, 2).k == 16
    with pytest.raises(ValueError, match=r"rate 4 leaves no room for the sum of 4 ranks"):
        homomorphic.choose_format(4.0, 4)


@pytest.mark.mpi
def test_homomorphic_rate_too_low_raises_on_every_rank(comm):
    p = comm.Get_size()
    mc = mpicomp.Comm(comm, threshold=0, algorithm="homomorphic", rate=2.5)
    x = np.ones(1000, np.float32)
    if p == 1:
        mc.Allreduce(x, np.empty_like(x))  # one rank: plain MPI, nothing to quantize
        return
    with pytest.raises(ValueError, match="leaves no room"):
        mc.Allreduce(x, np.empty_like(x))


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ALGORITHMS + ["homomorphic"])
def test_allreduce_in_place(comm, algorithm):
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0, algorithm=algorithm)
    x = gradient_like(3000, np.float32, seed=r)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    z = x.copy()
    mc.Allreduce(MPI.IN_PLACE, z)
    np.testing.assert_array_equal(z, y)


@pytest.mark.mpi
@pytest.mark.parametrize("op", [MPI.MAX, MPI.MIN], ids=["MAX", "MIN"])
@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_max_min_on_cast_is_exact_cast_of_the_result(comm, op, target):
    r, p = comm.Get_rank(), comm.Get_size()
    mc = mpicomp.Comm(comm, codec={"id": "cast", "dtype": target}, threshold=0)
    x = gradient_like(4000, np.float32, seed=50 + r)
    x[:4] = [0.0, -0.0, -1.5, 2.5]
    y = np.empty_like(x)
    mc.Allreduce(x, y, op=op)
    plain = np.empty_like(x)
    comm.Allreduce(x, plain, op=op)
    codec = get_codec({"id": "cast", "dtype": target})
    expected = codec.decode(codec.encode(plain), out=np.empty_like(plain)) if p > 1 else plain
    stats = mc.stats()["Allreduce"]
    np.testing.assert_array_equal(np.abs(y), np.abs(expected))  # +-0 may differ in sign
    if p > 1:
        assert stats["algorithms"] == {"cast_order": 1}


@pytest.mark.mpi
def test_auto_algorithm_choice(comm):
    p = comm.Get_size()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25, threshold=0)
    small = np.ones(1000, np.float32)
    large = np.ones(1 << 17, np.float32)  # 512 KiB
    mc.Allreduce(small, np.empty_like(small))
    mc.Allreduce(large, np.empty_like(large))
    algs = mc.stats()["Allreduce"]["algorithms"]
    if p == 1:
        assert algs == {}
        return
    # "auto" runs the algorithm the calibrated model predicts fastest
    want: dict[str, int] = {}
    for x in (small, large):
        pred = mc.predict("Allreduce", x.nbytes)
        assert pred.algorithm == min(("ring", "allgather", "recursive_doubling"),
                                     key=lambda a: pred.candidates[a])
        want[pred.algorithm] = want.get(pred.algorithm, 0) + 1
    assert algs == want
    # without a calibration, the size rule of algorithms.choose
    assert mpicomp.Comm(comm, codec="bitplane").calibration is None


@pytest.mark.mpi
@pytest.mark.parametrize("bad", ["nan", "inf", "huge"])
def test_unsafe_data_on_one_rank_sends_everything_plain(comm, bad):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=8.25, threshold=0)
    x = gradient_like(2000, np.float32, seed=r)
    if r == p - 1:
        x[17] = {"nan": np.nan, "inf": -np.inf, "huge": 3e38}[bad]
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    plain = np.empty_like(x)
    comm.Allreduce(x, plain)
    stats = mc.stats()["Allreduce"]
    np.testing.assert_array_equal(y, plain)
    if p > 1:
        assert stats["compressed"] == 0
        (reason,) = stats["fallbacks"]
        assert reason.startswith("overflow" if bad == "huge" else "nonfinite")


@pytest.mark.mpi
def test_ranks_that_disagree_on_the_rate_all_raise(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=0)
    x = np.ones(2000, np.float32)
    if p == 1:
        return
    with pytest.raises(ValueError, match="ranks disagree"):
        mc.Allreduce(x, np.empty_like(x), rate=8.25 if r == 0 else 16.25)
    # the communicator is still usable afterwards
    y = np.empty_like(x)
    mc.Allreduce(x, y, rate=8.25)
    assert np.all(y == p)


@pytest.mark.mpi
@pytest.mark.parametrize("config", [{"id": "bitplane", "rate": 8.25},
                                    {"id": "zfp", "rate": 16, "dims": 1}],
                         ids=["bitplane", "zfp"])
def test_ring_pieces_do_not_change_the_bits(comm, monkeypatch, config):
    """The ring in pieces gives the same bits whatever the piece size (many pieces,
    uneven chunks, a chunk of fewer values than a piece), on every collective that
    runs it; and stays within the ring's bound."""
    from mpicomp.algorithms import common

    p, r = comm.Get_size(), comm.Get_rank()
    n = 64 * 37 * p + 40  # chunks that are not whole numbers of pieces
    x = gradient_like(n, np.float32, seed=300 + r)
    results = []
    for piece_bytes in (1 << 40, 300, 64):
        monkeypatch.setattr(common, "PIECE_BYTES", piece_bytes)
        mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm="ring")
        y = np.full(n, np.nan, np.float32)
        mc.Allreduce(x, y)
        rs = np.full(64 * 37, np.nan, np.float32)
        mc.Reduce_scatter_block(x[: 64 * 37 * p], rs)
        results.append((digest(y), digest(rs)))
    exact = exact_sum(comm, x)
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    codec = get_codec(config)
    consts = bounds.codec_constants(codec, np.dtype(np.float32)) or (
        zfp_constant(comm, codec, x), 0.0)
    everyone = comm.allgather(results)

    assert all(res[0][0] == everyone[0][0][0] for res in everyone), "ranks disagree bitwise"
    assert len(set(results)) == 1, f"the piece size changed the result: {results}"
    if p > 1:
        err = float(np.abs(y.astype(np.float64) - exact).max())
        bound = bounds.allreduce_bound("ring", p, consts[0], consts[1], g, np.dtype(np.float32))
        assert err <= bound, f"max error {err:.3g} > bound {bound:.3g}"


@pytest.mark.mpi
@pytest.mark.parametrize("config", [{"id": "bitplane", "rate": 8.25},
                                    {"id": "cast", "dtype": "bfloat16"}], ids=["bitplane", "cast"])
@pytest.mark.parametrize("nodes_of", ["pairs", "uneven"])
@pytest.mark.parametrize("segment_bytes", [None, 4 << 10], ids=["whole", "segments"])
def test_hierarchical_within_bound_and_identical(comm, monkeypatch, config, nodes_of,
                                                 segment_bytes):
    """The node-aware allreduce on pretend nodes (the layout is replaced; the node
    collectives and the rings are real MPI): by rails where every node holds the same
    number of ranks (pairs on an even rank count), else by node leaders (rank 0 alone on
    a node, the others on another); the same bits on every rank, within the ring's bound
    over the node count, in place too; the rails in one segment, or in several (4 KiB
    segments: their node collectives overlap the rings)."""
    from mpicomp import topology
    from mpicomp.algorithms import hierarchical

    if segment_bytes is not None:
        monkeypatch.setattr(hierarchical, "SEGMENT_BYTES", segment_bytes)

    p, r = comm.Get_size(), comm.Get_rank()
    node_of = (lambda i: i // 2) if nodes_of == "pairs" else (lambda i: min(i, 1))
    monkeypatch.setattr(topology, "layout",
                        lambda c: topology.Layout(tuple(node_of(i) for i in range(c.Get_size()))))
    nodes = node_of(p - 1) + 1
    ran = []
    for way in ("_by_rails", "_by_leaders"):
        monkeypatch.setattr(hierarchical, way, lambda *a, _f=getattr(hierarchical, way), _w=way:
                            (ran.append(_w), _f(*a)))
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm="hierarchical")
    n = 64 * 50 * p + 7
    if segment_bytes is not None:
        assert hierarchical.segments(4 * n) == min(4 * n // segment_bytes, 4) > 1
    x = gradient_like(n, np.float32, seed=400 + r)
    y = np.full(n, np.nan, np.float32)
    mc.Allreduce(x, y)
    z = x.copy()
    mc.Allreduce(MPI.IN_PLACE, z)
    stats = mc.stats()["Allreduce"]
    exact = exact_sum(comm, x)
    digests = comm.allgather(digest(y))
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    c, a = bounds.codec_constants(get_codec(config), np.dtype(np.float32))

    assert len(set(digests)) == 1, "ranks disagree bitwise"
    np.testing.assert_array_equal(z, y)
    if p == 1:
        assert stats["compressed"] == 0
        return
    err = float(np.abs(y.astype(np.float64) - exact).max())
    bound = bounds.allreduce_bound("hierarchical", p, c, a, g, np.dtype(np.float32), nodes)
    assert err <= bound, f"max error {err:.3g} > bound {bound:.3g}"
    assert stats["compressed"] == 2 and stats["algorithms"] == {"hierarchical": 2}
    rails = nodes_of == "pairs" and p % 2 == 0
    assert ran == ["_by_rails" if rails else "_by_leaders"] * 2
