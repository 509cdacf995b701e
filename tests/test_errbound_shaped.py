"""The errbound codec's shaped mode (mpicomp/codecs/errbound_shaped.py): fields predicted
across their dimensions, every value within the bound, fewer bytes than flat on smooth
fields, and the flat stream where the shape does not apply."""
from __future__ import annotations

import json

import numpy as np
import pytest

import mpicomp
from mpicomp.bench.field import field
from mpicomp.codecs import UncompressibleError, get_codec
from mpicomp.codecs import errbound_shaped as shaped
from mpicomp.kernels import interp_cpu


def _smooth3d(n0, n1, n2, dtype):
    z, y, x = np.meshgrid(*(np.linspace(0, 1, n) for n in (n0, n1, n2)), indexing="ij")
    return (np.sin(5 * x + 2 * y) * np.cos(3 * z) + 0.3 * x * y).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tolerance", [1e-2, 1e-4, 1e-6])
def test_fields_keep_the_bound_in_fewer_bytes_than_flat(dtype, tolerance):
    """A 2-D wave field and a 3-D smooth field: every decoded value within the bound
    (absolute and relative), the stream shaped; at 1e-2 and 1e-4 smaller than the flat
    stream (0.15x to 0.6x here), at 1e-6, near float32's resolution, about as large (the
    rate-distortion benchmark measures it against SZ3)."""
    for x in (field(96 * 96, dtype).reshape(96, 96), _smooth3d(20, 33, 17, dtype)):
        for relative in (False, True):
            c = get_codec("errbound", tolerance=tolerance, relative=relative, shape=x.shape)
            s = c.encode(x)
            assert shaped.is_shaped(s)
            y = c.decode(s, out=np.empty_like(x))
            bound = c.bound(x.ravel())
            assert float(np.abs(y.astype(np.float64) - x).max()) <= bound
            assert c.used_nbytes(s, x.size, x.dtype) == s.size
            flat = get_codec("errbound", tolerance=tolerance, relative=relative).encode(x)
            limit = 0.7 if tolerance >= 1e-4 else 1.0
            assert s.size < limit * flat.size, (x.shape, s.size, flat.size)


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


def _passes_one_at_a_time(x, rec, planes, escapes, dims, step, bound, decoding):
    """The passes with every target through the per-target code (``interp_cpu._predict``
    and ``_code_one``, the edges' path): the reference of the branch-free loops."""
    from numba import njit

    @njit
    def one_pass(x, rec, planes, escapes, n0, n1, n2, ax, h, s, at, step, inv_step, bound,
                 single, decoding):
        n = n0 * n1 * n2
        f0, d0, c0, f1, d1, c1, f2, d2, c2, stride, nax = interp_cpu._targets(n0, n1, n2, ax,
                                                                              h, s)
        bad = 0
        kept = 0
        for row in range(c0 * c1):
            i0 = f0 + (row // c1) * d0
            i1 = f1 + (row - (row // c1) * c1) * d1
            for t2 in range(c2):
                i2 = f2 + t2 * d2
                idx = (i0 * n1 + i1) * n2 + i2
                pred = 0.0
                if ax >= 0:
                    i = i0 if ax == 0 else (i1 if ax == 1 else i2)
                    pred = interp_cpu._predict(rec, idx, i, nax, h, stride)
                b, e = interp_cpu._code_one(x, rec, planes, escapes, idx, at + row * c2 + t2,
                                            n, pred, step, inv_step, bound, single, decoding)
                bad += b
                kept += e
        return bad, kept

    total = [0, 0]
    for ax, h, s, at, _ in interp_cpu.passes(dims):
        b, k = one_pass(x, rec, planes, escapes, *dims, ax, h, s, at, step,
                        0.0 if decoding else 1.0 / step, bound, rec.dtype == np.float32
                        if decoding else x.dtype == np.float32, decoding)
        total[0] += b
        total[1] += k
    return total


@pytest.mark.parametrize("dims", [(1, 512, 300), (24, 20, 18), (1, 37, 101), (3, 1, 33)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_the_branch_free_loops_code_what_the_per_target_code_does(dims, dtype):
    """code_pass runs a row's cubic targets in branch-free loops (the finest level's stride
    a constant): the same codes, reconstructions, escapes and counts as every target
    through the per-target code, on smooth data, noise with escapes, NaN (counted), and
    decoding a stream of random codes (damaged ones counted, their targets left)."""
    rng = np.random.default_rng(7)
    n = int(np.prod(dims))
    g = np.indices(dims).astype(np.float64)
    smooth = np.sin(g[0] / 7.0) + np.cos(g[1] / 5.0) * np.sin(g[2] / 11.0)
    noisy = rng.standard_normal(dims) * 10.0 ** rng.integers(-3, 3, dims)
    nan = smooth.copy().ravel()
    nan[rng.integers(0, n, 3)] = np.nan
    for data in (smooth, smooth + 1e-3 * rng.standard_normal(dims), noisy, nan):
        x = np.ascontiguousarray(np.asarray(data, dtype).ravel())
        for bound in (1e-1, 1e-4):
            got, want = [], []
            for runs, out in ((None, got), (True, want)):
                rec, planes, escapes = np.zeros(n), np.zeros(2 * n, np.uint8), np.zeros(n, np.uint8)
                if runs:
                    counts = _passes_one_at_a_time(x, rec, planes, escapes, dims, 2 * bound,
                                                   bound, False)
                else:
                    counts = [0, 0]
                    for ax, h, s, at, _ in interp_cpu.passes(dims):
                        b, k = interp_cpu.code_pass(x, rec, planes, escapes, np.empty(n),
                                                    np.empty(n, np.uint8), *dims, ax, h, s, at,
                                                    2 * bound, 0.5 / bound, bound,
                                                    dtype == np.float32, False)
                        counts[0] += b
                        counts[1] += k
                out += [rec, planes, escapes, counts]
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
    codes = rng.integers(0, 256, 2 * n).astype(np.uint8)
    for k, low in zip(rng.choice(n, 8, replace=False), [0xFE, 0xFD, 0xFF, 0xFF] * 2,
                      strict=True):  # damaged codes (65534, 65533) and escapes (65535)
        codes[k], codes[n + k] = low, 0xFF
    results = []
    for runs in (False, True):
        rec = np.full(n, 1.5)
        none = np.zeros(0, dtype)
        if runs:
            bad = _passes_one_at_a_time(none, rec, codes, none.view(np.uint8), dims, 0.01, 0.0,
                                        True)[0]
        else:
            bad = sum(interp_cpu.code_pass(none, rec, codes, none.view(np.uint8), none,
                                           none.view(np.uint8), *dims, ax, h, s, at, 0.01, 0.0,
                                           0.0, dtype == np.float32, True)[0]
                      for ax, h, s, at, _ in interp_cpu.passes(dims))
        results.append((rec, bad))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    assert results[0][1] == results[1][1] > 0


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
