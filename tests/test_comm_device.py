"""Device (CUDA) buffers through the communicator: every method, both MPI paths.

Where the behaviour is the same on host and device buffers, a test runs over
both (the ``where`` fixture: host memory, then each device kind with each MPI
path, as mpi4py's tests run over its ``arrayimpl`` array types); the host
case runs in the ordinary MPI stages. The device cases are marked ``device``
and run wherever device arrays exist:

* on a machine with a GPU (``make test-gpu``): CuPy arrays and Numba device
  arrays, and the results must be bitwise identical to the host path's;
* without one, under Numba's CUDA simulator (``make test`` runs the stage
  ``sim2``, a test marked ``pairwise`` with its cases that hold every pair of
  parameter values; ``make test-device`` ``sim2`` and ``sim3`` with every case:
  ``NUMBA_ENABLE_CUDASIM=1 mpiexec -n 2|3``). There
  the kernels are the simulated GPU kernels, and device memory is host
  memory: handed to MPI through ``__cuda_array_interface__`` it takes the
  same device-pointer path into mpi4py as on a GPU. Buffers are Numba
  simulator arrays and, for the ``cai`` kind, plain host memory behind
  ``__cuda_array_interface__`` (as any foreign CUDA array reaches us).

Each test runs with ``MPICOMP_CUDA_AWARE=1`` (streams handed to MPI on the
device) and ``=0`` (staged through pinned host buffers); ``comm.stats()``
must say which ran. Lossy results are checked against the exact sum with
the bound of ``mpicomp.algorithms.bounds``.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp.algorithms import bounds, homomorphic
from mpicomp.backend.mpi_library import _detected
from mpicomp.codecs import get_codec
from mpicomp.kernels.jit import SIMULATOR

sys.path.insert(0, str(Path(__file__).parent))
from device_buffers import (  # noqa: E402,F401
    BACKENDS,
    KINDS,
    make,
    needs_device,
    read,
    to_device,
    to_host,
)
from real_like import exact_sum, gradient_like  # noqa: E402

pytestmark = pytest.mark.mpi(min_size=2)
device = pytest.mark.device

LABEL = {"1": "device, CUDA-aware MPI", "0": "device, staged through pinned host"}
PLAIN_LABEL = {"1": "device, CUDA-aware MPI", "0": "device, staged through host (plain data)"}
N = 2048 + 37  # a partial last block for every codec


@pytest.fixture(params=["1", "0"], ids=["cuda-aware", "staged"])
def aware(request, monkeypatch):
    """``MPICOMP_CUDA_AWARE`` for the test. On a GPU, device pointers handed to an MPI that
    is not CUDA-aware make it read device memory as host memory (a crash, not an error):
    there "1" runs only where the library says it is CUDA-aware. In the simulator device
    memory is host memory, and both paths run."""
    if request.param == "1" and not SIMULATOR:
        detected, how = _detected()
        if not detected:
            pytest.skip(f"MPI is not CUDA-aware ({how})")
    monkeypatch.setenv("MPICOMP_CUDA_AWARE", request.param)
    return request.param


def _where_params() -> list:
    """Host memory, then every device kind with each MPI path (marked ``device``)."""
    out = []
    for b in BACKENDS:
        kind = b.values[0]
        if kind == "host":
            out.append(pytest.param((kind, None), id="host"))
        else:
            out += [pytest.param((kind, a), id=f"{kind}-{name}", marks=b.marks)
                    for a, name in (("1", "cuda-aware"), ("0", "staged"))]
    return out


@pytest.fixture(params=_where_params())
def where(request, monkeypatch):
    """(kind, the memory label its compressed calls report, the label of its plain calls):
    a buffer kind of ``device_buffers`` and, for a device kind, ``MPICOMP_CUDA_AWARE``
    (set as the ``aware`` fixture sets it)."""
    kind, aware = request.param
    if aware is None:
        return kind, "host", "host"
    if aware == "1" and not SIMULATOR:
        detected, how = _detected()
        if not detected:
            pytest.skip(f"MPI is not CUDA-aware ({how})")
    monkeypatch.setenv("MPICOMP_CUDA_AWARE", aware)
    return kind, LABEL[aware], PLAIN_LABEL[aware]


def check_sum(comm, config, algorithm, x, y):
    """``y`` (the compressed sum of every rank's ``x``) within the bound, same bits everywhere."""
    p = comm.Get_size()
    digests = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    assert len(set(digests)) == 1, "ranks disagree bitwise"
    c, a = bounds.codec_constants(get_codec(config), x.dtype)
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    bound = bounds.allreduce_bound(algorithm, p, c, a, g, x.dtype)
    err = float(np.abs(y.astype(np.float64) - exact_sum(comm, x)).max())
    assert err <= bound, f"max error {err:.3g} > bound {bound:.3g}"


def host_result(comm, config, algorithm, x):
    """The host path's Allreduce of ``x`` (only where the CPU codecs run: not in the simulator)."""
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm=algorithm)
    y = np.empty_like(x)
    mc.Allreduce(x, y)
    return y


def _allreduce_params() -> list:
    """(dtype, config, algorithm) of :func:`test_allreduce`: every combination. CI's
    simulator stage runs a set holding every pair of the parameters (the buffer kind and
    the MPI path among them: the ``pairwise`` marker); ``make test-device`` and a GPU every
    case."""
    dtypes = [(np.float32, "f32"), (np.float64, "f64")]
    configs = [({"id": "bitplane", "rate": 8.25}, "bitplane8"),
               ({"id": "cast", "dtype": "bfloat16"}, "bf16"),
               ({"id": "errbound", "tolerance": 1e-3}, "errbound")]
    algorithms = ["allgather", "ring", "direct", "recursive_doubling"]
    return [pytest.param(dtype, config, algorithm, id=f"{algorithm}-{cname}-{dname}")
            for algorithm in algorithms for config, cname in configs
            for dtype, dname in dtypes]


@pytest.mark.pairwise
@pytest.mark.parametrize(("dtype", "config", "algorithm"), _allreduce_params())
def test_allreduce(comm, where, dtype, config, algorithm):
    kind, label, _ = where
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm=algorithm)
    x = gradient_like(N, dtype, seed=10 + r)
    dx, dy = make(x, kind), make(np.full(N, np.nan, dtype), kind)
    mc.Allreduce(dx, dy)
    y = read(dy, kind)
    check_sum(comm, config, algorithm, x, y)
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 1 and st["algorithms"] == {algorithm: 1}
    assert st["memory"] == {label: 1}
    np.testing.assert_array_equal(read(dx, kind), x)  # the send buffer is untouched
    if not SIMULATOR and kind != "host":
        np.testing.assert_array_equal(y, host_result(comm, config, algorithm, x))


@device
@pytest.mark.parametrize("config", [{"id": "zfp", "rate": 16, "dims": 1},
                                    {"id": "zfp", "rate": 12, "dims": 3}], ids=["1d", "3d"])
def test_allreduce_zfp_in_place(comm, aware, config):
    """zfp has no pointwise bound: the result must be close and identical on all ranks."""
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm="ring")
    x = gradient_like(N, np.float32, seed=20 + r)
    d = to_device(x, KINDS[0])
    mc.Allreduce(MPI.IN_PLACE, d)
    y = to_host(d)
    digests = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    assert len(set(digests)) == 1
    exact = exact_sum(comm, x)
    rel = np.abs(y - exact).max() / np.abs(exact).max()
    assert rel < 2.0 ** -(config["rate"] - 8), rel
    assert mc.stats()["Allreduce"]["memory"] == {LABEL[aware]: 1}
    if not SIMULATOR:
        np.testing.assert_array_equal(y, host_result(comm, config, "ring", x))


@device
def test_allreduce_max_with_cast(comm, aware):
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec={"id": "cast", "dtype": "float16"}, threshold=0)
    x = gradient_like(N, np.float32, seed=30 + r)
    dx, dy = to_device(x, KINDS[0]), to_device(np.zeros(N, np.float32), KINDS[0])
    mc.Allreduce(dx, dy, op=MPI.MAX)
    exact = np.empty_like(x)
    comm.Allreduce(x, exact, op=MPI.MAX)
    want = exact.astype(np.float16).astype(np.float32)  # the cast of the max, exactly
    np.testing.assert_array_equal(to_host(dy), want)
    assert mc.stats()["Allreduce"]["algorithms"] == {"cast_order": 1}


@device
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_homomorphic_on_device(comm, aware, dtype):
    """GPU fixed-point kernels; exponents and packed words staged for MPI's host-side op."""
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, rate=16, threshold=0, algorithm="homomorphic")
    x = gradient_like(N, dtype, seed=40 + r)
    x[64:128] = 0.0  # an all-zero block
    dx, dy = to_device(x, KINDS[0]), to_device(np.zeros(N, dtype), KINDS[0])
    mc.Allreduce(dx, dy)
    y = to_host(dy)
    digests = comm.allgather(hashlib.sha256(y.tobytes()).hexdigest())
    assert len(set(digests)) == 1, "ranks disagree bitwise"
    fmt = homomorphic.choose_format(16, p)
    nblocks = -(-N // homomorphic.BLOCK)
    peak = np.zeros(nblocks * homomorphic.BLOCK)
    peak[:N] = np.abs(x.astype(np.float64))
    m = peak.reshape(nblocks, homomorphic.BLOCK).max(axis=1)
    exps = np.where(m > 0, np.frexp(m)[1], -32768).astype(np.int16)
    gexps = np.empty_like(exps)
    comm.Allreduce(exps, gexps, op=MPI.MAX)
    bound = bounds.homomorphic_bound(p, fmt.q_max, gexps, y)
    err = np.abs(y.astype(np.float64) - exact_sum(comm, x))
    assert np.all(err <= bound), f"worst excess {float((err - bound).max()):.3g}"
    st = mc.stats()["Allreduce"]
    assert st["algorithms"] == {"homomorphic": 1}
    assert st["memory"] == {"device, staged through pinned host": 1}
    if not SIMULATOR:
        host = mpicomp.Comm(comm, rate=16, threshold=0, algorithm="homomorphic")
        want = np.empty_like(x)
        host.Allreduce(x, want)
        np.testing.assert_array_equal(y, want)


def test_nonfinite_goes_plain_and_exact(comm, where):
    """A NaN on one rank: every rank sends its buffer uncompressed; MPI's exact sum."""
    kind, _, plain_label = where
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=0)
    x = gradient_like(N, np.float32, seed=50 + r)
    if r == 1:
        x[7] = np.nan
    dx, dy = make(x, kind), make(np.zeros(N, np.float32), kind)
    mc.Allreduce(dx, dy)
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    np.testing.assert_array_equal(read(dy, kind), want)
    st = mc.stats()["Allreduce"]
    assert st["compressed"] == 0
    assert st["fallbacks"] == {"nonfinite (NaN or Inf on some rank)": 1}
    assert st["memory"] == {plain_label: 1}


def test_unsupported_dtype_goes_plain(comm, where):
    kind = where[0]
    r, p = comm.Get_rank(), comm.Get_size()
    mc = mpicomp.Comm(comm, codec="bitplane", threshold=0)
    x = np.arange(N, dtype=np.int32) + r
    dx, dy = make(x, kind), make(np.zeros(N, np.int32), kind)
    mc.Allreduce(dx, dy)
    np.testing.assert_array_equal(read(dy, kind),
                                  np.arange(N, dtype=np.int32) * p + p * (p - 1) // 2)
    assert mc.stats()["Allreduce"]["fallbacks"] == {"dtype int32 is not float32/float64": 1}


def test_reduce_and_reduce_scatter(comm, where):
    kind, label, _ = where
    p, r = comm.Get_size(), comm.Get_rank()
    config = {"id": "bitplane", "rate": 12.25}
    mc = mpicomp.Comm(comm, codec=config, threshold=0)
    n = 64 * 7 * p
    x = gradient_like(n, np.float32, seed=60 + r)
    dx = make(x, kind)
    dy = make(np.zeros(n, np.float32), kind) if r == 0 else None
    mc.Reduce(dx, dy, root=0)
    c, a = bounds.codec_constants(get_codec(config), x.dtype)
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    bound = bounds.allreduce_bound("ring", p, c, a, g, x.dtype)
    exact = exact_sum(comm, x)
    if r == 0:
        assert np.abs(read(dy, kind) - exact).max() <= bound
    ds = make(np.zeros(n // p, np.float32), kind)
    mc.Reduce_scatter_block(dx, ds)
    part = exact[r * (n // p) : (r + 1) * (n // p)]
    assert np.abs(read(ds, kind) - part).max() <= bound
    for name in ("Reduce", "Reduce_scatter_block"):
        assert mc.stats()[name]["memory"] == {label: 1}, name
    # the direct reduce-scatter: the same bits as on the host
    mc.Reduce_scatter_block(dx, ds, algorithm="allgather")
    host = np.zeros(n // p, np.float32)
    mc.Reduce_scatter_block(x, host, algorithm="allgather")
    np.testing.assert_array_equal(read(ds, kind), host)


def within_codec(config, got: np.ndarray, want: np.ndarray) -> None:
    c, a = bounds.codec_constants(get_codec(config), want.dtype)
    err = np.abs(got.astype(np.float64) - want)
    assert float(err.max()) <= c * float(np.abs(want).max()) + a


@pytest.mark.pairwise
@pytest.mark.parametrize("config", [{"id": "bitplane", "rate": 10.25},
                                    {"id": "errbound", "tolerance": 1e-3}],
                         ids=["bitplane10", "errbound"])
def test_data_movement(comm, where, config):
    """Allgather, Allgatherv, Alltoall, Bcast, Gather, Scatter (errbound: variable-size
    streams, sizes exchanged where MPI needs them)."""
    kind, label, _ = where
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=config, threshold=0)
    n = 500
    x = gradient_like(n, np.float32, seed=70 + r)
    everyone = np.concatenate([gradient_like(n, np.float32, seed=70 + i) for i in range(p)])

    d = make(np.zeros(n * p, np.float32), kind)
    mc.Allgather(make(x, kind), d)
    within_codec(config, read(d, kind), everyone)

    counts = [n - 3 * i for i in range(p)]
    displs = [int(v) for v in np.cumsum([0] + counts[:-1])]
    d = make(np.zeros(sum(counts), np.float32), kind)
    mc.Allgatherv(make(x[: counts[r]], kind), [d, counts, displs, MPI.FLOAT])
    want = np.concatenate([everyone[i * n : i * n + counts[i]] for i in range(p)])
    within_codec(config, read(d, kind), want)

    blocks = gradient_like(n * p, np.float32, seed=80 + r)
    d = make(np.zeros(n * p, np.float32), kind)
    mc.Alltoall(make(blocks, kind), d)
    want = np.concatenate([gradient_like(n * p, np.float32, seed=80 + i)[r * n : (r + 1) * n]
                           for i in range(p)])
    within_codec(config, read(d, kind), want)

    d = make(x if r == 1 else np.zeros(n, np.float32), kind)
    mc.Bcast(d, root=1)
    within_codec(config, read(d, kind), gradient_like(n, np.float32, seed=71))

    d = make(np.zeros(n * p, np.float32), kind) if r == 0 else None
    mc.Gather(make(x, kind), d, root=0)
    if r == 0:
        within_codec(config, read(d, kind), everyone)

    src = make(everyone, kind) if r == 0 else None
    d = make(np.zeros(n, np.float32), kind)
    mc.Scatter(src, d, root=0)
    within_codec(config, read(d, kind), x)

    stats = mc.stats()
    for name in ("Allgather", "Allgatherv", "Alltoall", "Bcast", "Gather", "Scatter"):
        assert stats[name]["compressed"] == 1, name
        assert stats[name]["memory"] == {label: 1}, name


def test_nonblocking(comm, where):
    kind, label, _ = where
    p, r = comm.Get_size(), comm.Get_rank()
    config = {"id": "bitplane", "rate": 8.25}
    mc = mpicomp.Comm(comm, codec=config, threshold=0, algorithm="ring")
    x = gradient_like(N, np.float32, seed=90 + r)
    dx, dy = make(x, kind), make(np.zeros(N, np.float32), kind)
    dg = make(np.zeros(N * p, np.float32), kind)
    reqs = [mc.Iallreduce(dx, dy), mc.Iallgather(dx, dg)]
    for q in reqs:
        q.Wait()
    check_sum(comm, config, "ring", x, read(dy, kind))
    everyone = np.concatenate([gradient_like(N, np.float32, seed=90 + i) for i in range(p)])
    within_codec(config, read(dg, kind), everyone)
    stats = mc.stats()
    assert stats["Iallreduce"]["memory"] == {label: 1}
    assert stats["Iallgather"]["memory"] == {label: 1}


def test_reduce_scatter_and_nonblocking_movement(comm, where, capfd, monkeypatch):
    """Reduce_scatter with counts, Ialltoall, Ibcast; the MPICOMP_DEBUG line names the path."""
    kind, label, _ = where
    p, r = comm.Get_size(), comm.Get_rank()
    monkeypatch.setenv("MPICOMP_DEBUG", "1")
    config = {"id": "bitplane", "rate": 12.25}
    mc = mpicomp.Comm(comm, codec=config, threshold=0)
    counts = [64 * (3 + i) + 5 * i for i in range(p)]
    total = sum(counts)
    x = gradient_like(total, np.float64, seed=110 + r)
    d = make(np.zeros(counts[r], np.float64), kind)
    mc.Reduce_scatter(make(x, kind), d, counts)
    exact = exact_sum(comm, x)
    c, a = bounds.codec_constants(get_codec(config), x.dtype)
    g = comm.allreduce(float(np.abs(x).max()), op=MPI.SUM)
    bound = bounds.allreduce_bound("ring", p, c, a, g, x.dtype)
    start = sum(counts[:r])
    assert np.abs(read(d, kind) - exact[start : start + counts[r]]).max() <= bound

    n = 300
    blocks = gradient_like(n * p, np.float64, seed=120 + r)
    da = make(np.zeros(n * p, np.float64), kind)
    db = make(blocks[:n] if r == 0 else np.zeros(n, np.float64), kind)
    reqs = [mc.Ialltoall(make(blocks, kind), da), mc.Ibcast(db, root=0)]
    for q in reqs:
        q.Wait()
    want = np.concatenate([gradient_like(n * p, np.float64, seed=120 + i)[r * n : (r + 1) * n]
                           for i in range(p)])
    within_codec(config, read(da, kind), want)
    within_codec(config, read(db, kind), gradient_like(n * p, np.float64, seed=120)[:n])
    stats = mc.stats()
    for name in ("Reduce_scatter", "Ialltoall", "Ibcast"):
        assert stats[name]["compressed"] == 1 and stats[name]["memory"] == {label: 1}
    err = capfd.readouterr().err
    assert f"Reduce_scatter: compressed (ring, bitplane); {label};" in err


@pytest.mark.pairwise
@pytest.mark.parametrize("config", [{"id": "bitplane", "rate": 8.25},
                                    {"id": "errbound", "tolerance": 1e-3}],
                         ids=["bitplane8", "errbound"])
def test_point_to_point(comm, where, config):
    kind, label, _ = where
    r = comm.Get_rank()
    mc = mpicomp.Comm(comm, codec=config, threshold=0)
    x = gradient_like(N, np.float64, seed=100 + r)
    peer_x = gradient_like(N, np.float64, seed=100 + (1 - r)) if r < 2 else None
    if r < 2:
        peer = 1 - r
        # blocking: 0 sends first
        d = make(np.zeros(N, np.float64), kind)
        st = MPI.Status()
        if r == 0:
            mc.Send(make(x, kind), peer, tag=3)
            mc.Recv(d, peer, tag=4, status=st)
        else:
            mc.Recv(d, peer, tag=3, status=st)
            mc.Send(make(x, kind), peer, tag=4)
        within_codec(config, read(d, kind), peer_x)
        assert st.Get_count(MPI.DOUBLE) == N
        # nonblocking, and a NaN buffer that goes plain (exact)
        y = x.copy()
        y[3] = np.nan
        d1 = make(np.zeros(N, np.float64), kind)
        d2 = make(np.zeros(N, np.float64), kind)
        reqs = [mc.Irecv(d1, peer, tag=5), mc.Irecv(d2, peer, tag=6),
                mc.Isend(make(x, kind), peer, tag=5),
                mc.Isend(make(y, kind), peer, tag=6)]
        for q in reqs:
            q.Wait()
        within_codec(config, read(d1, kind), peer_x)
        peer_y = peer_x.copy()
        peer_y[3] = np.nan
        np.testing.assert_array_equal(read(d2, kind), peer_y)
        # Sendrecv
        d3 = make(np.zeros(N, np.float64), kind)
        mc.Sendrecv(make(x, kind), peer, 7, d3, peer, 7)
        within_codec(config, read(d3, kind), peer_x)
        stats = mc.stats()
        assert stats["Send"]["memory"] == {label: 1}
        assert stats["Recv"]["memory"] == {label: 2}  # Sendrecv's receive counts here
        assert stats["Isend"]["compressed"] == 1
        assert stats["Isend"]["fallbacks"] == {"nonfinite (NaN or Inf)": 1}
        assert stats["Irecv"]["compressed"] == 1
    comm.Barrier()


@device
def test_bad_device_input_raises(comm, aware):
    mc = mpicomp.Comm(comm, threshold=0)
    x = np.zeros(N, np.float32)
    with pytest.raises(ValueError, match="all be host .* or all device"):
        mc.Allreduce(to_device(x, KINDS[0]), np.zeros(N, np.float32))
    if KINDS[0] == "numba":
        strided = to_device(np.zeros(2 * N, np.float32), "numba")[::2]
        with pytest.raises(ValueError, match="C-contiguous"):
            mc.Allreduce(strided, to_device(x, "numba"))


@device
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_errbound_reconstruct_on_device_is_its_decode(comm, kind, dtype):
    """The owner of a device stream makes its values from its input (``errbound_cuda.
    reconstruct``) bit for bit as a decode of the stream makes them, into another buffer
    and in place, with a raw block and zero blocks; on a GPU also bit for bit the host
    codec's decode."""
    from mpicomp.backend.device import DeviceArrays

    arrays = DeviceArrays()
    x = gradient_like(N, dtype, seed=20 + comm.Get_rank())
    x[64:160] = 0  # zero blocks
    x[320:352] += 1e9  # a block past 31-bit integers of the step: raw
    codec = get_codec({"id": "errbound", "tolerance": 1e-3})
    dx = make(x, kind)
    stream = arrays.encode(codec, dx, arrays.empty(codec.stream_nbytes(N, x.dtype), np.uint8))
    decoded = read(arrays.decode(codec, stream, arrays.empty(N, dtype)), kind="numba")
    made = read(arrays.reconstruct(codec, dx, stream, arrays.empty(N, dtype)), kind="numba")
    np.testing.assert_array_equal(made.view(np.uint8), decoded.view(np.uint8))
    np.testing.assert_array_equal(read(dx, kind), x)  # the input is untouched
    inplace = make(x, kind)
    arrays.reconstruct(codec, inplace, stream, inplace)
    np.testing.assert_array_equal(read(inplace, kind).view(np.uint8), decoded.view(np.uint8))
    assert float(np.abs(decoded.astype(np.float64) - x).max()) <= 1e-3
    np.testing.assert_array_equal(decoded[320:352], x[320:352])  # (raw: verbatim)
    if not SIMULATOR:
        host = codec.decode(codec.encode(x), out=np.empty_like(x))
        np.testing.assert_array_equal(decoded.view(np.uint8), host.view(np.uint8))
