"""Non-finite values and extremes in every codec and every compressed method (host buffers).

NaN, +Inf, -Inf, the largest finite float, a subnormal and -0.0, placed on
one rank at a random position among Gaussian values. The result is
compared with plain MPI's on the same data: non-finite values come out
exactly where plain MPI puts them, and finite values are never silently
corrupted: a call that cannot compress safely (NaN/Inf anywhere, a sum that
could overflow) goes to plain MPI and is counted with its reason, and one
that compresses (subnormals, -0.0) stays within the codec's error bound.
The table in docs/reliability.md is this test's outcome.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.codecs import get_codec

CODECS = {
    "bitplane": {"id": "bitplane", "rate": 8.25},
    "zfp": {"id": "zfp", "rate": 16},
    "bfloat16": {"id": "cast", "dtype": "bfloat16"},
    "float16": {"id": "cast", "dtype": "float16"},
}
SPECIALS = {
    "nan": np.nan, "+inf": np.inf, "-inf": -np.inf,
    "max": float(np.finfo(np.float32).max), "subnormal": 1e-40, "-0.0": -0.0,
}
#: specials a compressed call must refuse (plain MPI, with this reason)
REFUSED = {"nan": "nonfinite", "+inf": "nonfinite", "-inf": "nonfinite", "max": "overflow"}
N = 4080  # divisible by 2, 3, 4, 5, 6 and 8 ranks


def _data(r: int, special: str, holder: int, n: int = N) -> np.ndarray:
    x = np.random.default_rng(100 + r).standard_normal(n).astype(np.float32)
    if r == holder:
        pos = np.random.default_rng(7).integers(0, n, 3)
        x[pos] = SPECIALS[special]
    return x


def _check(mine: np.ndarray, ref: np.ndarray, codec: dict, g: float, p: int, what: str):
    """``g``: the magnitude the error scales with (sum of the ranks' max |x| for a reduction,
    max |x| for data movement); ``p``: the summands (0 for data movement)."""
    bad = ~np.isfinite(ref)
    assert np.array_equal(np.isnan(mine), np.isnan(ref)), f"{what}: NaN positions differ"
    assert np.array_equal(mine[bad & ~np.isnan(ref)], ref[bad & ~np.isnan(ref)]), \
        f"{what}: Inf values differ"
    fin = ~bad
    assert np.all(np.isfinite(mine[fin])), f"{what}: a finite value came out non-finite"
    err = np.abs(mine[fin].astype(np.float64) - ref[fin])
    consts = bounds.codec_constants(get_codec(codec), np.dtype(np.float32))
    c, a = consts if consts is not None else (1e-3, 0.0)  # zfp 16: measured, not a bound
    limit = (p + 1) * (c * g + a) * 1.01 + p * float(np.finfo(np.float32).eps) * g
    assert err.size == 0 or err.max() <= limit, f"{what}: error {err.max():.3g} > {limit:.3g}"


def _reason_counted(mc, method: str, special: str):
    fallbacks = mc.stats()[method]["fallbacks"]
    if special in REFUSED:
        assert any(k.startswith(REFUSED[special]) for k in fallbacks), (method, fallbacks)
        assert mc.stats()[method]["compressed"] == 0


@pytest.mark.mpi
@pytest.mark.parametrize("special", list(SPECIALS))
@pytest.mark.parametrize("codec", list(CODECS))
def test_reductions(comm, plain, codec, special):
    p, r = comm.Get_size(), comm.Get_rank()
    holder = p - 1
    x = _data(r, special, holder)
    g = float(sum(np.abs(_data(q, "subnormal", -1)).max() for q in range(p))) + 1.0
    ops = [MPI.SUM] + ([MPI.MAX, MPI.MIN] if CODECS[codec]["id"] == "cast" else [])
    for op in ops:
        mc = mpicomp.Comm(comm, codec=CODECS[codec], threshold=0)
        y, ref = np.empty_like(x), np.empty_like(x)
        mc.Allreduce(x, y, op=op)
        plain.Allreduce(x, ref, op=op)
        _check(y, ref, CODECS[codec], g, p, f"Allreduce {op} {codec} {special}")
        _reason_counted(mc, "Allreduce", special)
    mc = mpicomp.Comm(comm, codec=CODECS[codec], threshold=0)
    y, ref = np.empty_like(x), np.empty_like(x)
    mc.Iallreduce(x, y).Wait()
    plain.Allreduce(x, ref)
    _check(y, ref, CODECS[codec], g, p, f"Iallreduce {codec} {special}")
    _reason_counted(mc, "Iallreduce", special)
    y, ref = np.empty_like(x), np.empty_like(x)
    mc.Reduce(x, y, root=0)
    plain.Reduce(x, ref, root=0)
    if r == 0:
        _check(y, ref, CODECS[codec], g, p, f"Reduce {codec} {special}")
    m = N // p
    y, ref = np.empty(m, np.float32), np.empty(m, np.float32)
    mc.Reduce_scatter_block(x[: m * p], y)
    plain.Reduce_scatter_block(x[: m * p], ref)
    _check(y, ref, CODECS[codec], g, p, f"Reduce_scatter_block {codec} {special}")
    _reason_counted(mc, "Reduce_scatter_block", special)


@pytest.mark.mpi
@pytest.mark.parametrize("special", list(SPECIALS))
@pytest.mark.parametrize("codec", list(CODECS))
def test_data_movement(comm, plain, codec, special):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=CODECS[codec], threshold=0)
    holder = 0  # the root of Bcast/Scatter holds the specials
    x = _data(r, special, holder)
    g = float(np.abs(np.nan_to_num(x, posinf=0, neginf=0)).max()) + 1.0
    g = comm.allreduce(g, op=MPI.MAX)
    cases = [
        ("Allgather", lambda c, out: c.Allgather(x, out), N * p),
        ("Alltoall", lambda c, out: c.Alltoall(x, out), N),
        ("Gather", lambda c, out: c.Gather(x, out, root=0), N * p),
        ("Scatter", lambda c, out: c.Scatter(np.tile(x, p) if r == 0 else None, out,
                                              root=0), N),
    ]
    for name, run, size in cases:
        y, ref = np.zeros(size, np.float32), np.zeros(size, np.float32)
        run(mc, y)
        run(plain, ref)
        if name != "Gather" or r == 0:
            _check(y, ref, CODECS[codec], g, 0, f"{name} {codec} {special}")
    b, ref = x.copy(), x.copy()
    mc.Bcast(b, root=0)
    plain.Bcast(ref, root=0)
    _check(b, ref, CODECS[codec], g, 0, f"Bcast {codec} {special}")
    # point to point: a ring of sends
    y = np.empty_like(x)
    req = mc.Isend(x, (r + 1) % p, tag=9)
    mc.Recv(y, (r - 1) % p, 9)
    req.Wait()
    ref = _data((r - 1) % p, special, holder)
    _check(y, ref, CODECS[codec], g, 0, f"Send/Recv {codec} {special}")
    if (r - 1) % p == holder:  # the sender refused to compress: plain data arrived
        sent = mc.stats()["Isend"]
        assert sent["calls"] == 1
