"""The errbound codec's shaped mode (mpicomp/codecs/errbound_shaped.py): fields predicted
across their dimensions, every value within the bound, fewer bytes than flat on smooth
fields, and the flat stream where the shape does not apply."""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi4py import MPI
from numba import njit

import mpicomp
from mpicomp.bench.field import field
from mpicomp.codecs import UncompressibleError, get_codec
from mpicomp.codecs import errbound_shaped as shaped
from mpicomp.kernels import interp_cpu


def _smooth3d(n0, n1, n2, dtype):
    z, y, x = np.meshgrid(*(np.linspace(0, 1, n) for n in (n0, n1, n2)), indexing="ij")
    return (np.sin(5 * x + 2 * y) * np.cos(3 * z) + 0.3 * x * y).astype(dtype)


def _rms(d):
    return float(np.sqrt(np.mean(d.astype(np.float64) ** 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tolerance", [1e-2, 1e-4, 1e-6])
def test_fields_keep_the_bound_in_fewer_bytes_than_flat(dtype, tolerance):
    """A 2-D wave field and a 3-D smooth field: every decoded value within the bound
    (absolute and relative), the stream shaped; at 1e-2 and 1e-4 smaller than the flat
    stream (0.13x to 0.62x here) at a lower RMS error (0.52x to 0.9x), at 1e-6, near
    float32's resolution, about as large (0.55x to 1.02x: the coarse levels' finer steps
    buy a lower RMS error than the bound asks; the rate-distortion benchmark measures
    bits at equal accuracy against SZ3)."""
    for x in (field(96 * 96, dtype).reshape(96, 96), _smooth3d(20, 33, 17, dtype)):
        for relative in (False, True):
            c = get_codec("errbound", tolerance=tolerance, relative=relative, shape=x.shape)
            s = c.encode(x)
            assert shaped.is_shaped(s)
            y = c.decode(s, out=np.empty_like(x))
            bound = c.bound(x.ravel())
            assert float(np.abs(y.astype(np.float64) - x).max()) <= bound
            assert c.used_nbytes(s, x.size, x.dtype) == s.size
            flat_codec = get_codec("errbound", tolerance=tolerance, relative=relative)
            flat = flat_codec.encode(x)
            limit = 0.7 if tolerance >= 1e-4 else 1.05
            assert s.size < limit * flat.size, (x.shape, s.size, flat.size)
            if tolerance >= 1e-4:
                z = flat_codec.decode(flat, out=np.empty_like(x))
                assert _rms(y - x) < _rms(z - x)


@pytest.mark.parametrize("shape", [(3, 5), (2, 2, 2), (17, 33, 9), (1, 7, 9), (9, 1, 7),
                                   (64, 2), (5, 4, 3, 2)])
def test_every_point_is_coded_once_and_odd_shapes_round_trip(shape):
    dims = shaped.dims_of(shape, int(np.prod(shape)))
    assert dims is not None
    assert interp_cpu.passes(dims)  # (asserts that the passes cover the grid exactly)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    c = get_codec("errbound", tolerance=1e-3, shape=shape)
    y = c.decode(c.encode(x), out=np.empty_like(x))
    assert float(np.abs(y - x).max()) <= 1e-3


def test_slabs_of_whole_rows_are_shaped_and_other_pieces_flat():
    """A collective's piece of a field: whole rows (or planes) are predicted across the
    rows; a piece that is no whole number of rows is coded flat, the same bytes as a
    codec without a shape."""
    c = get_codec("errbound", tolerance=1e-3, shape=(64, 64))
    assert shaped.dims_of(c.shape, 64 * 64) == (1, 64, 64)
    assert shaped.dims_of(c.shape, 16 * 64) == (1, 16, 64)
    assert shaped.dims_of(c.shape, 2 * 64 * 64) == (2, 64, 64)
    assert shaped.dims_of(c.shape, 64) is None  # one row: one dimension
    assert shaped.dims_of(c.shape, 100) is None
    assert shaped.dims_of((4, 6, 8), 3 * 48) == (3, 6, 8)  # planes
    assert shaped.dims_of((4, 6, 8), 5 * 8) == (1, 5, 8)  # rows
    x = field(64 * 64, np.float32)
    piece = x[:16 * 64]
    s = c.encode(piece)
    assert shaped.is_shaped(s)
    assert float(np.abs(c.decode(s, out=np.empty_like(piece)) - piece).max()) <= 1e-3
    odd = x[:100]
    flat = get_codec("errbound", tolerance=1e-3)
    assert bytes(c.encode(odd)) == bytes(flat.encode(odd))


def test_auto_takes_an_arrays_own_shape_and_flat_arrays_stay_flat():
    x = field(40 * 40, np.float32).reshape(40, 40)
    auto = get_codec("errbound", tolerance=1e-3, shape="auto")
    s = auto.encode(x)
    assert shaped.is_shaped(s)
    assert bytes(s) == bytes(get_codec("errbound", tolerance=1e-3, shape=(40, 40)).encode(x))
    flat = get_codec("errbound", tolerance=1e-3)
    assert bytes(auto.encode(x.ravel())) == bytes(flat.encode(x.ravel()))
    assert bytes(flat.encode(x)) == bytes(flat.encode(x.ravel()))  # no shape: flat
    with pytest.raises(ValueError):  # an out buffer below the upper bound, as encode checks
        auto.encode(x, out=np.empty(10, np.uint8))
    with pytest.raises(ValueError, match="bad step"):  # a codec without a shape
        flat.decode(s, out=np.empty_like(x))  # reads a shaped stream's step as a bad one


@njit
def _reference_pass(x, rec, planes, escapes, n0, n1, n2, ax, h, s, at, step, bound, single,
                    decoding):
    """One pass of the module docstring's algorithm in the data's own layout, a target at a
    time (``interp_cpu`` keeps each level compact and runs rows in branch-free loops):
    the reference its codes, reconstructions and escapes must equal."""
    n = n0 * n1 * n2
    dims = (n0, n1, n2)
    firsts = [0, 0, 0]
    strides = [1, 1, 1]
    for d in range(3):
        if ax >= 0:
            firsts[d], strides[d] = (h, s) if d == ax else ((0, h) if d < ax else (0, s))
    counts = [max(0, (dims[d] - firsts[d] + strides[d] - 1) // strides[d]) if ax >= 0 else 1
              for d in range(3)]
    gap = (n1 * n2, n2, 1)[ax] if ax >= 0 else 0
    bad = 0
    k = at
    for t0 in range(counts[0]):
        for t1 in range(counts[1]):
            for t2 in range(counts[2]):
                c = (firsts[0] + t0 * strides[0], firsts[1] + t1 * strides[1],
                     firsts[2] + t2 * strides[2])
                idx = (c[0] * n1 + c[1]) * n2 + c[2]
                pred = 0.0
                if ax >= 0:
                    i, m, o = c[ax], dims[ax], h * gap
                    if i >= 3 * h and i + 3 * h < m:
                        pred = (-rec[idx - 3 * o] + 9.0 * rec[idx - o] + 9.0 * rec[idx + o]
                                - rec[idx + 3 * o]) / 16.0
                    elif i + h < m:
                        pred = (rec[idx - o] + rec[idx + o]) / 2.0
                    else:
                        pred = rec[idx - o]
                if decoding:
                    code = np.int64(planes[k]) | (np.int64(planes[n + k]) << 8)
                    if code > 2 * interp_cpu.MAX_Q:
                        bad += code != interp_cpu.ESCAPE
                    else:
                        rec[idx] = pred + np.float64((code >> 1) ^ -(code & 1)) * step
                else:
                    v = float(x[idx])
                    code = interp_cpu.ESCAPE
                    rec[idx] = v if np.isfinite(v) else 0.0
                    if np.isfinite(v):
                        q = np.rint((v - pred) * (1.0 / step))
                        r = pred + q * step
                        back = float(np.float32(r)) if single else r
                        if abs(q) <= interp_cpu.MAX_Q and abs(v - back) <= bound:
                            code = (int(q) << 1) ^ (int(q) >> 63)
                            rec[idx] = r
                    escapes[idx] = code == interp_cpu.ESCAPE
                    bad += not np.isfinite(v)
                    planes[k] = code & 0xFF
                    planes[n + k] = code >> 8
                k += 1
    return bad


def _pass_step(step, dims, h):
    """The step of the passes of ``h`` (0: the origin, one level above the coarsest) from the
    finest's: ``step`` divided by a factor growing by ``ALPHA`` a level, at most ``CAP``."""
    top = 1
    while top < max(dims):
        top *= 2
    factor, level = 1.0, 1
    while level < (h or top):
        factor = min(factor * interp_cpu.ALPHA, interp_cpu.CAP)
        level *= 2
    return step / factor


def _reference(x, dims, bound):
    """(code planes, escapes' positions, nonfinite count) of :func:`_reference_pass`."""
    n = x.size
    rec, planes, escapes = np.zeros(n), np.zeros(2 * n, np.uint8), np.zeros(n, np.bool_)
    bad = sum(_reference_pass(x, rec, planes, escapes, *dims, ax, h, s, at,
                              _pass_step(2 * bound, dims, h), bound, x.dtype == np.float32,
                              False)
              for ax, h, s, at, _ in interp_cpu.passes(dims))
    return planes, np.flatnonzero(escapes).astype(np.uint32), bad


@pytest.mark.parametrize("dims", [(1, 512, 300), (24, 20, 18), (1, 37, 101), (3, 1, 33),
                                  (2, 2, 2), (5, 1, 1), (33, 65, 1), (1, 3, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_the_compact_levels_code_what_the_algorithm_says(dims, dtype):
    """interp_cpu.encode and decode against the algorithm run a target at a time in the
    data's layout: the same code bytes, escapes and NaN count on smooth data, noise with
    escapes and NaN, and the same decoded values (escapes' values as stored); decoding a
    stream of random codes counts the damaged ones (the codes past MAX_Q but ESCAPE)."""
    rng = np.random.default_rng(7)
    n = int(np.prod(dims))
    g = np.indices(dims).astype(np.float64)
    smooth = np.sin(g[0] / 7.0) + np.cos(g[1] / 5.0) * np.sin(g[2] / 11.0)
    noisy = rng.standard_normal(dims) * 10.0 ** rng.integers(-3, 3, dims)
    nan = smooth.copy().ravel()
    nan[rng.integers(0, n, 3)] = np.nan
    for data in (smooth, smooth + 1e-3 * rng.standard_normal(dims), noisy, nan):
        x = np.ascontiguousarray(np.asarray(data, dtype).ravel())
        for bound in (1e-1, 1e-4, 1e-9):
            want_planes, want_where, want_bad = _reference(x, dims, bound)
            planes = np.zeros(2 * n, np.uint8)
            bad, kept = interp_cpu.encode(x, dims, 2 * bound, bound, planes)
            np.testing.assert_array_equal(planes, want_planes)
            assert bad == want_bad and kept == want_where.size
            np.testing.assert_array_equal(interp_cpu.escape_positions(planes, dims), want_where)
            if bad:
                continue
            rec = np.zeros(n)
            rec[want_where] = x[want_where]
            for ax, h, s, at, _ in interp_cpu.passes(dims):
                _reference_pass(x[:0], rec, planes, np.zeros(0, np.bool_), *dims, ax, h, s, at,
                                _pass_step(2 * bound, dims, h), 0.0, False, True)
            y = np.empty(n, dtype)
            assert interp_cpu.decode(planes, dims, 2 * bound, want_where.astype(np.int64),
                                     x[want_where], y) == 0
            np.testing.assert_array_equal(y, rec.astype(dtype))
            assert float(np.abs(y.astype(np.float64) - x).max()) <= bound
    codes = rng.integers(0, 256, 2 * n).astype(np.uint8)
    for k in rng.choice(n, min(n, 8), replace=False):
        codes[k], codes[n + k] = rng.choice([0xFD, 0xFE, 0xFF]), 0xFF
    code = codes[:n].astype(np.int64) | (codes[n:].astype(np.int64) << 8)
    damaged = int(((code > 2 * interp_cpu.MAX_Q) & (code != interp_cpu.ESCAPE)).sum())
    assert damaged > 0
    assert interp_cpu.decode(codes, dims, 0.01, np.zeros(0, np.int64), np.zeros(0, dtype),
                             np.empty(n, dtype)) == damaged


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_the_step_cannot_reach_are_kept_exactly(dtype):
    """Escapes: errors too large to code (a spike of 1e9 in a field at 1e-3) and a bound
    below the dtype's resolution (1e-9: nearly every value an escape, so the stream goes
    flat): every value within the bound, the spikes exact."""
    x = field(32 * 32, dtype).reshape(32, 32).copy()
    x[5, 7] = 1e9
    x[20, 3] = -3e8
    for tol in (1e-3, 1e-9):
        c = get_codec("errbound", tolerance=tol, shape=x.shape)
        s = c.encode(x)
        assert shaped.is_shaped(s) == (tol == 1e-3)
        y = c.decode(s, out=np.empty_like(x))
        assert float(np.abs(y.astype(np.float64) - x).max()) <= tol
        assert y[5, 7] == x[5, 7] and y[20, 3] == x[20, 3]


def test_noise_that_does_not_fit_goes_flat():
    """A buffer whose shaped stream would pass the flat upper bound is coded flat."""
    x = np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32) * 1e6
    c = get_codec("errbound", tolerance=1e-7, shape=x.shape)
    s = c.encode(x)
    y = c.decode(s, out=np.empty_like(x))
    assert float(np.abs(y.astype(np.float64) - x).max()) <= 1e-7
    assert s.size <= c.encoded_nbytes(x.size, x.dtype)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_and_inf_are_refused(bad):
    x = field(16 * 16, np.float32).reshape(16, 16).copy()
    x[3, 3] = bad
    with pytest.raises(UncompressibleError):
        get_codec("errbound", tolerance=1e-3, shape=x.shape).encode(x)


def test_bad_shapes_name_the_value_and_configs_round_trip():
    for bad in ((0, 4), (-1,), (2.5, 3), "rows", (), (True, 3)):
        with pytest.raises(ValueError, match="shape must be"):
            get_codec("errbound", tolerance=1e-3, shape=bad)
    c = get_codec("errbound", tolerance=1e-3, shape=[8, 9, 10])
    assert c.shape == (8, 9, 10)
    back = get_codec(json.loads(json.dumps(c.get_config())))
    assert back == c and hash(back) == hash(c)
    assert "shape" not in get_codec("errbound", tolerance=1e-3).get_config()


def test_hostile_shaped_streams_fail_cleanly():
    x = field(24 * 24, np.float32).reshape(24, 24)
    c = get_codec("errbound", tolerance=1e-3, shape=x.shape)
    s = c.encode(x)
    out = np.empty_like(x)
    for cut in (9, 12, 25, s.size - 1):
        with pytest.raises(ValueError):
            c.decode(s[:cut].copy(), out=out)
    wrong = np.empty(23 * 24, np.float32)  # another count than the dimensions'
    with pytest.raises(ValueError, match="dimensions"):
        c.decode(s, out=wrong)
    junk = s.copy()
    junk[30:40] ^= 0x5A  # the zstd frame damaged
    try:
        c.decode(junk, out=out)
    except ValueError:
        pass



def test_each_thread_keeps_its_own_scratch_and_large_requests_are_not_kept():
    """``kernels/scratch.kept``: the same memory for a name on one thread, another on
    another thread, a new array past ``KEEP_BYTES`` or for another dtype."""
    import threading

    from mpicomp.kernels import scratch

    a = scratch.kept("test.a", 1000, np.float64)
    b = scratch.kept("test.a", 500, np.float64)
    assert a.size == 1000 and b.size == 500 and np.shares_memory(a, b)
    assert not np.shares_memory(a, scratch.kept("test.b", 1000, np.float64))
    c = scratch.kept("test.a", 1000, np.float32)
    assert c.dtype == np.float32 and c.size == 1000
    other = []
    t = threading.Thread(target=lambda: other.append(scratch.kept("test.a", 1000, np.float32)))
    t.start()
    t.join()
    assert not np.shares_memory(c, other[0])
    big = scratch.KEEP_BYTES // 8 + 1
    assert not np.shares_memory(scratch.kept("test.big", big, np.float64),
                                scratch.kept("test.big", big, np.float64))


def test_threads_coding_fields_at_once_each_get_their_own_streams():
    """Threads encoding and decoding different fields at the same time (a communicator's
    worker thread beside the program's) each get the stream and values they would alone:
    the scratch kept per thread is not shared."""
    from concurrent.futures import ThreadPoolExecutor

    fields = [field(128 * 96, np.float32, seed).reshape(128, 96) for seed in range(4)]
    fields += [_smooth3d(24, 20, 18, np.float64)]
    codecs = [get_codec("errbound", tolerance=1e-4, shape=x.shape) for x in fields]
    alone = [c.encode(x).copy() for c, x in zip(codecs, fields, strict=True)]

    def both(k):
        for _ in range(20):
            stream = codecs[k].encode(fields[k]).copy()
            out = codecs[k].decode(stream, np.empty_like(fields[k]))
            if not (np.array_equal(stream, alone[k])
                    and np.abs(out - fields[k]).max() <= 1e-4):
                return False
        return True

    with ThreadPoolExecutor(len(fields)) as pool:
        assert all(pool.map(both, range(len(fields))))

@pytest.mark.mpi(min_size=2)
def test_a_field_through_the_communicator_keeps_the_bound(comm):
    """Bcast and Allgather of a field (1000 x 1000: rows that no power of two divides) with
    the shape given per call: every value within the tolerance on every rank, the pieces
    cut at whole rows (slabs of the field), so the wire carries well under half of what
    the same calls without the shape send."""
    p, r = comm.Get_size(), comm.Get_rank()
    side, t = 1000, 1e-3
    rows = side // p
    whole = field(side * side, np.float32, seed=3)[:p * rows * side]
    shaped_codec = {"id": "errbound", "tolerance": t, "shape": [p * rows, side]}
    flat_codec = {"id": "errbound", "tolerance": t}
    sent = {}
    for name, codec in (("shaped", shaped_codec), ("flat", flat_codec)):
        mc = mpicomp.Comm(comm, threshold=0)
        b = whole.copy() if r == 0 else np.zeros_like(whole)
        mc.Bcast(b, root=0, codec=codec)
        assert float(np.abs(b - whole).max()) <= t
        mine = whole[r * rows * side:(r + 1) * rows * side]
        z = np.empty_like(whole)
        mc.Allgather(mine, z, codec=codec)
        assert float(np.abs(z - whole).max()) <= t
        st = mc.stats()
        assert st["Bcast"]["compressed"] == 1 and st["Allgather"]["compressed"] == 1
        sent[name] = comm.allreduce(st["Bcast"]["wire_bytes"] + st["Allgather"]["wire_bytes"])
    assert sent["shaped"] < 0.5 * sent["flat"], sent


def test_a_buffers_own_shape_is_its_arrays_memory_order():
    """``Buf.shape``: a NumPy array's dimensions in memory order (C: its shape; Fortran:
    reversed), nothing for a flat array or another buffer object."""
    from mpicomp.buffers import parse

    x = np.zeros((4, 5, 6), np.float32)
    assert parse(x).shape == (4, 5, 6)
    assert parse(np.asfortranarray(x)).shape == (6, 5, 4)
    assert parse([x, 20, MPI.FLOAT]).shape == (4, 5, 6)  # (a count: a slab of it)
    assert parse(x.reshape(-1)).shape == ()
    assert parse(memoryview(x.reshape(-1))).shape == ()
    auto = get_codec("errbound", tolerance=1e-3, shape="auto")
    assert auto.field_of((4, 5, 6), 120) == (4, 5, 6)
    assert auto.field_of((4, 5, 6), 60) == (2, 5, 6)  # whole planes of it
    assert auto.field_of((), 120) == (0, 0, 0)  # a flat array: no field
    assert auto.takes_field and not get_codec("errbound", tolerance=1e-3).takes_field
    assert not get_codec("errbound", tolerance=1e-3, shape=(4, 5, 6)).takes_field
    assert not get_codec("bitplane", rate=8.25).takes_field
    assert auto.for_field((1, 4, 5)).shape == (1, 4, 5)
    assert auto.for_field(None).shape is None and auto.for_field((0, 0, 0)).shape is None


@pytest.mark.mpi(min_size=2)
def test_shape_auto_in_calls_takes_the_arrays_own_field(comm):
    """``shape="auto"`` in a collective: each rank's array's own field, agreed by the ranks
    that code their values (a Bcast's root alone; every rank of an Allreduce, which goes
    flat where one rank's array is flat), the same bytes as the shape given by hand; a
    ``tolerance=`` keeps the codec's shape; a Send's frame carries the sender's field.
    Every value within the tolerance."""
    p, r = comm.Get_size(), comm.Get_rank()
    rows, cols, t = 96, 160, 1e-4
    whole = _smooth3d(1, rows, cols, np.float32)[0]
    auto = {"id": "errbound", "tolerance": t, "shape": "auto"}
    given = {"id": "errbound", "tolerance": t, "shape": [rows, cols]}
    flat = {"id": "errbound", "tolerance": t}

    def wire(name, run, *args, **kw):
        mc = mpicomp.Comm(comm, threshold=0)
        out = run(mc, *args, **kw)
        st = mc.stats()[name]
        assert st["compressed"] == 1, st
        return comm.allreduce(st["wire_bytes"]), out

    def bcast(mc, arr, **kw):
        b = arr.copy(order="K") if r == 0 else np.zeros_like(arr)
        if r and b.ndim > 1:
            b = b.reshape(-1)  # receivers' arrays are flat: the root's field counts
        mc.Bcast(b, root=0, **kw)
        assert float(np.abs(b.reshape(-1, order="A") - arr.reshape(-1, order="A")).max()) <= t
        return b

    sent = {name: wire("Bcast", bcast, whole, codec=codec)[0]
            for name, codec in (("auto", auto), ("given", given), ("flat", flat))}
    assert sent["auto"] == sent["given"] < 0.9 * sent["flat"], sent
    by_tolerance = wire("Bcast", bcast, whole, tolerance=t,
                        codec={"id": "errbound", "shape": [rows, cols]})[0]
    assert by_tolerance == sent["given"]
    fortran = wire("Bcast", bcast, np.asfortranarray(whole), codec=auto)[0]
    transposed = {"id": "errbound", "tolerance": t, "shape": [cols, rows]}
    assert fortran == wire("Bcast", bcast, np.ascontiguousarray(whole.T), codec=transposed)[0]

    exact = p * whole.reshape(-1).astype(np.float64)
    # (plus the float32 rounding of p additions of values up to the sum's magnitude)
    slack = p * float(np.finfo(np.float32).eps) * (float(np.abs(exact).max()) + t)

    def allreduce(mc, arr, **kw):
        out = np.empty_like(arr)
        mc.Allreduce(arr, out, tolerance=t, codec=kw["codec"])
        assert float(np.abs(out.reshape(-1) - exact).max()) <= t + slack
        return out

    mixed = whole if r else whole.reshape(-1)
    fields = wire("Allreduce", allreduce, whole, codec={"id": "errbound", "shape": "auto"})[0]
    flat_sum = wire("Allreduce", allreduce, whole, codec={"id": "errbound"})[0]
    one_flat = wire("Allreduce", allreduce, mixed, codec={"id": "errbound", "shape": "auto"})[0]
    assert fields < 0.9 * flat_sum and one_flat == flat_sum, (fields, flat_sum, one_flat)

    mc = mpicomp.Comm(comm, threshold=0)
    if r == 0:
        mc.Send(whole, dest=1, codec=auto)
        mc.Send(whole, dest=1, codec=flat)
        frames = mc.stats()["Send"]["wire_bytes"]
        comm.send(frames, dest=1)
    elif r == 1:
        got = np.empty(rows * cols, np.float32)
        mc.Recv(got, source=0, codec=auto)
        assert float(np.abs(got - whole.reshape(-1)).max()) <= t
        first = mc.stats()["Recv"]["wire_bytes"]
        mc.Recv(got, source=0, codec=auto)
        assert float(np.abs(got - whole.reshape(-1)).max()) <= t
        both = comm.recv(source=0)
        assert first < 0.9 * (both - first), (first, both)
