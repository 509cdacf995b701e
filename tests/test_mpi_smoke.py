"""MPI smoke tests: run on every rank of every stage (serial = world of size 1).

Every rank makes the same collective calls in the same order and asserts only
after the last collective, so a failed assertion on one rank cannot leave the
others waiting in a collective.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from mpicomp.codecs import get_codec, registered_codecs


def sample(n: int, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(0, 100, n).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    return rng.standard_normal(n).astype(dt)


@pytest.mark.mpi
def test_allreduce_of_rank_ids(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    total = comm.allreduce(r)
    buf = np.array([r, 1], dtype=np.int64)
    res = np.empty_like(buf)
    comm.Allreduce(buf, res)
    assert total == p * (p - 1) // 2
    assert res.tolist() == [p * (p - 1) // 2, p]


@pytest.mark.mpi
def test_none_codec_stream_bcast_decodes_identically(comm):
    codec = get_codec("none")
    count, dtype = 10_000, np.dtype(np.float32)
    # the stream size is known from (count, dtype) alone: no size exchange
    nbytes = codec.encoded_nbytes(count, dtype)
    x = sample(count, dtype, seed=1234) if comm.rank == 0 else np.empty(count, dtype)
    stream = codec.encode(x) if comm.rank == 0 else np.empty(nbytes, dtype=np.uint8)
    comm.Bcast(x, root=0)
    comm.Bcast(stream, root=0)
    y = codec.decode(stream, count=count, dtype=dtype)
    digests = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    np.testing.assert_array_equal(y, x)  # on every rank
    assert len(set(digests)) == 1


@pytest.mark.mpi
@pytest.mark.parametrize("codec_id", registered_codecs())
def test_every_codec_decodes_identically_on_every_rank(comm, codec_id):
    codec = get_codec(codec_id)
    dtype = codec.dtypes[0]
    count = 4099
    nbytes = codec.encoded_nbytes(count, dtype)
    if comm.rank == 0:
        stream = codec.encode(sample(count, dtype, seed=7))
    else:
        stream = np.empty(nbytes, dtype=np.uint8)
    if codec.variable:  # the size first (at most nbytes), then that many bytes
        used = comm.bcast(stream.size if comm.rank == 0 else None, root=0)
        assert used <= nbytes
        stream = stream[:used]
    comm.Bcast(stream, root=0)
    y = codec.decode(stream, count=count, dtype=dtype)
    # encoding is deterministic too: every rank encodes the same input to the same bytes
    mine = codec.encode(sample(count, dtype, seed=7))
    decoded = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    encoded = comm.allgather(hashlib.sha256(mine.tobytes()).hexdigest())
    assert len(set(decoded)) == 1, decoded
    assert len(set(encoded)) == 1, encoded
    np.testing.assert_array_equal(mine, stream)


@pytest.mark.mpi(min_size=2)
def test_ring_exchange_of_encoded_streams(comm):
    codec = get_codec("none")
    p, r = comm.Get_size(), comm.Get_rank()
    count, dtype = 2048, np.dtype(np.float64)
    left, right = (r - 1) % p, (r + 1) % p
    send = codec.encode(sample(count, dtype, seed=r))
    recv = np.empty(codec.encoded_nbytes(count, dtype), dtype=np.uint8)
    comm.Sendrecv(send, dest=right, sendtag=11, recvbuf=recv, source=left, recvtag=11)
    got = codec.decode(recv, count=count, dtype=dtype)
    np.testing.assert_array_equal(got, sample(count, dtype, seed=left))


@pytest.mark.mpi
def test_a_compressed_allreduce_through_the_drop_in(comm):
    """mpicomp.Comm on every stage's world: one compressed Allreduce (plain on one rank),
    within its algorithm's bound of the exact sum, the same bits on every rank."""
    import mpicomp
    from mpicomp.algorithms import bounds

    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0)
    x = sample(4096, np.float32, seed=r)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    st = mc.stats()["Allreduce"]
    exact = sum(sample(4096, np.float32, seed=q).astype(np.float64) for q in range(p))
    digests = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    if p == 1:
        assert st["fallbacks"] == {"single rank": 1}
        np.testing.assert_array_equal(y, x)
        return
    assert st["compressed"] == 1, st
    (algorithm,) = st["algorithms"]
    c, a = bounds.codec_constants(mc.resolved_policy().codec, np.dtype(np.float32))
    g = sum(float(np.abs(sample(4096, np.float32, seed=q)).max()) for q in range(p))
    bound = bounds.allreduce_bound(algorithm, p, c, a, g, np.dtype(np.float32))
    assert float(np.abs(y - exact).max()) <= bound
    assert len(set(digests)) == 1
