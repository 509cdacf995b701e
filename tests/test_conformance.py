"""Drop-in conformance: what plain mpi4py accepts, mpicomp accepts and does the same.

One regression test per cause found by running mpi4py's own test suite with
``MPI.COMM_WORLD`` replaced (``tests/conformance/mpi4py_suite.py`` runs that
suite itself): CUDA interfaces over host memory, MPI datatypes other than
the array's dtype, every vector-spec form, short messages into longer
receive buffers, typecode datatypes, pickling ``mpicomp.COMM_WORLD``.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest
from mpi4py import MPI
from mpi4py.util import dtlib

import mpicomp
from mpicomp.backend import placement

COMPRESSING = {"codec": "bitplane", "rate": 16.25, "threshold": 0}


class HostArrayWithCudaInterface:
    """Host memory behind ``__cuda_array_interface__`` (as mpi4py's tests fake GPU arrays)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str,
            "data": (array.ctypes.data, False), "strides": None, "version": 3,
        }


def _policies():
    return [{}, {"codec": "none", "threshold": 0}, COMPRESSING]


@pytest.mark.mpi
@pytest.mark.parametrize("settings", _policies(), ids=["default", "none", "bitplane"])
def test_cuda_interface_over_host_memory_goes_to_mpi_as_given(comm, settings, monkeypatch):
    """Cause 1: without a usable CUDA device (this machine), or with one that says the pointer
    is host memory, a CUDA-interface buffer reaches MPI untouched (no kernel, no driver call)."""
    if placement.cuda_usable():
        pytest.skip("a CUDA device is usable here: covered by the host-pointer case below")
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, **settings)
    x = np.full(1000, r + 1, np.float32)
    y = np.zeros_like(x)
    mc.Allreduce(HostArrayWithCudaInterface(x), HostArrayWithCudaInterface(y))
    assert np.array_equal(y, np.full(1000, p * (p + 1) / 2, np.float32))
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 0 and st["calls"] == 1, st
    if settings.get("codec") == "bitplane" and p > 1:  # (one rank: "single rank" comes first)
        assert any("CUDA buffer interface" in k for k in st["fallbacks"]), st["fallbacks"]
    # point to point and Bcast too
    z = np.arange(10, dtype=np.float64) * (r + 1)
    got = np.zeros_like(z)
    mc.Sendrecv(HostArrayWithCudaInterface(z), (r + 1) % p, 5,
                HostArrayWithCudaInterface(got), (r - 1) % p, 5)
    assert np.array_equal(got, np.arange(10) * ((r - 1) % p + 1))
    b = np.full(7, r, np.float32)
    mc.Bcast(HostArrayWithCudaInterface(b), root=0)
    assert np.array_equal(b, np.zeros(7, np.float32))

    # with a CUDA device present but a host pointer: the same (CUDA is asked, no kernel runs)
    monkeypatch.setattr(placement, "cuda_usable", lambda: True)
    monkeypatch.setattr(placement, "memory_type", lambda ptr: "host")
    w = placement.of(HostArrayWithCudaInterface(x))
    assert w.place is placement.Place.FOREIGN and "host memory" in w.reason
    y[:] = 0
    mc.Allreduce(HostArrayWithCudaInterface(x), HostArrayWithCudaInterface(y))
    assert np.array_equal(y, np.full(1000, p * (p + 1) / 2, np.float32))


def test_placement_of_common_buffers():
    assert placement.of(np.zeros(3)).place is placement.Place.HOST
    assert placement.of(bytearray(3)).place is placement.Place.HOST
    assert placement.of(np.zeros(3)).on_device is False


@pytest.mark.mpi
@pytest.mark.parametrize("settings", _policies(), ids=["default", "none", "bitplane"])
def test_datatype_other_than_the_dtype_reaches_mpi(comm, settings):
    """Cause 2: a bool array sent with an indexed or struct datatype is MPI's business."""
    mc = mpicomp.Comm(comm, **settings)
    r = comm.Get_rank()
    base = MPI.BOOL
    indexed = base.Create_indexed([1, 2, 1], [0, 2, 5]).Commit()
    struct = MPI.Datatype.Create_struct([1, 1], [0, 2], [base, base]).Commit()
    try:
        for dt in (indexed, struct):
            lb, extent = dt.Get_extent()
            n = 3
            buf = np.zeros(n * extent, dtype=bool) if r else np.ones(n * extent, dtype=bool)
            ref = buf.copy()
            MPI.COMM_WORLD.Bcast([ref, n, dt], root=0)  # plain mpi4py, on a copy
            mine = buf.copy()
            mc.Bcast([mine, n, dt], root=0)
            assert np.array_equal(mine, ref)
        # float32 memory read as MPI_DOUBLE: MPI sums doubles, as plain mpi4py does
        x = np.arange(8, dtype=np.float32) + r
        out, ref = np.zeros_like(x), np.zeros_like(x)
        MPI.COMM_WORLD.Allreduce([x, MPI.DOUBLE], [ref, MPI.DOUBLE])
        mc.Allreduce([x, MPI.DOUBLE], [out, MPI.DOUBLE])
        assert out.tobytes() == ref.tobytes()
        assert mc.stats()["Allreduce"]["compressed"] == 0
    finally:
        indexed.Free()
        struct.Free()


def _vector_specs(rbuf: np.ndarray, p: int, count: int):
    """Every receive-spec form mpi4py accepts for an Allgatherv of ``count`` values per rank."""
    counts, displs = [count] * p, [i * count for i in range(p)]
    yield [rbuf, (count, count), MPI.FLOAT]          # one integer count and one stride
    yield (rbuf, (count, count), MPI.FLOAT)
    yield [rbuf, count]                              # one integer count, packed
    yield [rbuf, (counts, displs), MPI.FLOAT]
    yield [rbuf, counts, displs, MPI.FLOAT]
    yield [rbuf, counts, MPI.FLOAT]
    yield [rbuf, counts]
    yield [rbuf, MPI.FLOAT]                          # counts inferred from the buffer
    yield rbuf


@pytest.mark.mpi
@pytest.mark.parametrize("settings", _policies(), ids=["default", "none", "bitplane"])
def test_allgatherv_takes_every_vector_spec_form(comm, settings):
    """Cause 3: vector specs with one integer count and displacement, and the other forms."""
    mc = mpicomp.Comm(comm, **settings)
    p, r = comm.Get_size(), comm.Get_rank()
    count = 600
    x = np.full(count, r, np.float32)
    expected = np.repeat(np.arange(p, dtype=np.float32), count)
    for spec_of in range(9):
        rbuf = np.full(p * count, -1, np.float32)
        spec = list(_vector_specs(rbuf, p, count))[spec_of]
        mc.Allgatherv(x, spec)
        assert np.array_equal(rbuf, expected), (spec_of, settings)
    # a stride larger than the count leaves the gaps alone
    rbuf = np.full(p * (count + 2), -1, np.float32)
    mc.Allgatherv(x, [rbuf, (count, count + 2), MPI.FLOAT])
    for i in range(p):
        row = rbuf[i * (count + 2): (i + 1) * (count + 2)]
        assert np.array_equal(row[:count], np.full(count, i, np.float32))
        assert np.array_equal(row[count:], [-1, -1])


@pytest.mark.mpi
@pytest.mark.parametrize("settings", _policies(), ids=["default", "none", "bitplane"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "complex64"])
def test_sendrecv_short_message_into_longer_buffer(comm, settings, dtype):
    """Cause 4: s items received into s + 1 (legal MPI); the last item is left alone."""
    mc = mpicomp.Comm(comm, **settings)
    p, r = comm.Get_size(), comm.Get_rank()
    dest, source = (r + 1) % p, (r - 1) % p
    for s in (0, 1, 2, 5, 1000):
        v = s % 100
        sbuf = np.full(s, v, dtype=dtype)
        rbuf = np.full(s + 1, -1, dtype=dtype)
        status = MPI.Status()
        mc.Sendrecv(sbuf, dest, 0, rbuf, source, 0, status)
        assert np.array_equal(rbuf[:-1], np.full(s, v, dtype=dtype)), (s, rbuf[:4])
        assert rbuf[-1] == -1
        assert status.Get_count(MPI.BYTE) <= s * np.dtype(dtype).itemsize
        # the same with Send/Recv and a typed spec
        req = mc.Isend([sbuf, s, dtlib.from_numpy_dtype(dtype)], dest, 1)
        rbuf[:] = -1
        mc.Recv(rbuf, source, 1)
        req.Wait()
        assert np.array_equal(rbuf[:-1], np.full(s, v, dtype=dtype)) and rbuf[-1] == -1


@pytest.mark.mpi
def test_typecode_as_datatype(comm):
    """mpi4py takes a type character where a datatype goes: [buf, 'B'], [buf, 'f']."""
    mc = mpicomp.Comm(comm, **COMPRESSING)
    p, r = comm.Get_size(), comm.Get_rank()
    a = bytearray(b"xyz") if r == 0 else bytearray(3)
    mc.Bcast([a, "B"], root=0)
    assert a == bytearray(b"xyz")
    x = np.full(100, r, np.float32)
    y = np.zeros_like(x)
    mc.Allreduce([x, "f"], [y, "f"])
    assert np.array_equal(y, np.full(100, p * (p - 1) / 2, np.float32))


def test_comm_world_pickles_to_itself():
    world = mpicomp.COMM_WORLD
    assert pickle.loads(pickle.dumps(world)) is world
    dup = world.Dup()
    try:
        with pytest.raises(ValueError, match="cannot serialize"):
            pickle.dumps(dup)
    finally:
        dup.Free()
