"""Every host float buffer mpi4py accepts is compressed where a NumPy array would be.

``array.array('f')``, ``MPI.buffer`` and ``bytearray`` with a float datatype
in the spec, ``memoryview``, and objects with only a CPU ``__dlpack__``
(PyTorch CPU tensors reach MPI that way) are viewed as NumPy arrays without
a copy; the results are checked against plain MPI within the codec's bound,
and the stats must show the calls compressed.
"""
from __future__ import annotations

import array

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds
from mpicomp.buffers import parse

N = 1 << 12


class DLPackOnly:
    """A host tensor that offers only DLPack (no buffer protocol) and a ``dtype``, as a
    PyTorch CPU tensor."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.dtype = a.dtype

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _kinds(values: np.ndarray):
    """(name, send spec, receive spec, read the received values) for each kind of buffer."""
    f = values.astype(np.float32)

    def arr():
        return array.array("f", f.tobytes())

    def raw():
        return bytearray(f.tobytes())

    mem = MPI.buffer.allocate(f.nbytes)
    recv_np = np.empty_like(f)
    yield "array.array", arr(), (out := arr()), lambda: np.frombuffer(out, np.float32)
    yield "bytearray+FLOAT", [raw(), MPI.FLOAT], [(b := raw()), MPI.FLOAT], \
        lambda: np.frombuffer(b, np.float32)
    yield "MPI.buffer+count+FLOAT", [MPI.buffer(f.copy()), f.size, MPI.FLOAT], \
        [mem, f.size, MPI.FLOAT], lambda: np.frombuffer(mem, np.float32)
    yield "memoryview", memoryview(f.copy()), memoryview(recv_np), lambda: recv_np
    dl_out = np.empty_like(f)
    yield "dlpack", DLPackOnly(f.copy()), DLPackOnly(dl_out), lambda: dl_out


def test_views_share_memory():
    f = np.linspace(-1, 1, 64).astype(np.float32)
    for spec in (array.array("f", f.tobytes()), [bytearray(f.tobytes()), MPI.FLOAT],
                 DLPackOnly(f), memoryview(f)):
        b = parse(spec)
        assert b.compressible, b.reason
        assert b.dtype == np.float32 and b.count == f.size
        np.testing.assert_array_equal(b.data(), f)
    ba = bytearray(f.tobytes())
    parse([ba, MPI.FLOAT]).data()[0] = 5.0
    assert np.frombuffer(ba, np.float32)[0] == 5.0  # the same memory, no copy


def test_buffers_that_stay_plain_say_why():
    assert "without a float MPI datatype" in parse(bytearray(16)).reason
    assert "not a whole number" in parse([bytearray(10), MPI.FLOAT]).reason
    assert "int32 is not float32/float64" in parse(array.array("i", [1, 2])).reason
    assert "neither the buffer protocol nor __dlpack__" in parse(object()).reason
    untyped = DLPackOnly(np.ones(4, np.float32))
    del untyped.dtype
    assert "unknown dtype" in parse(untyped).reason
    assert parse([untyped, MPI.FLOAT]).compressible  # the spec's datatype types it


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("method", ["Allreduce", "Bcast", "Allgather"])
def test_host_buffers_compress(comm, method):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0)
    x = np.random.default_rng(r + 1).standard_normal(N)
    c, a = bounds.codec_constants(mc.resolved_policy().codec, np.dtype(np.float32))
    for name, send, recv, got in _kinds(x):
        mc.reset_stats()
        xs = x.astype(np.float32)
        if method == "Allreduce":
            mc.Allreduce(send, recv)
            exact = np.empty_like(xs)
            comm.Allreduce(xs, exact)
            g = comm.allreduce(float(np.abs(xs).max()))
            bound = bounds.allreduce_bound("ring", p, c, a, g, np.dtype(np.float32))
            result = got()
        elif method == "Bcast":
            mc.Bcast(send if r == 0 else recv, root=0)
            exact = comm.bcast(xs if r == 0 else None, root=0)
            bound = c * float(np.abs(exact).max()) + a
            result = got() if r else exact  # the root keeps its own input
        else:
            if name == "MPI.buffer+count+FLOAT":
                continue  # a receive count of N per rank needs a buffer of p * N
            out = np.empty(p * N, np.float32)
            mc.Allgather(send, out)
            exact = np.concatenate(comm.allgather(xs))
            bound = c * float(np.abs(exact).max()) + a
            result = out
        err = float(np.abs(result - exact).max())
        assert err <= bound, (name, err, bound)
        st = mc.stats()[method]
        assert st["compressed"] == 1, (name, st["fallbacks"])


@pytest.mark.mpi(min_size=2)
def test_point_to_point_host_buffers_compress(comm):
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0)
    x = np.random.default_rng(7).standard_normal(N)
    xs = x.astype(np.float32)
    c, a = bounds.codec_constants(mc.resolved_policy().codec, np.dtype(np.float32))
    for name, send, recv, got in _kinds(x):
        if r == 0:
            mc.Send(send, 1, tag=3)
            assert mc.stats()["Send"]["compressed"] >= 1, name
        elif r == 1:
            mc.Recv(recv, 0, tag=3)
            err = float(np.abs(got() - xs).max())
            assert err <= c * float(np.abs(xs).max()) + a, (name, err)
        mc.reset_stats()
