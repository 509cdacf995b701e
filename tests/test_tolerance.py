"""``tolerance=``: the error of a whole collective bounded on every rank.

Unit tests of the setting (call, communicator, ``MPICOMP_TOLERANCE``; bad
values and conflicts named), and under mpiexec every collective, its
nonblocking forms and point to point on real gradients, with zeros and
subnormals, a huge range, and NaN: each rank checks its own result against
the exact one (float64 sums, the plain values for data movement) within the
tolerance plus the dtype's rounding of the additions
(:mod:`mpicomp.tolerance`); NaN/Inf goes plain, exact.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp import tolerance
from mpicomp.policy import Policy, environment_policy, resolve

N = 3000  # values per rank and block (not a multiple of the codec's blocks)


# -- the setting ------------------------------------------------------------------------
@pytest.mark.parametrize("given,want", [(1e-3, (1e-3, False)), ("2e-4", (2e-4, False)),
                                        ("abs:0.5", (0.5, False)), ("rel:1e-3", (1e-3, True)),
                                        (" REL:1e-6 ", (1e-6, True))])
def test_tolerance_forms(given, want):
    assert Policy(tolerance=given).tolerance == want
    pol = resolve(Policy(tolerance=given), Policy(), environ={})
    assert pol.tolerance == want and not pol.auto
    assert pol.codec.codec_id == "errbound"
    assert pol.settings()["tolerance"] == ("rel:" if want[1] else "abs:") + f"{want[0]:g}"


@pytest.mark.parametrize("bad,error", [(0, ValueError), (-1e-3, ValueError), ("rel:", ValueError),
                                       ("rel:abc", ValueError), ("pct:5", ValueError),
                                       (True, TypeError), ([1e-3], TypeError),
                                       (float("inf"), ValueError)])
def test_bad_tolerances_name_the_value(bad, error):
    with pytest.raises(error, match="tolerance"):
        Policy(tolerance=bad)


def test_the_environment_and_its_errors():
    assert environment_policy({"MPICOMP_TOLERANCE": "rel:1e-4"}).tolerance == (1e-4, True)
    with pytest.raises(ValueError, match="MPICOMP_TOLERANCE"):
        environment_policy({"MPICOMP_TOLERANCE": "tight"})
    # the call's tolerance over the communicator's, the communicator's over the environment
    env = environment_policy({"MPICOMP_TOLERANCE": "1e-2"})
    pol = resolve(Policy(tolerance=1e-5), Policy(tolerance=1e-4), env=env)
    assert pol.tolerance == (1e-5, False)
    assert resolve(Policy(), Policy(), env=env).tolerance == (1e-2, False)


def test_conflicts_are_errors_and_none_turns_it_off():
    with pytest.raises(ValueError, match="only the errbound codec"):
        resolve(Policy(codec="bitplane", tolerance=1e-3), Policy(), environ={})
    with pytest.raises(ValueError, match="homomorphic"):
        resolve(Policy(algorithm="homomorphic", tolerance=1e-3), Policy(), environ={})
    pol = resolve(Policy(codec="errbound", tolerance="rel:1e-3"), Policy(), environ={})
    assert pol.codec.get_config() == {"id": "errbound", "tolerance": 1e-3, "relative": True}
    pol = resolve(Policy(codec="none", tolerance=1e-3), Policy(), environ={})
    assert not pol.enabled and pol.tolerance is None


def test_the_tolerance_divides_among_the_encodes():
    assert [tolerance.encodes(a, 4) for a in ("ring", "allgather", "hierarchical",
                                              "recursive_doubling")] == [4, 4, 4, 8]
    assert tolerance.encodes("ring", 1) == 1
    with pytest.raises(ValueError, match="homomorphic"):
        tolerance.encodes("homomorphic", 4)
    pol = resolve(Policy(tolerance="rel:1e-3"), Policy(), environ={})
    codec, total, text = tolerance.codec_for(pol, 8.0, 4)
    assert total == pytest.approx(8e-3) and codec.get_config() == {
        "id": "errbound", "tolerance": pytest.approx(2e-3), "relative": False}
    assert "4 encodes" in text
    codec, total, _ = tolerance.codec_for(pol, 0.0, 4)  # all zeros: exact
    assert total == 0 and codec.tolerance > 0


# -- every collective under mpiexec -----------------------------------------------------
def _inputs(kind: str, r: int, n: int, salt: int = 0) -> np.ndarray:
    from mpicomp.bench.gradients import gradients

    x = gradients(n, np.float32, seed=100 * salt + r).astype(np.float64)
    rng = np.random.default_rng(7 * salt + r)
    if kind == "zeros+subnormals":
        x[rng.random(n) < 0.4] = 0.0
        tiny = rng.random(n) < 0.05
        x[tiny] = 3e-41 * rng.standard_normal(int(tiny.sum()))  # float32 subnormals
    elif kind == "huge range":
        x *= 10.0 ** rng.integers(-20, 20, n)
    elif kind == "nan" and r == 0:
        x[n // 3] = np.nan
    return x.astype(np.float32)


def _bound(tol, inputs: list[np.ndarray]) -> float:
    """The call's tolerance as an absolute bound (relative: to the largest input)."""
    value, relative = Policy(tolerance=tol).tolerance
    return value * max(float(np.abs(v).max()) for v in inputs) if relative else value


def _check(name, got, want, bound, g=0.0, p=1):
    """``got`` within ``bound`` of ``want`` (float64), plus rounding of ``p`` additions of
    values up to ``g`` in total."""
    slack = p * float(np.finfo(np.float32).eps) * (g + bound) if p > 1 else 0.0
    err = float(np.abs(got.astype(np.float64) - want).max()) if got.size else 0.0
    assert err <= bound + slack, f"{name}: error {err:.3g} > bound {bound:.3g} + {slack:.3g}"


@pytest.mark.mpi
@pytest.mark.parametrize("tol", [1e-4, "rel:1e-3"], ids=["abs", "rel"])
@pytest.mark.parametrize("kind", ["real", "zeros+subnormals", "huge range", "nan"])
def test_every_collective_keeps_the_tolerance_on_every_rank(comm, tol, kind):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, tolerance=tol, threshold=0)
    x = _inputs(kind, r, N)
    every = comm.allgather(x)
    nan = kind == "nan"
    g = sum(float(np.abs(v).max()) for v in every)

    def reduction(name, got, plain, want_sum):
        if nan:  # plain on every rank: exactly what MPI gives
            np.testing.assert_array_equal(got, plain, err_msg=name)
        else:
            _check(name, got, want_sum, _bound(tol, every), g, p)

    exact = np.sum([v.astype(np.float64) for v in every], axis=0)
    plain_sum = np.empty(N, np.float32)
    comm.Allreduce(x, plain_sum)
    plain_reduce = np.zeros(N, np.float32)
    comm.Reduce(x, plain_reduce if r == 0 else None, root=0)
    for algorithm in ("auto", "ring", "allgather", "recursive_doubling", "hierarchical"):
        y = np.empty(N, np.float32)
        mc.Allreduce(x, y, algorithm=algorithm)
        reduction(f"Allreduce {algorithm}", y, plain_sum, exact)
        assert len(set(comm.allgather(y.tobytes()))) == 1, algorithm
    y = np.empty(N, np.float32)
    mc.Iallreduce(x, y).Wait()
    reduction("Iallreduce", y, plain_sum, exact)
    y = np.zeros(N, np.float32)
    mc.Reduce(x, y if r == 0 else None, root=0)
    if r == 0:
        reduction("Reduce", y, plain_reduce, exact)
    xb = _inputs(kind, r, p * N, salt=1)
    blocks_every = comm.allgather(xb)
    y = np.empty(N, np.float32)
    mc.Reduce_scatter_block(xb, y)
    if not nan:
        sums = np.sum([v.astype(np.float64) for v in blocks_every], axis=0)
        _check("Reduce_scatter_block", y, sums[r * N:(r + 1) * N], _bound(tol, blocks_every),
               sum(float(np.abs(v).max()) for v in blocks_every), p)
    # data movement: one encode per value
    z = np.empty(p * N, np.float32)
    mc.Allgather(x, z)
    movement = [("Allgather", z, np.concatenate(every), every)]
    z2 = np.empty(p * N, np.float32)
    mc.Iallgather(x, z2).Wait()
    movement.append(("Iallgather", z2, np.concatenate(every), every))
    counts = [N - 7 * i for i in range(p)]
    displs = [int(d) for d in np.cumsum([0] + counts[:-1])]
    zv = np.empty(sum(counts), np.float32)
    mc.Allgatherv(x[: counts[r]], [zv, counts, displs, MPI.FLOAT])
    movement.append(("Allgatherv", zv, np.concatenate([v[: counts[i]] for i, v in
                                                       enumerate(every)]),
                     [v[: counts[i]] for i, v in enumerate(every)]))
    a = np.empty(p * N, np.float32)
    mc.Alltoall(xb, a)
    movement.append(("Alltoall", a, np.concatenate([b[r * N:(r + 1) * N] for b in blocks_every]),
                     blocks_every))
    b = x.copy()
    mc.Bcast(b, root=p - 1)
    movement.append(("Bcast", b, every[p - 1], [every[p - 1]]))
    b2 = x.copy()
    mc.Ibcast(b2, root=0).Wait()
    movement.append(("Ibcast", b2, every[0], [every[0]]))
    gz = np.empty(p * N, np.float32) if r == 0 else None
    mc.Gather(x, gz, root=0)
    if r == 0:
        movement.append(("Gather", gz, np.concatenate(every), every))
    s = np.empty(N, np.float32)
    mc.Scatter(xb if r == 0 else None, s, root=0)
    movement.append(("Scatter", s, blocks_every[0][r * N:(r + 1) * N], [blocks_every[0]]))
    rcv = np.empty(N, np.float32)
    mc.Sendrecv(x, (r + 1) % p, 5, rcv, (r - 1) % p, 5)
    movement.append(("Sendrecv", rcv, every[(r - 1) % p], [every[(r - 1) % p]]))
    for name, got, want, inputs in movement:
        if nan and any(np.isnan(v).any() for v in inputs):
            np.testing.assert_array_equal(got, want, err_msg=name)  # plain: exact, NaN kept
        else:
            _check(name, got, want.astype(np.float64), _bound(tol, inputs))
    for name, got in (("Allgather", z), ("Iallgather", z2), ("Allgatherv", zv), ("Bcast", b),
                      ("Ibcast", b2)):  # every copy of a value the same bits (the owner's too)
        assert len(set(comm.allgather(got.tobytes()))) == 1, name
    st = mc.stats()
    if p > 1 and not nan:
        for name in ("Allreduce", "Allgather", "Alltoall", "Bcast", "Gather", "Scatter"):
            assert st[name]["compressed"] >= 1 and st[name]["error_bound"] > 0, (name, st[name])
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_the_default_threshold_and_one_node_still_compress(comm):
    """Given a tolerance and nothing else, a call above the default 64 KiB threshold is
    compressed on one node too (the codec auto would send it plain), and the debug line
    names the bound."""
    from mpicomp.bench.gradients import gradients

    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, tolerance=1e-5)
    x = gradients(1 << 16, np.float32, seed=r)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    mc.Allreduce(x[:100], y[:100])  # below the threshold: plain
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 1 and st["calls"] == 2
    assert st["error_bound"] == pytest.approx(1e-5)
    assert st["wire_bytes"] < 0.7 * x.nbytes * 2


@pytest.mark.mpi(min_size=2)
def test_the_model_learns_the_stream_ratio_on_every_rank_alike(comm):
    """A variable codec's stream ratio, measured by a blocking call and agreed at the next
    call of its kind, is the same number on every rank, the largest rank's measured ratio;
    comm.predict prices that kind at it (below the upper bound's price) and adds the
    size exchange; a nonblocking call neither learns nor uses it."""
    from mpicomp.bench.gradients import gradients
    from mpicomp.model import size_exchange

    r, p = comm.Get_rank(), comm.Get_size()
    mc = mpicomp.Comm(comm, tolerance=1e-4)
    n = 1 << 15
    x = gradients(n, np.float32, seed=r) * (1 + r)  # ranks' ratios differ
    y = np.empty(n * p, np.float32)
    decision = mc._predictor
    key = decision.ratios.key("Allgather", x.nbytes, x.dtype, False,
                              mc.resolved_policy().description)
    upper = mc.predict("Allgather", x.nbytes, np.float32)
    mc.Allgather(x, y)  # measures this rank's ratio
    assert decision.ratios.ratio(key) is None
    mine = decision.ratios.pending(key)
    assert 0 < mine < 0.5  # real gradients at 1e-4: well below the raw size
    mc.Allgather(x, y)  # agrees on it
    learned = decision.ratios.ratio(key)
    assert learned == max(comm.allgather(mine))
    assert comm.allgather(learned) == [learned] * p
    pred = mc.predict("Allgather", x.nbytes, np.float32)
    assert pred.compressed_s < upper.compressed_s
    assert size_exchange(decision.cal, "Allgather", "allgather", k=1) > 0  # (k: a Bcast's)
    # a nonblocking call of another size learns nothing
    z = np.empty(n // 2 * p, np.float32)
    for _ in range(2):
        mpicomp.Request.Waitall([mc.Iallgather(x[: n // 2], z)])
    half = decision.ratios.key("Allgather", x.nbytes // 2, x.dtype, False,
                               mc.resolved_policy().description)
    assert decision.ratios.ratio(half) is None and decision.ratios.pending(half) < 0
    comm.Barrier()
