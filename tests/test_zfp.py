"""The ``zfp`` codec against LLNL zfp (zfpy): byte-identical streams both ways."""
from __future__ import annotations

import numpy as np
import pytest
from zfp_oracle import padded_array, zfpy_decode, zfpy_encode

from mpicomp.codecs import get_codec
from mpicomp.errors import UncompressibleError

DTYPES = [np.float32, np.float64]
RNG = np.random.default_rng(1234)


def gradient_like(n: int, dtype=np.float32) -> np.ndarray:
    return (RNG.standard_normal(n) * np.exp(2 * RNG.standard_normal(n))).astype(dtype)


def data_kinds(n: int, dtype) -> dict[str, np.ndarray]:
    finfo = np.finfo(dtype)
    t = np.arange(n)
    kinds = {
        "gaussian": RNG.standard_normal(n).astype(dtype),
        "gradient": gradient_like(n, dtype),
        "smooth": np.sin(t / 7.0).astype(dtype),
        "zeros": np.zeros(n, dtype),
        "negzero": np.full(n, -0.0, dtype),
        "const": np.full(n, 3.25, dtype),
        "pow2": (2.0 ** RNG.integers(-20, 20, n) * RNG.choice([-1, 1], n)).astype(dtype),
        "subnormal": (RNG.standard_normal(n) * finfo.smallest_subnormal * 64).astype(dtype),
        "tiny_normal": (RNG.standard_normal(n) * finfo.tiny * 8).astype(dtype),
        "scales": (RNG.standard_normal(n) * 10.0 ** RNG.uniform(-30, 30, n)).astype(dtype),
        "blockscales": np.repeat(10.0 ** RNG.uniform(-30, 30, -(-n // 4)), 4)[:n].astype(dtype)
        * RNG.standard_normal(n).astype(dtype),
        "huge": (RNG.uniform(-1, 1, n) * (finfo.max / 2)).astype(dtype),
    }
    sparse = np.zeros(n, dtype)
    sparse[:: 7] = RNG.standard_normal(len(sparse[::7]))
    kinds["sparse"] = sparse
    return kinds


def check_both_ways(x: np.ndarray, rate: float, dims: int) -> None:
    """Our stream equals zfpy's; our decoder and zfpy's agree bit for bit on it."""
    codec = get_codec("zfp", rate=rate, dims=dims)
    ours = codec.encode(x)
    ref = zfpy_encode(x, codec.rate, dims)
    assert ours.size == codec.encoded_nbytes(x.size, x.dtype) == ref.size
    if not np.array_equal(ours, ref):
        first = int(np.flatnonzero(ours != ref)[0])
        raise AssertionError(
            f"stream differs from zfpy at byte {first} of {ref.size} "
            f"(dtype {x.dtype}, n {x.size}, rate {codec.rate}, dims {dims})"
        )
    mine = codec.decode(ref, out=np.empty_like(x))
    theirs = zfpy_decode(ours, x.dtype, x.size, codec.rate, dims)
    np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_every_legal_rate(dtype, dims):
    """Every rate on the 1/4**dims grid, from the smallest allowed up to all bits of the dtype."""
    size = 4 ** dims
    maxbits_min = 10 if dtype == np.float32 else 13
    top = 8 * np.dtype(dtype).itemsize
    x = gradient_like(2 * size + size // 2 + 1, dtype)
    for maxbits in range(maxbits_min, top * size + 1):
        check_both_ways(x, maxbits / size, dims)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("rate", [4, 8, 16, 21.5, 32])
def test_data_kinds(dtype, dims, rate):
    for name, x in data_kinds(3 * 4 ** dims + 5, dtype).items():
        try:
            check_both_ways(x, rate, dims)
        except AssertionError as exc:
            raise AssertionError(f"data kind {name!r}: {exc}") from exc


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_partial_last_block(dtype, dims):
    """Every tail length 1 .. 4**dims - 1, after zero, one and several full blocks."""
    size = 4 ** dims
    for full in (0, 1, 3):
        for tail in range(1, size):
            x = gradient_like(full * size + tail, dtype)
            check_both_ways(x, 8, dims)
            check_both_ways(x, 16.5, dims)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims,rate", [(1, 4), (1, 8), (1, 16), (1, 24), (2, 8), (3, 8)])
def test_large_buffers(dtype, dims, rate):
    """Many parallel chunks, chunk boundaries and both coding paths, mixed block scales."""
    n = 300_001
    x = gradient_like(n, dtype)
    x[1000:1100] = 0
    x[5000:5400] *= np.asarray(1e-33, dtype)
    check_both_ways(x, rate, dims)


def test_padded_array_rule():
    """The documented padding of a partial 2D/3D block (docs/format.md) on a small case."""
    x = np.arange(1, 7, dtype=np.float32)  # 6 values, dims=2: rows [1 2 3 4] [5 6 . .]
    np.testing.assert_array_equal(padded_array(x, 2), [[1, 2, 3, 4], [5, 6, 6, 5]])
    p = padded_array(np.arange(1, 7, dtype=np.float32), 3)[0]
    np.testing.assert_array_equal(p[:2], [[1, 2, 3, 4], [5, 6, 6, 5]])
    np.testing.assert_array_equal(p[2:], [[5, 6, 6, 5], [1, 2, 3, 4]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_tiny_blocks_are_zfps_and_bounded(dtype):
    """Blocks below zfp's scale range code to zfp's garbage, which stays tiny (docs/format.md)."""
    limit = 2.0 ** -98 if dtype == np.float32 else 2.0 ** -962
    x = (RNG.uniform(-1, 1, 4000) * limit).astype(dtype)
    codec = get_codec("zfp", rate=16)
    check_both_ways(x, 16, 1)
    y = codec.decode(codec.encode(x), out=np.empty_like(x))
    assert np.abs(y).max() <= 4 * limit


@pytest.mark.parametrize("dtype", DTYPES)
def test_no_pointwise_bound_but_good_on_smooth_data(dtype):
    """Documented accuracy: smooth data at rate 16 keeps ~4 decimal digits of the block max."""
    x = np.sin(np.arange(100_000) / 100.0).astype(dtype)
    codec = get_codec("zfp", rate=16)
    y = codec.decode(codec.encode(x), out=np.empty_like(x))
    assert np.abs(y - x).max() <= 1e-4


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_is_refused(bad, dtype):
    x = gradient_like(1000, dtype)
    x[517] = bad
    with pytest.raises(UncompressibleError, match="NaN or Inf") as info:
        get_codec("zfp", rate=8).encode(x)
    assert info.value.reason == "nonfinite"


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="rate"):
        get_codec("zfp", rate=2.0, dims=1)  # 8 bits per block: zfpy itself crashes here
    with pytest.raises(ValueError, match="rate"):
        get_codec("zfp", rate=-1)
    with pytest.raises(TypeError, match="rate"):
        get_codec("zfp", rate="8")
    with pytest.raises(ValueError, match="dims"):
        get_codec("zfp", rate=8, dims=4)
    with pytest.raises(TypeError, match="dims"):
        get_codec("zfp", rate=8, dims=1.0)
    c = get_codec("zfp", rate=2.5)  # 10 bits: enough for float32, not for float64
    c.encode(np.ones(8, np.float32))
    with pytest.raises(ValueError, match="float64 needs at least 13 bits"):
        c.encode(np.ones(8, np.float64))


def test_rate_is_a_maximum():
    """The exact rate is the largest grid rate not above the request."""
    assert get_codec("zfp", rate=8.2, dims=1).rate == 8.0
    assert get_codec("zfp", rate=8.3, dims=1).rate == 8.25
    assert get_codec("zfp", rate=8.3, dims=3).rate == 531 / 64
    c = get_codec("zfp", rate=5, dims=1)
    assert c.bits_per_value(4096, np.float32) == 5.0
    assert c.bits_per_value(5, np.float32) == 64 / 5  # two blocks padded to one word


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims,rate", [(1, 4), (1, 16), (1, 24), (2, 8), (3, 5)])
def test_arbitrary_streams_decode_as_zfp_does(dtype, dims, rate):
    """Random bytes (not made by an encoder) decode exactly as zfp decodes them.

    This reaches the decoder's corner cases: truncated group tests, huge
    exponents and the integer wraparound of the inverse transform.
    """
    n = 50 * 4 ** dims + 3
    codec = get_codec("zfp", rate=rate, dims=dims)
    rng = np.random.default_rng(rate * 10 + dims)
    stream = rng.integers(0, 256, codec.encoded_nbytes(n, dtype), dtype=np.uint8)
    with np.errstate(all="ignore"):
        mine = codec.decode(stream, count=n, dtype=dtype)
    theirs = zfpy_decode(stream, np.dtype(dtype), n, codec.rate, dims)
    np.testing.assert_array_equal(mine.view(np.uint8), theirs.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rate", [4, 5.25, 8, 11.5, 16])
def test_one_block_steps_match_the_lockstep_driver(dtype, rate):
    """``encode_block_1d`` / ``decode_block_1d`` (one block, as a GPU thread runs
    them) give the bits and values of the CPU driver, which runs the same
    steps for many blocks in lockstep."""
    from numba import njit

    from mpicomp.kernels.zfp_decode1d import decode_block_1d
    from mpicomp.kernels.zfp_encode1d import encode_block_1d

    @njit
    def one_by_one(xbits, proto, maxbits, blocks, values):
        for b in range(blocks.size):
            blocks[b], _ = encode_block_1d(np.uint64(xbits[4 * b]), np.uint64(xbits[4 * b + 1]),
                                           np.uint64(xbits[4 * b + 2]),
                                           np.uint64(xbits[4 * b + 3]), maxbits, proto)
            v = decode_block_1d(blocks[b], maxbits, proto)
            for i in range(4):
                values[4 * b + i] = v[i]

    x = np.concatenate(list(data_kinds(400, dtype).values()))
    codec = get_codec("zfp", rate=rate)
    blocks = np.zeros(x.size // 4, dtype=np.uint64)
    values = np.empty_like(x)
    one_by_one(x.view(np.uint32 if x.dtype == np.float32 else np.uint64), x.dtype.type(0),
               codec.maxbits, blocks, values)
    stream = codec.encode(x)
    big = int.from_bytes(stream.tobytes(), "little")
    mask = (1 << codec.maxbits) - 1
    expected = [(big >> (b * codec.maxbits)) & mask for b in range(blocks.size)]
    assert [int(v) for v in blocks] == expected
    decoded = codec.decode(stream, out=np.empty_like(x))
    np.testing.assert_array_equal(values.view(np.uint8), decoded.view(np.uint8))
