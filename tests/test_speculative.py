"""Speculative screening of the ring and direct allreduces: the encoders find unsafe data while
it runs.

A compressed ring (or direct) allreduce of host buffers with a codec that has guarded
encodes (bitplane) skips the agreement step's scan of its input: every
value of a rank's input reaches an encode on that rank, the encoders count
the blocks that hold NaN/Inf or come near the dtype's range, and one small
nonblocking allreduce tells every rank whether any rank found one. Then the
call is sent plain from the untouched input (in place too) and counted with
the same reason the scan would have given.

These tests check the guarded encoder against the plain one, that unsafe
data in any form and on any rank gives plain MPI's exact result, that the
input is never written when it must stay intact, and that a safe call
really skips the scan.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.backend.host import HostMemory
from mpicomp.codecs import get_codec
from mpicomp.codecs.base import GUARD_HEADROOM
from mpicomp.codecs.bitplane import guard_exponent

CODEC = {"id": "bitplane", "rate": 8.25}
N = 1 << 20  # chunks of two or more pieces on up to 4 ranks (the path in pieces)
F32MAX = float(np.finfo(np.float32).max)


# -- the guarded encoder (serial) ---------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rate", [4.25, 8.25, 16.25])
def test_guarded_encode_writes_the_same_stream(dtype, rate):
    c = get_codec("bitplane", rate=rate)
    x = np.random.default_rng(1).standard_normal(100_003).astype(dtype) * 1e3
    out = np.empty(c.encoded_nbytes(x.size, x.dtype), np.uint8)
    assert c.encode_guarded(x, out) == 0
    assert np.array_equal(out, c.encode(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_guarded_encode_counts_unsafe_blocks(dtype):
    c = get_codec("bitplane", rate=8.25)
    info = np.finfo(dtype)
    bound = float(info.max) / GUARD_HEADROOM
    x = np.ones(32 * 10, dtype)
    out = np.empty(c.encoded_nbytes(x.size, x.dtype), np.uint8)
    x[3], x[40], x[70] = np.nan, np.inf, -np.inf  # blocks 0, 1, 2
    x[100] = bound  # block 3: could decode to about 2 x bound
    x[200] = bound / 4  # block 6: decodes below bound / 2
    assert c.encode_guarded(x, out) == 4
    x[200] = -bound / 1.5  # its magnitude needs the exponent of the bound
    assert c.encode_guarded(x, out) == 5
    # the limit: the largest block exponent whose values stay below the bound
    e = guard_exponent(np.dtype(dtype))
    bias = info.maxexp - 1
    assert 2.0 ** (e - bias + 1) <= bound < 2.0 ** (e - bias + 2)


def test_codecs_without_guards_say_so():
    c = get_codec("zfp", rate=16)
    assert not c.guards
    with pytest.raises(NotImplementedError, match="zfp"):
        c.encode_guarded(np.zeros(64, np.float32), np.empty(c.encoded_nbytes(64, np.float32),
                                                             np.uint8))


# -- the ring allreduce under mpiexec ---------------------------------------------
#: what each case places where, and the reason a refused call must be counted with
CASES = {
    "nan": (np.nan, "one", "nonfinite"),
    "-inf": (-np.inf, "one", "nonfinite"),
    "max": (F32MAX, "one", "overflow risk (max"),
    # finite inputs that pass the agreement's rule but whose sum comes near the range
    "sum near range": (None, "all", "overflow risk (an encoder met"),
    "subnormal": (1e-40, "one", None),
}


def _data(r: int, p: int, case: str, holder: int) -> np.ndarray:
    x = np.random.default_rng(500 + r).standard_normal(N).astype(np.float32)
    value, where, _ = CASES[case]
    pos = np.random.default_rng(9).integers(0, N, 3)
    if case == "sum near range":
        x[pos] = 0.99 * F32MAX / (GUARD_HEADROOM * p)  # p of them sum to 0.99 x the bound
    elif where == "all" or r == holder:
        x[pos] = value
    return x


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["ring", "direct"])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("case", list(CASES))
def test_unsafe_data_goes_plain(comm, plain, case, in_place, algorithm):
    p, r = comm.Get_size(), comm.Get_rank()
    runs = []  # checked after the last collective, so a failure leaves no rank waiting
    for holder in sorted({0, p - 1}):
        x = _data(r, p, case, holder)
        keep = x.copy()
        ref = np.empty_like(x)
        plain.Allreduce(x, ref)
        mc = mpicomp.Comm(comm, codec=CODEC, algorithm=algorithm, threshold=0)
        if in_place:
            y = x.copy()
            mc.Allreduce(MPI.IN_PLACE, y)
        else:
            y = np.empty_like(x)
            mc.Allreduce(x, y)
        runs.append((holder, x, keep, ref, y, mc.stats()["Allreduce"]))
    reason = CASES[case][2]
    for holder, x, keep, ref, y, st in runs:
        what = f"{case} on rank {holder}, {p} ranks"
        assert np.array_equal(x, keep, equal_nan=True), f"{what}: the send buffer changed"
        if reason is None:
            assert st["compressed"] == 1, (what, st["fallbacks"])
            g = float(sum(np.abs(_data(q, p, case, holder)).max() for q in range(p)))
            c, a = bounds.codec_constants(get_codec(CODEC), np.dtype(np.float32))
            err = float(np.abs(y.astype(np.float64) - ref).max())
            assert err <= p * (c * g + a) * 1.01 + p * 1.2e-7 * g, what
        else:
            assert st["compressed"] == 0 and st["calls"] == 1, (what, st)
            assert any(k.startswith(reason) for k in st["fallbacks"]), (what, st["fallbacks"])
            # sent plain from the intact input: plain MPI's own bits, NaN and Inf included
            assert np.array_equal(y, ref, equal_nan=True), what


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["ring", "direct"])
def test_a_safe_ring_skips_the_scan(comm, plain, monkeypatch, algorithm):
    """The speculative path is taken (the ring's, the direct algorithm's): no max |x| scan
    of the input on any rank, and the result is the same bits as with the scan (the
    screening does not change the stream)."""
    p, r = comm.Get_size(), comm.Get_rank()
    scans = []
    real = HostMemory.max_abs
    monkeypatch.setattr(HostMemory, "max_abs", lambda self, a: scans.append(a.size) or real(self, a))
    x = _data(r, p, "subnormal", -1)
    mc = mpicomp.Comm(comm, codec=CODEC, algorithm=algorithm, threshold=0)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    speculative_scans = list(scans)
    # zfp has no guarded encoder: its ring still scans first
    mz = mpicomp.Comm(comm, codec={"id": "zfp", "rate": 16}, algorithm="ring", threshold=0)
    mz.Allreduce(x, np.empty_like(x))
    zfp_scans = scans[len(speculative_scans):]
    # the unguarded reference: the same bits from the path with the scan
    monkeypatch.setattr(mpicomp.codecs.bitplane.BitplaneCodec, "guards", False)
    z = np.empty_like(x)
    mpicomp.Comm(comm, codec=CODEC, algorithm=algorithm, threshold=0).Allreduce(x, z)
    assert mc.stats()["Allreduce"]["compressed"] == 1
    assert speculative_scans == [], f"rank {r} scanned {speculative_scans}"
    assert zfp_scans == [N], f"rank {r}: zfp's ring scans its input once, got {zfp_scans}"
    assert np.array_equal(y, z)


# -- data movement: every rank's encodes are checked the same way ----------------------
M = 1 << 16  # values per block


#: the block of the holder's input that ``name`` sends compressed (Alltoall moves
#: the own block uncoded, so the block for the next rank)
SENT_BLOCK = {"Allgather": lambda h, p: h, "Gather": lambda h, p: 0,
              "Alltoall": lambda h, p: (h + 1) % p, "Scatter": lambda h, p: (h + 1) % p,
              "Bcast": lambda h, p: (h + 1) % p}


def _movement(name: str, p: int, r: int, special: float | None, holder: int) -> np.ndarray:
    """p blocks of M values; on the holder, the block ``name`` sends compressed holds
    ``special`` twice."""
    x = np.random.default_rng(700 + r).standard_normal(p * M).astype(np.float32)
    if special is not None and r == holder:
        b = SENT_BLOCK[name](holder, p)
        x[b * M + np.random.default_rng(3).integers(0, M, 2)] = special
    return x


def _run(name: str, c, x: np.ndarray, in_place: bool, p: int, r: int) -> np.ndarray:
    """One data-movement call on ``c``; returns what the rank ends with."""
    x = x.copy()
    mine = x[r * M : (r + 1) * M]
    if name == "Allgather":
        out = np.zeros(p * M, np.float32)
        if in_place:
            out[r * M : (r + 1) * M] = mine
            c.Allgather(MPI.IN_PLACE, out)
        else:
            c.Allgather(mine, out)
        return out
    if name == "Alltoall":
        if in_place:
            c.Alltoall(MPI.IN_PLACE, x)
            return x
        out = np.zeros_like(x)
        c.Alltoall(x, out)
        return out
    if name == "Gather":  # root 0; in place: the root's own block already in its out
        out = np.zeros(p * M, np.float32) if r == 0 else None
        if in_place and r == 0:
            out[:M] = x[:M]
            c.Gather(MPI.IN_PLACE, out, root=0)
        else:
            c.Gather(x[:M], out, root=0)
        return out if r == 0 else np.zeros(0, np.float32)
    if name == "Scatter":  # root 0 sends its p blocks
        if in_place and r == 0:
            c.Scatter(x, MPI.IN_PLACE, root=0)
            return x[:M]
        out = np.zeros(M, np.float32)
        c.Scatter(x if r == 0 else None, out, root=0)
        return out
    assert name == "Bcast"  # root 0's whole buffer
    c.Bcast(x, root=0)
    return x


MOVEMENT = ["Allgather", "Alltoall", "Gather", "Scatter", "Bcast"]


@pytest.mark.mpi
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("name", MOVEMENT)
def test_data_movement_with_unsafe_data_goes_plain(comm, plain, name, in_place):
    p, r = comm.Get_size(), comm.Get_rank()
    holder = 0  # the root of Gather's receiver, Scatter's and Bcast's sender
    runs = []
    for label, special in (("nan", np.nan), ("max", F32MAX), ("safe", None)):
        if name == "Gather" and special is not None:
            holder = p - 1  # a sender other than the root
        x = _movement(name, p, r, special, holder)
        keep = x.copy()
        mc = mpicomp.Comm(comm, codec=CODEC, threshold=0)
        y = _run(name, mc, x, in_place, p, r)
        ref = _run(name, plain, x, in_place, p, r)
        runs.append((label, x, keep, y, ref, mc.stats()[name]))
    for label, x, keep, y, ref, st in runs:
        what = f"{name} {label}, {p} ranks"
        assert np.array_equal(x, keep, equal_nan=True), f"{what}: the input changed"
        if label == "safe":
            assert st["compressed"] == 1, (what, st["fallbacks"])
            assert float(np.abs(y - ref).max(initial=0.0)) <= 2 ** -6 * 5, what
        else:
            want = "nonfinite" if label == "nan" else "overflow risk (max"
            assert st["compressed"] == 0, (what, st)
            assert any(k.startswith(want) for k in st["fallbacks"]), (what, st["fallbacks"])
            assert np.array_equal(y, ref, equal_nan=True), what


@pytest.mark.mpi(min_size=3)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_node_aware_alltoall_with_unsafe_data_goes_plain(comm, plain, monkeypatch, in_place):
    """Pretend nodes of two ranks (the layout replaced; the transfers real): the blocks
    within a node travel plain and land apart until the verdict, so an in-place call whose
    compressed blocks hold a NaN still sends its intact input plain."""
    from mpicomp import topology

    p, r = comm.Get_size(), comm.Get_rank()
    monkeypatch.setattr(topology, "layout",
                        lambda c: topology.Layout(tuple(i // 2 for i in range(c.Get_size()))))
    runs = []
    for special in (np.nan, None):
        x = np.random.default_rng(900 + r).standard_normal(p * M).astype(np.float32)
        if special is not None and r == 0:
            x[2 * M + 5] = special  # rank 0's block for rank 2: another node, compressed
        mc = mpicomp.Comm(comm, codec=CODEC, threshold=0, algorithm="hierarchical")
        y = _run("Alltoall", mc, x, in_place, p, r)
        ref = _run("Alltoall", plain, x, in_place, p, r)
        runs.append((special, y, ref, mc.stats()["Alltoall"]))
    for special, y, ref, st in runs:
        if special is None:
            assert st["algorithms"] == {"alltoall-hierarchical": 1}, st
            mine = [i for i in range(p) if i // 2 == r // 2]  # exact: plain or own
            for i in mine:
                assert np.array_equal(y[i * M:(i + 1) * M], ref[i * M:(i + 1) * M]), i
            assert float(np.abs(y - ref).max()) <= 2 ** -6 * 5
        else:
            assert st["compressed"] == 0 and "nonfinite" in " ".join(st["fallbacks"]), st
            assert np.array_equal(y, ref, equal_nan=True)
