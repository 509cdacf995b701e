"""The staged path's copies (``mpicomp.backend.staging``) and the device's pieces.

Under Numba's CUDA simulator the staging copies run on a deferred stream
(``cuda_runtime.copy_stream``): a copy happens only when something waits for
a fence recorded after it, as on a GPU a copy is done only once waited for.
So these tests see the bytes MPI would see: a wait that is missing, or two
pieces sharing one stage, shows as wrong bytes here, not only on a GPU.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

import mpicomp
from mpicomp.algorithms import common
from mpicomp.algorithms.common import (
    DEVICE_MAX_PIECES,
    DEVICE_PIECE_BYTES,
    MAX_PIECES,
    PIECE_BYTES,
    pieces_of,
)
from mpicomp.backend.mpi_library import _detected
from mpicomp.codecs import get_codec
from mpicomp.kernels.jit import SIMULATOR

sys.path.insert(0, str(Path(__file__).parent))
from device_buffers import make, needs_device, read  # noqa: E402,F401
from real_like import gradient_like  # noqa: E402

BITPLANE = get_codec({"id": "bitplane", "rate": 8.25})


def test_device_pieces_are_few_and_large():
    """A chunk on a device is cut for the device: at most DEVICE_MAX_PIECES pieces of about
    DEVICE_PIECE_BYTES wire bytes (a 64 MiB Allreduce of 4 ranks made 192 host-sized
    pieces); host chunks keep theirs."""
    for mib in (1, 16, 64, 256, 1024):
        count = (mib << 20) // 4 // 4  # a chunk of one of 4 ranks, float32
        wire = BITPLANE.stream_nbytes(count, np.dtype(np.float32))
        k = pieces_of(BITPLANE, count, np.float32, device=True)
        assert 1 <= k <= DEVICE_MAX_PIECES
        assert k == max(1, min(DEVICE_MAX_PIECES, round(wire / DEVICE_PIECE_BYTES)))
        host = pieces_of(BITPLANE, count, np.float32)
        assert host == max(1, min(MAX_PIECES, round(wire / PIECE_BYTES)))
        assert k <= host
    # 64 MiB on 4 ranks: a 4.1 MiB chunk of wire bytes in 4 pieces, not 32
    assert pieces_of(BITPLANE, (64 << 20) // 16, np.float32, device=True) == 4
    assert pieces_of(BITPLANE, (64 << 20) // 16, np.float32) == MAX_PIECES


# -- the staging copies (each rank on its own, in the simulator stages) ------------------
def _staged_memory():
    from mpicomp.backend.device import DeviceMemory, DevicePools

    return DeviceMemory(DevicePools(), direct=False)


def _device(x):
    from numba import cuda

    return cuda.to_device(x)


@pytest.mark.mpi(min_size=1)
@pytest.mark.device
@pytest.mark.skipif(not SIMULATOR, reason="the deferred copy streams are the simulator's")
def test_a_staged_piece_reaches_its_wire_bytes_only_when_mpi_waits_for_it():
    """Two pieces encoded one after the other into one wire buffer: neither copy has
    happened before MPI waits (the deferred stream), each piece then holds its own
    stream (a stage shared by both would give the first piece the second's bytes), and a
    wait for one piece runs no copy after it."""
    memory = _staged_memory()
    codec = BITPLANE
    a, b = (gradient_like(1024, np.float32, seed=s) for s in (1, 2))
    nb = codec.stream_nbytes(a.size, np.dtype(np.float32))
    wire = memory.wire("t", 2 * nb)
    wire[:] = 0
    first = memory.encode(codec, _device(a), wire[:nb])
    second = memory.encode(codec, _device(b), wire[nb:])
    assert not wire.any(), "a staged copy ran before anything waited for it"
    memory.before_mpi([first])  # (as MPIOnDevice does before an Isend of it)
    assert bytes(first) == codec.encode(a).tobytes()
    assert not second.any(), "waiting for one piece ran the copy of the next"
    memory.before_mpi([second])
    assert bytes(second) == codec.encode(b).tobytes()


@pytest.mark.mpi(min_size=1)
@pytest.mark.device
@pytest.mark.skipif(not SIMULATOR, reason="the deferred copy streams are the simulator's")
def test_a_staged_decode_reads_the_bytes_received_before_it():
    """A piece's decode copies its wire bytes to its own stage on the copies to the device, and the
    kernel waits for that copy: the decoded values are the received stream's even when
    MPI then receives the next piece into the same wire bytes (the receive waits for the
    copy first)."""
    memory = _staged_memory()
    codec = BITPLANE
    a, b = (gradient_like(1024, np.float32, seed=s) for s in (3, 4))
    nb = codec.stream_nbytes(a.size, np.dtype(np.float32))
    wire = memory.wire("r", nb)
    out_a, out_b = (_device(np.zeros(a.size, np.float32)) for _ in range(2))
    wire[:] = np.frombuffer(codec.encode(a), np.uint8)  # (as a receive writes it)
    memory.decode(codec, wire, out_a)
    memory.before_mpi([wire])  # the next receive into the same bytes
    wire[:] = np.frombuffer(codec.encode(b), np.uint8)
    memory.decode(codec, wire, out_b)
    memory.synchronize()
    for out, x in ((out_a, a), (out_b, b)):
        np.testing.assert_array_equal(out.copy_to_host(),
                                      codec.decode(codec.encode(x), count=x.size, dtype=x.dtype))


@pytest.mark.mpi(min_size=1)
@pytest.mark.device
@pytest.mark.skipif(not SIMULATOR, reason="the deferred copy streams are the simulator's")
def test_memory_outside_the_wire_buffers_waits_for_every_copy():
    """MPI handed host memory the staging does not track (a size, a frame) waits for the
    stream and every staging copy, as every MPI call did before the copy streams."""
    memory = _staged_memory()
    a = gradient_like(512, np.float32, seed=5)
    nb = BITPLANE.stream_nbytes(a.size, np.dtype(np.float32))
    piece = memory.encode(BITPLANE, _device(a), memory.wire("s", nb))
    memory.before_mpi([np.zeros(1, np.int64)])
    assert bytes(piece) == BITPLANE.encode(a).tobytes()


# -- device pieces agreed across ranks ----------------------------------------------------
@pytest.mark.mpi(min_size=2)
@pytest.mark.device
@pytest.mark.parametrize("aware", ["0", "1"], ids=["staged", "cuda-aware"])
def test_ranks_with_host_and_device_buffers_cut_alike(comm, aware, monkeypatch):
    """The pieces of a device chunk differ from a host chunk's, so the agreement tells
    every rank whether any rank's buffers are on a device and all cut for it (MPI lets
    one rank pass host memory where another passes device memory). Rank 0 on the device,
    the others on the host, with device pieces made small (several a chunk) so that the
    two cuts differ: the same bits as every rank on the host (the codecs code each block
    on its own), where mismatched cuts would hang or mix pieces up."""
    if aware == "1" and not SIMULATOR and not _detected()[0]:
        pytest.skip("MPI is not CUDA-aware")
    monkeypatch.setenv("MPICOMP_CUDA_AWARE", aware)
    monkeypatch.setattr(common, "DEVICE_PIECE_BYTES", 512)
    config = {"id": "cast", "dtype": "bfloat16"}
    r = comm.Get_rank()
    n = 4096 * comm.Get_size() + 37
    x = gradient_like(n, np.float32, seed=20 + r)
    assert pieces_of(get_codec(config), n // comm.Get_size(), np.float32, device=True) > 1
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm="ring")
    y_host = np.empty_like(x)
    mc.Allreduce(x, y_host)
    kind = "numba" if r == 0 else "host"
    dx, dy = make(x, kind), make(np.full(n, np.nan, np.float32), kind)
    mc.Allreduce(dx, dy)
    y = read(dy, kind)
    np.testing.assert_array_equal(y, y_host)
    digests = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    assert len(set(digests)) == 1
    assert mc.stats()["Allreduce"]["compressed"] == 2


@pytest.mark.mpi(min_size=2)
@pytest.mark.device
@pytest.mark.skipif(not SIMULATOR, reason="the deferred copy streams are the simulator's")
def test_a_send_of_a_piece_whose_copy_runs_waits_for_it_in_order(comm):
    """An Isend of wire bytes whose copy to the host still runs is handed to MPI only once
    the copy is done (the host goes on meanwhile), in the order of the sends: rank 0's two
    pieces reach rank 1 as their codec's streams, in order, after rank 0's waits."""
    from mpi4py import MPI

    from mpicomp.backend.device import DeferredSend

    memory = _staged_memory()
    dup = comm.Dup()
    try:
        mpi = memory.mpi_comm(dup)
        xs = [gradient_like(1024, np.float32, seed=s) for s in (7, 8)]
        streams = [BITPLANE.encode(x).tobytes() for x in xs]
        nb = len(streams[0])
        if comm.Get_rank() == 0:
            wire = memory.wire("send", 2 * nb)
            sends = []
            for i, x in enumerate(xs):
                piece = memory.encode(BITPLANE, _device(x), wire[i * nb:(i + 1) * nb])
                sends.append(mpi.Isend(piece, 1, 5))
                assert isinstance(sends[i], DeferredSend)
                assert sends[i].request is None, "a send started before its copy was done"
            MPI.Request.Waitall(mpi.started(sends))
            assert all(s.request is not None for s in sends)
        elif comm.Get_rank() == 1:
            got = [np.empty(nb, np.uint8) for _ in xs]
            for g in got:
                dup.Recv(g, 0, 5)
            assert [g.tobytes() for g in got] == streams
    finally:
        dup.Free()
