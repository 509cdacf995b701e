"""The ``errbound`` codec: every decoded value within its bound, variable-size streams that
pay on sparse and smooth data, hostile bytes refused, and the communicator carrying them."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mpicomp
from mpicomp.codecs import get_codec
from mpicomp.codecs.errbound import HEADER_NBYTES
from mpicomp.errors import UncompressibleError
from mpicomp.kernels.errbound_block import BLOCK
from mpicomp.kernels.errbound_layout import DELTA, DELTA2, DELTA3, RAW, WIDEST

sys.path.insert(0, str(Path(__file__).parent))
from real_like import gradient_like  # noqa: E402

DTYPES = [np.float32, np.float64]


def _data(kind: str, n: int, dtype) -> np.ndarray:
    rng = np.random.default_rng(3)
    if kind == "gradient":
        return gradient_like(n, dtype, seed=3)
    if kind == "sparse":
        x = rng.standard_normal(n).astype(dtype)
        x[rng.random(n) < 0.7] = 0
        return x
    if kind == "smooth":
        return np.sin(np.arange(n) / 300.0).astype(dtype) * 50
    if kind == "subnormal":
        tiny = np.finfo(dtype).tiny
        return (rng.standard_normal(n) * tiny).astype(dtype)
    if kind == "huge range":
        return (rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(dtype)
    if kind == "zeros":
        return np.zeros(n, dtype)
    raise AssertionError(kind)


KINDS = ["gradient", "sparse", "smooth", "subnormal", "huge range", "zeros"]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tolerance,relative", [(1e-3, False), (1e-6, False), (1e-4, True),
                                                (1e-30, False)])
def test_every_value_within_the_bound(dtype, kind, tolerance, relative):
    x = _data(kind, 10_000 + 17, dtype)  # a short last block
    c = get_codec("errbound", tolerance=tolerance, relative=relative)
    s = c.encode(x)
    assert c.min_stream_nbytes(x.size, np.dtype(dtype)) <= s.size
    assert s.size <= c.encoded_nbytes(x.size, dtype)
    y = c.decode(s, out=np.empty_like(x))
    bound = tolerance * float(np.abs(x.astype(np.float64)).max()) if relative else tolerance
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    assert float(err.max()) <= bound, (kind, float(err.max()), bound)
    assert c.used_nbytes(s, x.size, dtype) == s.size
    # deterministic, and decodable from a longer buffer (a receive of the upper bound)
    longer = np.zeros(c.encoded_nbytes(x.size, dtype), np.uint8)
    longer[: s.size] = s
    np.testing.assert_array_equal(c.decode(longer, out=np.empty_like(x)), y)
    np.testing.assert_array_equal(c.encode(x), s)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("tolerance,relative", [(1e-3, False), (1e-30, False), (1e-4, True)])
def test_reconstruct_makes_the_decoders_values_from_the_input(dtype, tolerance, relative):
    """The owner of a stream in a collective makes its values from its input: bit for bit
    the decode's, on every kind of data (raw blocks of a huge range or a tiny bound, blocks
    of zeros, subnormals, a short last block), into another array and in place."""
    c = get_codec("errbound", tolerance=tolerance, relative=relative)
    for kind in KINDS:
        x = _data(kind, 10_000 + 17, dtype)
        s = c.encode(x)
        want = c.decode(s, out=np.empty_like(x))
        got = np.full_like(x, np.nan)
        c.reconstruct_into(x, s, got)
        np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"),
                                      err_msg=kind)
        inplace = x.copy()
        c.reconstruct_into(inplace, s, inplace)
        np.testing.assert_array_equal(inplace.view(f"u{x.itemsize}"),
                                      want.view(f"u{x.itemsize}"), err_msg=kind)


def test_zeros_cost_a_byte_per_block_and_sparse_data_pays():
    n = 1 << 16
    c = get_codec("errbound", tolerance=1e-3)
    # header, a code byte per block, a uint16 size per group of 8 blocks
    assert c.encode(np.zeros(n, np.float32)).size == HEADER_NBYTES + n // BLOCK + n // 128
    x = np.zeros(n, np.float32)
    x[: n // 8] = np.random.default_rng(0).standard_normal(n // 8)  # 7/8 zeros, in blocks
    bits = 8 * c.encode(x).size / n
    assert bits < 2.5, bits  # about 13 bits for 1/8 of the values, 0.25 for the rest


def _width_only_nbytes(x: np.ndarray, step: float) -> int:
    """Bytes of the payloads if every block took the width coding (the first format)."""
    q = np.floor(x.astype(np.float64) / step + 0.5).astype(np.int64)
    z = ((q << 1) ^ (q >> 63)).reshape(-1, BLOCK)
    widths = np.ceil(np.log2(z.max(axis=1) + 1.0)).astype(np.int64)
    return int((widths * BLOCK).sum()) // 8


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_each_block_coding_is_chosen_where_it_pays_and_round_trips(dtype):
    """Width (uniform values), zero mask (heavy tails, whose small values quantize to 0;
    sparse data), delta of order 1 (a random walk), 2 (a slow wave) and 3 (a fast one),
    raw (a bound below the dtype's rounding), zeros: each appears, each decodes within
    the bound, and the mask sends heavy-tailed data in fewer bytes than the width alone,
    sparse data in under 0.4x."""
    rng = np.random.default_rng(7)
    k = 8 * BLOCK  # a group of each
    uniform = rng.uniform(-1, 1, k)
    heavy = rng.standard_normal(k) * np.exp(2 * rng.standard_normal(k)) * 0.01
    sparse = np.where(rng.random(k) < 0.8, 0.0, rng.uniform(-1, 1, k) * 100)
    tiny_step = np.float64(1.0) + np.arange(k) * np.finfo(dtype).eps  # below rounding
    walk = np.cumsum(rng.integers(-3, 4, k)) * 2e-3 + 1.0
    slow = np.sin(np.arange(k) / 40.0) * 3
    fast = np.sin(np.arange(k) / 8.0) * 30
    x = np.concatenate([uniform, heavy, sparse, np.zeros(k), walk, slow, fast,
                        tiny_step * 1e6]).astype(dtype)
    c = get_codec("errbound", tolerance=1e-3)
    s = c.encode(x)
    codes = s[HEADER_NBYTES:HEADER_NBYTES + x.size // BLOCK].reshape(8, 8)
    assert (codes[0] <= 32).all() and codes[0].min() > 0  # width
    assert ((codes[1] >= 33) & (codes[1] <= 65)).sum() >= 6  # zero mask
    assert ((codes[2] >= 33) & (codes[2] <= 65)).sum() >= 6
    assert (codes[3] == 0).all()
    assert ((codes[4] >= 66) & (codes[4] <= 98)).sum() >= 6  # delta, order 1
    assert ((codes[5] >= 99) & (codes[5] <= 131)).sum() >= 6  # order 2
    assert ((codes[6] >= 132) & (codes[6] <= 164)).sum() >= 6  # order 3
    y = c.decode(s, out=np.empty_like(x))
    assert float(np.abs(y.astype(np.float64) - x).max()) <= 1e-3
    for part, most in ((heavy, 1.0), (sparse, 0.4)):
        part = part.astype(dtype)
        assert c.encode(part).size - c.min_stream_nbytes(k, np.dtype(dtype)) < most * (
            _width_only_nbytes(part, 2e-3))
    fine = get_codec("errbound", tolerance=1e-12)  # float32 cannot hold it: raw
    s = fine.encode(x[7 * k:])
    if dtype == np.float32:
        assert (s[HEADER_NBYTES:HEADER_NBYTES + 8] == 255).all()
    np.testing.assert_array_equal(fine.decode(s, out=np.empty(k, dtype)), x[7 * k:])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad):
    x = np.ones(100, np.float32)
    x[57] = bad
    with pytest.raises(UncompressibleError, match="NaN or Inf"):
        get_codec("errbound").encode(x)
    with pytest.raises(UncompressibleError):
        get_codec("errbound", tolerance=1e-3, relative=True).encode(x)


def test_bad_parameters_name_the_value():
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="tolerance must be finite and > 0"):
            get_codec("errbound", tolerance=bad)
    with pytest.raises(TypeError, match="tolerance must be a number, got 'x'"):
        get_codec("errbound", tolerance="x")
    with pytest.raises(TypeError, match="relative must be True or False"):
        get_codec("errbound", relative=1)
    c = get_codec({"id": "errbound", "tolerance": 0.5, "relative": True})
    assert c.get_config() == {"id": "errbound", "tolerance": 0.5, "relative": True}


def test_hostile_bytes_fail_cleanly():
    """Random, truncated or altered streams raise ValueError (never read out of bounds)."""
    rng = np.random.default_rng(5)
    c = get_codec("errbound", tolerance=1e-2)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    s = c.encode(x)
    out = np.empty(n, np.float32)
    with pytest.raises(ValueError):
        c.decode(s[: s.size - 1], out=out)  # a payload cut short
    with pytest.raises(ValueError):
        c.decode(s[:HEADER_NBYTES], out=out)  # no code bytes
    bad = s.copy()
    for unused in (165, 200, 240, 254):  # code bytes no encoder writes
        bad[HEADER_NBYTES] = unused
        with pytest.raises(ValueError, match="code byte"):
            c.decode(bad, out=out)
    bad = s.copy()
    bad[HEADER_NBYTES] = 32  # a wider code than the group's bytes hold
    with pytest.raises(ValueError, match="run past"):
        c.decode(bad, out=out)
    mask = get_codec("errbound", tolerance=1e-2).encode(np.array([0, 0, 1, 0, -3], np.float32))
    assert 33 <= mask[HEADER_NBYTES] <= 65  # a zero mask (0b10100), then its planes
    bad = mask.copy()
    bad[HEADER_NBYTES + 3] |= 0x20  # a mask bit past the block's 5 values
    with pytest.raises(ValueError, match="mask bits past"):
        c.decode(bad, out=np.empty(5, np.float32))
    bad = s.copy()
    bad[:HEADER_NBYTES] = np.frombuffer(np.float64(np.nan).tobytes(), np.uint8)
    with pytest.raises(ValueError, match="bad step"):
        c.decode(bad, out=out)
    for _ in range(200):  # random bytes: a clean error, or values (never a crash)
        junk = rng.integers(0, 256, rng.integers(0, 2 * s.size), dtype=np.uint8)
        try:
            c.decode(junk, out=out)
        except ValueError:
            pass


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_the_communicator_moves_only_the_bytes_used(comm, monkeypatch, algorithm):
    """errbound through the communicator on real gradients, on pretend nodes of two ranks
    (the layout is replaced, the transfers are real MPI): ``hierarchical`` runs the
    node-aware Allreduce, Allgather, Bcast and Alltoall. Every result is within its bound
    on every rank (data movement: the tolerance; Allreduce: p times it, plus rounding),
    the Allreduce gives every rank the same bits, the wire carries the streams' own bytes
    (far fewer than plain), and a buffer holding NaN goes plain on every rank, exact."""
    from mpicomp import topology
    from mpicomp.bench.gradients import gradients

    monkeypatch.setattr(topology, "layout",
                        lambda c: topology.Layout(tuple(i // 2 for i in range(c.Get_size()))))
    p, r = comm.Get_size(), comm.Get_rank()
    t, n = 1e-5, 5000
    mc = mpicomp.Comm(comm, codec={"id": "errbound", "tolerance": t}, threshold=0,
                      algorithm=algorithm)
    x = gradients(n, np.float32, seed=r)
    every = np.empty((p, n), np.float32)
    comm.Allgather(x, every)
    y = np.empty(n, np.float32)
    mc.Allreduce(x, y)
    g = float(np.abs(every).max(axis=1).sum())
    bound = p * t + p * float(np.finfo(np.float32).eps) * g
    assert float(np.abs(y - every.astype(np.float64).sum(axis=0)).max()) <= bound
    assert len(set(comm.allgather(y.tobytes()))) == 1
    z = np.empty(p * n, np.float32)
    mc.Allgather(x, z)
    assert float(np.abs(z - every.ravel()).max()) <= t
    b = x.copy()
    mc.Bcast(b, root=1)
    assert float(np.abs(b - every[1]).max()) <= t
    blocks = np.concatenate([gradients(n, np.float32, seed=10 * r + j) for j in range(p)])
    sent_by = comm.alltoall([blocks[j * n:(j + 1) * n] for j in range(p)])
    a = np.empty(p * n, np.float32)
    mc.Alltoall(blocks, a)
    for i in range(p):
        err = float(np.abs(a[i * n:(i + 1) * n] - sent_by[i]).max())
        assert err <= t if i != r else err == 0, (i, err)
    st = mc.stats()
    # the same calls with streams of a fixed size (bitplane at 24.25 bits per value, its
    # most): the same algorithms move the same messages, each of its full size
    full = mpicomp.Comm(comm, codec={"id": "bitplane", "rate": 24.25}, threshold=0,
                        algorithm=algorithm)
    full.Allreduce(x, y)
    full.Allgather(x, z)
    full.Bcast(b, root=1)
    full.Alltoall(blocks, a)
    fixed = full.stats()
    for name in ("Allreduce", "Allgather", "Bcast", "Alltoall"):
        assert st[name]["compressed"] == 1, (name, st[name])
        ours = comm.allreduce(st[name]["wire_bytes"])
        theirs = comm.allreduce(fixed[name]["wire_bytes"])
        if algorithm == "ring":
            assert 0 < ours < 0.6 * theirs, (name, ours, theirs)
        else:  # node-aware: the bytes inside a pretend node go plain in both
            assert 0 < ours <= theirs and (p == 2 or ours < theirs), (name, ours, theirs)
    if algorithm == "hierarchical":
        assert st["Allgather"]["algorithms"] == {"allgather-hierarchical": 1}
        assert st["Bcast"]["algorithms"] == {"bcast-hierarchical": 1}
    bad = x.copy()
    if r == 0:
        bad[7] = np.nan
    want = np.empty(n, np.float32)
    comm.Allreduce(bad, want)
    mc.Allreduce(bad, y)
    np.testing.assert_array_equal(y, want)
    assert mc.stats()["Allreduce"]["compressed"] == 1  # the second went plain
    comm.Barrier()


def test_the_format_documents_example_bytes():
    """docs/format.md, section errbound, Example."""
    c = get_codec("errbound", tolerance=0.25)
    x = np.arange(1, 7, dtype=np.float32)
    s = c.encode(x)
    assert s.tobytes() == bytes.fromhex("000000000000e03f" "45" "0c00" "3f000000" + "00" * 8)
    np.testing.assert_array_equal(c.decode(s, out=np.empty_like(x)), x)


def _planes(data: bytes, width: int, count: int) -> tuple[list[int], int]:
    """``count`` codes from ``width`` planes of ``count`` bits each, one after the other in
    the bit string ``data`` (least significant bit first, the most significant plane
    first), and the bits after them."""
    bits = int.from_bytes(data, "little")
    codes = [0] * count
    for j in range(width):
        plane = (bits >> (j * count)) & ((1 << count) - 1)
        for i in range(count):
            codes[i] |= ((plane >> i) & 1) << (width - 1 - j)
    return codes, bits >> (width * count)


def _reference_decode(stream: np.ndarray, n: int, dtype) -> np.ndarray:
    """docs/format.md, section errbound, read in Python: the decoded values, checking that
    each group's byte size is the sum of its blocks' and that every bit the format leaves
    unused (lanes past a short block, a mask's padding) is 0."""
    import math
    import struct

    dtype = np.dtype(dtype)
    (step,) = struct.unpack_from("<d", stream.tobytes(), 0)
    inv = 1.0 / step if step > 0 else 0.0
    nblocks = -(-n // BLOCK)
    ngroups = -(-nblocks // 8)
    codes = stream[HEADER_NBYTES:HEADER_NBYTES + nblocks].astype(int)
    pairs = stream[HEADER_NBYTES + nblocks:HEADER_NBYTES + nblocks + 2 * ngroups].astype(int)
    sizes = pairs[0::2] | (pairs[1::2] << 8)
    at = HEADER_NBYTES + nblocks + 2 * ngroups
    out = np.empty(n, dtype)

    def unzig(z: int) -> int:
        return z >> 1 if z % 2 == 0 else -(z >> 1) - 1

    for g in range(ngroups):
        group = stream[at:at + sizes[g]].tobytes()
        at += sizes[g]
        pos = 0
        qs = [0, 0, 0]  # the group's integers so far, after three zeros of history
        for b in range(8 * g, min(8 * g + 8, nblocks)):
            m = min(BLOCK, n - b * BLOCK)
            code = int(codes[b])
            if code == 255:
                values = np.frombuffer(group[pos:pos + m * dtype.itemsize], dtype)
                pos += m * dtype.itemsize
                out[b * BLOCK:b * BLOCK + m] = values
                for v in values.astype(np.float64):
                    s = float(v) * inv + 0.5
                    qs.append(math.floor(s) if abs(s) <= 2**31 - 1 else 0)
                continue
            kind, w = divmod(code, 33)
            if kind == 1:  # a zero mask
                mask = int.from_bytes(group[pos:pos + 4], "little")
                assert mask >> m == 0
                count = bin(mask).count("1")
                size = -(-count * w // 8)
                z, rest = _planes(group[pos + 4:pos + 4 + size], w, count)
                assert rest == 0
                pos += 4 + size
                z = iter(z)
                q = [unzig(next(z) + 1) if mask >> i & 1 else 0 for i in range(m)]
            else:
                z, _ = _planes(group[pos:pos + 4 * w], w, 32)
                assert not any(z[m:]), z[m:]
                pos += 4 * w
                order = 0 if kind == 0 else kind - 1
                a, bb, cc = [(0, 0, 0), (1, 0, 0), (2, -1, 0), (3, -3, 1)][order]
                q = []
                for d in map(unzig, z[:m]):
                    prev = qs + q
                    q.append(d + a * prev[-1] + bb * prev[-2] + cc * prev[-3])
            qs += q
            out[b * BLOCK:b * BLOCK + m] = np.array([float(v) * step for v in q])
        assert pos == sizes[g], (g, sizes[g], pos)
    return out


def _coding(code: int) -> str:
    """The coding a code byte names (docs/format.md's table)."""
    for name, first, last in (("zeros", 0, 0), ("width", 1, 32), ("mask", 33, 65),
                              ("delta1", 66, 98), ("delta2", 99, 131), ("delta3", 132, 164),
                              ("raw", 255, 255)):
        if first <= code <= last:
            return name
    raise AssertionError(f"code byte {code} is in no coding")


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_streams_read_as_the_format_documents(dtype):
    """A Python reader of docs/format.md decodes every stream to the codec's own values,
    and each group's byte size is its blocks' sum: data with every coding, a short last
    block and group."""
    rng = np.random.default_rng(11)
    n = 8 * 8 * BLOCK + 3 * BLOCK + 13
    outliers = rng.standard_normal(n) * 0.01
    outliers[rng.random(n) < 0.03] *= 100
    sets = [_data(kind, n, dtype) for kind in KINDS] + [
        outliers, np.cumsum(rng.integers(-3, 4, n)) * 2e-3,
        np.where(rng.random(n) < 0.5, 0.0, rng.uniform(-1, 1, n)),
    ]
    seen = set()
    for x in sets:
        x = np.asarray(x, dtype)
        for tol, rel in [(1e-2, True), (1e-4, True), (1e-3, False), (1e-7, True)]:
            c = get_codec("errbound", tolerance=tol, relative=rel)
            s = c.encode(x)
            got = c.decode(s, out=np.empty_like(x))
            want = _reference_decode(s, x.size, dtype)
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
            nblocks = -(-x.size // BLOCK)
            seen.update(_coding(int(v)) for v in s[HEADER_NBYTES:HEADER_NBYTES + nblocks])
    assert seen == {"zeros", "width", "delta1", "delta2", "delta3", "mask", "raw"}, seen


def _scalar_drivers():
    """One thread's pack and unpack over ``errbound_block``'s scalar group code (the format's
    reference), compiled for the CPU."""
    from numba import njit

    from mpicomp.kernels.errbound_block import SCRATCH, pack_group, unpack_group

    @njit
    def pack(x, inv_step, code, offsets, out):
        q = np.empty(SCRATCH, np.int64)
        for g in range(offsets.size - 1):
            pack_group(x, x.view(np.uint8), g, inv_step, code, out, offsets[g], offsets[g + 1],
                       x.itemsize, q)

    @njit
    def unpack(buf, code, offsets, step, inv_step, out):
        q = np.empty(SCRATCH, np.int64)
        bad = 0
        for g in range(offsets.size - 1):
            bad += not unpack_group(buf, offsets[g], offsets[g + 1], g, code, step, inv_step,
                                    out, out.view(np.uint8), out.itemsize, q)
        return bad

    return pack, unpack


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_the_scalar_planes_write_and_read_the_vector_drivers_bytes(dtype):
    """errbound_block's scalar pack and unpack (the format's reference) write the CPU
    codec's stream (vector planes, bit deposit and extract) byte for byte and decode it to
    its values, on every coding, whether bytes follow the stream or not."""
    pack, unpack = _scalar_drivers()
    rng = np.random.default_rng(12)
    n = 4 * 8 * BLOCK + 19
    for x in [_data(kind, n, dtype) for kind in KINDS] + [
            np.where(rng.random(n) < 0.5, 0.0, rng.standard_normal(n))]:
        x = np.asarray(x, dtype)
        for tol in (1e-2, 1e-5):
            c = get_codec("errbound", tolerance=tol, relative=True)
            s = c.encode(x)
            if c.bound(x) == 0:
                continue
            step, code, offsets = c.read_layout(s, x.size, x.dtype)
            mine = s.copy()
            mine[offsets[0]:] = 0
            pack(x, 1.0 / step, code, offsets, mine)
            np.testing.assert_array_equal(mine, s)
            y = np.empty_like(x)
            assert unpack(s, code, offsets, step, 1.0 / step, y) == 0
            np.testing.assert_array_equal(y.view(np.uint8),
                                          c.decode(s, out=np.empty_like(x)).view(np.uint8))
            # bytes after the stream: the last mask blocks' planes read by 8-byte loads too
            padded = np.concatenate([s, np.full(16, 0xA5, np.uint8)])
            np.testing.assert_array_equal(
                y.view(np.uint8), c.decode(padded, out=np.empty_like(x)).view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_codes_no_encoder_writes_decode_as_the_scalar_code_does(dtype):
    """The CPU decoder's 32-bit lanes give the scalar decoder's values (int64 lanes) on the
    widest codes too, which no encoder writes: a mask block's codes 2**32 - 1 (zigzag
    codes 2**32, past 32 bits) in its last two lanes, delta blocks of each order predicting from
    it (the scalar decoder's history holds 2**31, the vector one's -2**31) and a width
    block's 2**32 - 1; the mask block's value is decoded by the format's arithmetic by
    hand."""
    from mpicomp.kernels.errbound_layout import MASK

    _, unpack = _scalar_drivers()
    step = 0.5
    ones = np.full(4, 0xFF, np.uint8)
    blocks = [  # (code byte, payload)
        (MASK + 32, np.concatenate([np.array([0, 0, 0, 0xC0], np.uint8), ones, ones])),
        (DELTA3 + 1, ones), (DELTA2 + 1, ones),
        (MASK + 32, np.concatenate([np.array([0, 0, 0, 0x80], np.uint8), ones])),
        (DELTA + 2, np.tile(ones, 2)), (32, np.full(4 * 32, 0xFF, np.uint8)),
    ]
    payload = np.concatenate([p for _, p in blocks])
    n = BLOCK * len(blocks)
    stream = np.concatenate([np.frombuffer(np.float64(step).tobytes(), np.uint8),
                             np.array([c for c, _ in blocks], np.uint8),
                             np.frombuffer(np.uint16(payload.size).tobytes(), np.uint8),
                             payload])
    c = get_codec("errbound", tolerance=step / 2)
    got = c.decode(stream, out=np.empty(n, dtype))
    step_, code, offsets = c.read_layout(stream, n, np.dtype(dtype))
    want = np.empty(n, dtype)
    assert unpack(stream, code, offsets, step_, 1.0 / step_, want) == 0
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # zigzag 2**32 is the integer 2**31, which wraps to -2**31 in the decoder's int32
    assert (got[BLOCK - 2 : BLOCK] == dtype(-2.0**31 * step)).all()
    assert not got[: BLOCK - 2].any()


def _two_pass_stream(c, x):
    """The stream of ``x`` by the codes pass (the scalar pricing) and the packing."""
    from mpicomp.codecs.errbound import _offsets, _sections, step_of
    from mpicomp.kernels import errbound_cpu

    bound = c.bound(x)
    step = step_of(bound)
    inv_step = 1.0 / step if step > 0 else 0.0
    two = np.zeros(c.encoded_nbytes(x.size, x.dtype), np.uint8)
    code, sizes = _sections(two, x.size)
    assert errbound_cpu.codes(x, inv_step, step, bound, x.dtype == np.float32, code,
                              sizes) == 0
    offsets = _offsets(sizes, x.size)
    two[:8] = np.frombuffer(np.float64(step).tobytes(), np.uint8)
    errbound_cpu.pack(x, x.view(np.uint8), inv_step, code, offsets, two, x.itemsize)
    return two[:offsets[-1]], code


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_the_one_pass_encode_writes_the_two_pass_bytes(dtype):
    """The codec's one-pass encode (groups written from their raw bytes' place, then moved
    to their offsets) against the codes pass and the packing at offsets (the CUDA
    kernels' steps), over several parallel iterations' runs of groups: compressible runs
    that move far, raw runs that move a few bytes or not at all; the one pass prices full
    blocks on 32-bit lanes (``errbound_pricing``), the codes pass with the scalar code."""
    rng = np.random.default_rng(13)
    run = 16 * 8 * BLOCK  # (values of one parallel iteration's run of groups)
    n = 5 * run + 77
    mixed = rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)
    mixed[:run] = 0  # a first run of zeros: every later run moves
    mixed[3 * run:4 * run] = np.sin(np.arange(run) / 50.0)
    wave = np.sin(np.arange(n) / 50.0)  # delta blocks, each after a block out of range (raw)
    for b in range(0, n // BLOCK, 3):
        wave[b * BLOCK:(b + 1) * BLOCK] = 1e12
    # integers around the 32-bit pricing's limits (2**27, the history's too), past 31 bits,
    # and residuals of 32 bits and more, in units of the first tolerance's step (0.02)
    # (a block of 2**31 - 2**8 after one of its negative: a first residual that wraps to
    # 10 bits modulo 2**32, where the scalar code sees 33)
    magnitude = rng.choice([2.0**4, 2.0**20, 2.0**26, 2.0**27, 2.0**28, 2.0**30,
                            2.0**31 - 2.0**8, 2.0**32], n // BLOCK + 1)
    magnitude *= np.where(rng.random(magnitude.size) < 0.5, -1, 1)
    wide = np.repeat(magnitude, BLOCK)[:n] * (1 + rng.integers(-3, 4, n) * 2.0**-26) * 0.02
    wide[(rng.random(n) < 0.2) & (np.abs(wide) < 1e6)] = 0.0  # (mask blocks)
    for x, relative in [(_data(kind, n, dtype), True) for kind in KINDS] + [
            (mixed, True), (wave, False), (wide, False)]:
        after_raw = x is wave
        x = np.asarray(x, dtype)
        for tol in (1e-2, 1e-6):
            c = get_codec("errbound", tolerance=tol, relative=relative)
            two, code = _two_pass_stream(c, x)
            np.testing.assert_array_equal(c.encode(x), two)
            if after_raw:  # (the case it is there for: delta blocks after raw ones)
                assert RAW in code and any(DELTA <= v <= DELTA3 + WIDEST for v in code)


def test_float32_values_at_rounding_boundaries_code_as_in_float64():
    """float32 blocks are quantized in single precision unless a lane lies near a rounding
    boundary (``errbound_pricing._quantize_single``): values at and around the midpoints
    ``(k + 1/2) step`` (to a few units of float32's last place, where single and double
    precision round apart), values whose decoded float32 misses the bound by its last
    place (magnitudes near ``2**23`` bounds), integers near the single-precision path's
    limit ``2**22``, and steps at and past its scale limits (``2**-100``, ``2**100``)
    give the scalar float64 pricing's bytes, one such lane in a block of ordinary values
    or every lane."""
    rng = np.random.default_rng(14)
    n = 8 * 8 * BLOCK
    checked = 0
    for step in (0.02, 2.0**-100, 2.0**-101, 2.0**100 * 1.5, 3.0):
        k = rng.integers(-2**21, 2**21, n).astype(np.float64)
        k[: n // 2] = rng.integers(-300, 300, n // 2)
        mid = ((k + 0.5) * step).astype(np.float32)
        ulps = rng.integers(-4, 5, n).astype(np.int32)  # (the bits' neighbours: ulps apart)
        near = (mid.view(np.int32) + ulps).view(np.float32)
        ordinary = (rng.standard_normal(n) * 100 * step).astype(np.float32)
        one_lane = ordinary.copy()
        one_lane[::BLOCK] = near[::BLOCK]  # (a single boundary lane a block)
        edge = (rng.choice([2.0**22 - 1, 2.0**22, 2.0**22 + 1, 2.0**23, 2.0**24], n)
                + rng.random(n)) * step * np.where(rng.random(n) < 0.5, -1, 1)
        for x in (mid, near, one_lane, ordinary, edge.astype(np.float32)):
            x = np.asarray(x, np.float32)
            if not np.isfinite(x).all():
                continue
            c = get_codec("errbound", tolerance=step / 2)
            two, code = _two_pass_stream(c, x)
            np.testing.assert_array_equal(c.encode(x), two)
            checked += 1
    assert checked >= 20


def test_the_step_is_a_float32_value_within_twice_the_bound():
    """The codec's step is ``2 * bound`` rounded down to a float32 value (every value stays
    within its bound), ``2 * bound`` itself where that lies outside float32's normal
    range."""
    from mpicomp.codecs.errbound import step_of

    rng = np.random.default_rng(15)
    for bound in [*rng.uniform(1e-8, 1e3, 200), 0.25, 1.5, 2.0**-126, 2.0**126]:
        got = step_of(float(bound))
        assert float(np.float32(got)) == got and got <= 2 * bound
        assert got > 2 * bound * (1 - 2.0**-23)
    tiny = 2.0**-128  # (twice it below float32's normal range)
    huge = 2.0**128
    assert step_of(tiny) == 2 * tiny and step_of(huge) == 2 * huge and step_of(0.0) == 0.0
    x = rng.standard_normal(1000).astype(np.float32)
    c = get_codec("errbound", tolerance=0.1 / 2, relative=False)
    s = c.encode(x)
    below = float(np.nextafter(np.float32(0.1), np.float32(0)))  # (float32(0.1) > 0.1)
    assert np.frombuffer(s[:8].tobytes(), np.float64)[0] == below
    assert np.abs(c.decode(s, out=np.empty_like(x)) - x).max() <= 0.05


def _width_planes(codes: np.ndarray, w: int) -> np.ndarray:
    """The ``w`` plane words of 32 codes (docs/format.md: plane ``j``'s bit ``i`` is bit
    ``w - 1 - j`` of code ``i``)."""
    words = [sum(((int(z) >> (w - 1 - j)) & 1) << i for i, z in enumerate(codes))
             for j in range(w)]
    return np.array(words, "<u4").view(np.uint8)


def test_float32_values_made_in_single_precision_are_the_float64_products():
    """The CPU decoder makes a full float32 block's values as float32 products where the
    step is a float32 value and every integer fits 24 bits
    (``errbound_vector._store_single``), else as the format's float64 products rounded to
    float32: the scalar decoder's bits either way, for integers at and around ``2**24``,
    steps that are float32 values or not, and products that overflow float32 or fall
    into its subnormals; width, zero mask and delta blocks."""
    from mpicomp.kernels.errbound_layout import MASK

    _, unpack = _scalar_drivers()
    rng = np.random.default_rng(16)
    lanes = np.arange(BLOCK)

    def zig(v):
        v = np.asarray(v, np.int64)
        return np.where(v >= 0, 2 * v, -2 * v - 1)

    edges = np.array([2**24 - 1, 2**24, 2**24 + 1, 2**24 + 2, 2**25, 2**30, 2**31 - 1])
    blocks = []  # (code byte, payload): width 32 blocks of integers around 2**24, then
    for k in range(6):  # a mask block and a delta block of small ones
        v = rng.integers(-2**24, 2**24 + 1, BLOCK)
        if k:  # (block 0 all within 24 bits; the others each with one lane past or at it)
            v[rng.integers(BLOCK)] = rng.choice(edges) * rng.choice([-1, 1])
        blocks.append((32, _width_planes(zig(v), 32)))
    present = rng.random(BLOCK) < 0.5
    m = int(np.sum(present.astype(np.int64) << lanes))
    codes = zig(rng.integers(-2**20, 2**20, int(present.sum()))) - 1
    w = 21
    bits = 0
    for j in range(w):  # (each plane's bits of the non-zeros, one after the other)
        plane = sum(((int(z) >> (w - 1 - j)) & 1) << t for t, z in enumerate(codes))
        bits |= plane << (j * len(codes))
    size = -(-len(codes) * w // 8)
    blocks.append((MASK + w, np.concatenate([np.array([m], "<u4").view(np.uint8),
                                             np.frombuffer(bits.to_bytes(size, "little"),
                                                           np.uint8)])))
    blocks.append((DELTA + 12, _width_planes(zig(rng.integers(-2**11, 2**11, BLOCK)), 12)))
    payload = np.concatenate([p for _, p in blocks])
    n = BLOCK * len(blocks)
    c = get_codec("errbound", tolerance=0.25)
    steps = [0.5, float(np.float32(0.1)), 0.1, 2.0**100, float(np.float32(3e38)), 2.0**-140,
             3 * 2.0**-149, 2.0**-160]
    decoded = []
    for step in steps:
        stream = np.concatenate([np.frombuffer(np.float64(step).tobytes(), np.uint8),
                                 np.array([b for b, _ in blocks], np.uint8),
                                 np.frombuffer(np.uint16(payload.size).tobytes(), np.uint8),
                                 payload])
        got = c.decode(stream, out=np.empty(n, np.float32))
        step_, code, offsets = c.read_layout(stream, n, np.dtype(np.float32))
        want = np.empty(n, np.float32)
        assert unpack(stream, code, offsets, step_, 1.0 / step_, want) == 0
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        decoded.append(want)
    assert np.isinf(decoded[3]).any() and np.isinf(decoded[4]).any()  # (past float32's range)
    for tiny in decoded[5:]:  # (float32's subnormals)
        assert ((tiny != 0) & (np.abs(tiny) < np.finfo(np.float32).tiny)).any()


def test_a_variable_codecs_chunk_is_cut_for_a_fraction_of_its_upper_bound():
    """The collectives in pieces cut an errbound chunk as if its stream were VARIABLE_RATIO
    times smaller than its upper bound (the raw bytes), not for the upper bound (8x the
    pieces, each a kernel call and a message), and a fixed-rate codec's for its size."""
    from mpicomp.algorithms.common import MAX_PIECES, PIECE_BYTES, VARIABLE_RATIO, pieces_of

    n = 1 << 20
    errbound = get_codec("errbound", tolerance=1e-3)
    upper = errbound.encoded_nbytes(n, np.float32)
    assert pieces_of(errbound, n, np.float32) == round(upper / VARIABLE_RATIO / PIECE_BYTES)
    assert pieces_of(errbound, n, np.float32) < min(MAX_PIECES, round(upper / PIECE_BYTES))
    bitplane = get_codec("bitplane", rate=8.25)
    assert pieces_of(bitplane, n, np.float32) == round(
        bitplane.encoded_nbytes(n, np.float32) / PIECE_BYTES)


def test_bit_deposit_and_extract_without_bmi2_match_their_definition():
    """The loops the CPU kernels use where the host has no BMI2 (``pdep``/``pext``) against
    a Python reading of their definition, and the host's instructions where it has them."""
    from numba import njit

    from mpicomp.kernels import errbound_vector as ev

    deposit_loop, extract_loop = ev._deposit_loop, ev._extract_loop
    deposit, extract = ev.deposit, ev.extract

    @njit
    def loops(values, masks, out):
        for i in range(values.size):
            out[i, 0] = deposit_loop(values[i], masks[i])
            out[i, 1] = extract_loop(values[i], masks[i])

    @njit
    def host(values, masks, out):
        for i in range(values.size):
            out[i, 0] = deposit(values[i], masks[i])
            out[i, 1] = extract(values[i], masks[i])

    rng = np.random.default_rng(13)
    values = rng.integers(0, 2**32, 500, dtype=np.uint64)
    masks = rng.integers(0, 2**32, 500, dtype=np.uint64)
    masks[:3] = [0, 2**32 - 1, 1 << 31]
    got = np.empty((values.size, 2), np.uint64)
    loops(values, masks, got)
    for v, m, (dep, ext) in zip(values.tolist(), masks.tolist(), got.tolist()):
        lanes = [i for i in range(32) if m >> i & 1]
        assert dep == sum(((v >> k) & 1) << i for k, i in enumerate(lanes))
        assert ext == sum(((v >> i) & 1) << k for k, i in enumerate(lanes))
    mine = np.empty_like(got)
    host(values, masks, mine)
    np.testing.assert_array_equal(mine, got)
