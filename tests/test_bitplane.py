"""The ``bitplane`` codec: kernel vs NumPy reference byte for byte, error bound, API.

The per-value error bound checked here is the one in docs/format.md: a
value is within half its block's quantum of the original, or within one
quantum when its rounded magnitude was clamped.
"""
from __future__ import annotations

import numpy as np
import pytest
from bitplane_reference import (
    reference_decode,
    reference_encode,
    reference_error_bound,
)

from mpicomp.codecs import BitplaneCodec, get_codec
from mpicomp.errors import UncompressibleError

SIZES = [0, 1, 31, 32, 33, 1000, 4097, 100000]
BLOCK_SIZES = [8, 16, 32, 64]
DTYPES = [np.float32, np.float64]
KINDS = ["gaussian", "gradient", "zeros", "subnormal", "mixed", "pow2", "negzero"]
_EBITS = {np.float32: 8, np.float64: 16}
_PMAX = {np.float32: 24, np.float64: 53}
_EBITS_FIELD = {np.float32: 8, np.float64: 11}  # the exponent field of the dtype


def make_data(kind: str, n: int, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if kind == "gaussian":
        x = rng.standard_normal(n)
    elif kind == "gradient":  # Gaussian times a log-normal scale per value
        x = rng.standard_normal(n) * np.exp(2.0 * rng.standard_normal(n))
    elif kind == "zeros":
        x = np.zeros(n)
    elif kind == "subnormal":  # subnormals of dt, some zeros and a few tiny normals
        tiny = np.finfo(dt).tiny
        x = rng.uniform(-1, 1, n) * tiny
        x[rng.random(n) < 0.1] = 0.0
        x[rng.random(n) < 0.05] *= 3.0
    elif kind == "mixed":  # magnitudes 1e-30 .. 1e30 in the same blocks
        x = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-30, 30, n)
    elif kind == "pow2":  # exact powers of two, both signs, wide exponent range
        x = rng.choice([-1.0, 1.0], n) * np.ldexp(1.0, rng.integers(-40, 40, n))
    elif kind == "negzero":  # -0.0 among small values and exact zeros
        x = rng.standard_normal(n) * 1e-3
        x[rng.random(n) < 0.3] = -0.0
        x[rng.random(n) < 0.1] = 0.0
    else:
        raise ValueError(kind)
    return x.astype(dt)


def rates_for(dtype, bs: int) -> list[float]:
    """Lowest and highest rate allowed for dtype, and a few in between."""
    e = _EBITS[dtype] / bs
    return [2 + e, 4.25, 8.25, 11 + e, _PMAX[dtype] + e]


def check_bound(x: np.ndarray, y: np.ndarray, nplanes: int, bs: int) -> None:
    quantum, bound = reference_error_bound(x, nplanes, bs)
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    bad = np.flatnonzero(err > bound)
    assert bad.size == 0, (
        f"{bad.size} values beyond the bound, first {bad[0]}: x={x[bad[0]]!r} "
        f"y={y[bad[0]]!r} quantum={quantum[bad[0]]!r}"
    )
    # every sign survives, also where the magnitude rounds to zero
    assert np.array_equal(np.signbit(y), np.signbit(x))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_matches_reference(dtype, bs, kind):
    rates = rates_for(dtype, bs)
    for i, n in enumerate(SIZES):
        x = make_data(kind, n, dtype, seed=n)
        # every size with two rates; the largest size with all rates
        for rate in rates if n in (33, 100000) else rates[i % 2 :: 2][:2]:
            c = get_codec("bitplane", rate=rate, block_size=bs)
            p = c.nplanes(dtype)
            buf = c.encode(x)
            ref = reference_encode(x, p, bs)
            assert buf.size == ref.size == c.encoded_nbytes(n, dtype)
            assert np.array_equal(buf, ref), f"encode differs: n={n} rate={rate}"
            y = c.decode(buf, count=n, dtype=dtype)
            yr = reference_decode(ref, n, dtype, p, bs)
            assert y.dtype == np.dtype(dtype) and y.shape == (n,)
            assert np.array_equal(y.view(np.uint8), yr.view(np.uint8)), f"decode differs: n={n}"
            check_bound(x, y, p, bs)
            # decoding is idempotent: re-encoding the decoded values gives the same bytes
            assert np.array_equal(c.encode(y), buf)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_p_with_block_size_32(dtype):
    """The vector block code (block size 32) against the reference, for every P.

    Each P ends its codes in another place of the 8-bit chunks the planes
    are built from; the data mixes zeros, subnormals, huge and tiny values.
    """
    n = 32 * 24 + 7
    x = np.concatenate([make_data(kind, n // 5 + 1, dtype, seed=3)
                        for kind in ("gradient", "subnormal", "mixed", "zeros", "negzero")])[:n]
    for p in range(2, _PMAX[dtype] + 1):
        c = BitplaneCodec(rate=p + _EBITS[dtype] / 32, block_size=32)
        assert c.nplanes(dtype) == p
        buf = c.encode(x)
        assert np.array_equal(buf, reference_encode(x, p, 32)), f"encode differs: P={p}"
        y = c.decode(buf, count=n, dtype=dtype)
        yr = reference_decode(buf, n, dtype, p, 32)
        assert np.array_equal(y.view(np.uint8), yr.view(np.uint8)), f"decode differs: P={p}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_any_stream_decodes_like_the_general_path(dtype):
    """Random streams, corrupt exponents included (the all-ones one has no
    float32 quantum): the vector path decodes them bit for bit like the
    general block code, NaN and infinity included."""
    from mpicomp.kernels import bitplane_cpu

    rng = np.random.default_rng(7)
    itemsize = np.dtype(dtype).itemsize
    general = bitplane_cpu._DECODERS[(itemsize, bitplane_cpu._GENERAL)]
    n = 32 * 300
    for p in (2, 3, 8, 9, 16, 17, 24) + ((25, 40, 53) if itemsize == 8 else ()):
        c = BitplaneCodec(rate=p + _EBITS[dtype] / 32, block_size=32)
        buf = rng.integers(0, 256, c.encoded_nbytes(n, dtype), dtype=np.uint8)
        emax = rng.integers(0, 1 << _EBITS_FIELD[dtype], n // 32)  # within the exponent field
        emax[:3] = [0, 1, (1 << _EBITS_FIELD[dtype]) - 1]
        buf[p * 4 * (n // 32):].view("<u1" if itemsize == 4 else "<u2")[:] = emax
        y = c.decode(buf, count=n, dtype=dtype)
        want = np.empty(n, dtype)
        general(buf, 32, p, bitplane_cpu.quantum_table(itemsize, p), want)
        assert np.array_equal(y.view(np.uint8), want.view(np.uint8)), f"P={p}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_exponent_extremes(dtype):
    """Largest finite values, min normal, smallest subnormal; clamping at the top."""
    fi = np.finfo(dtype)
    smallest = np.nextafter(dtype(0), dtype(1))
    x = np.array(
        [fi.max, -fi.max, fi.tiny, -fi.tiny, smallest, -smallest, 0.0, -0.0] * 8, dtype=dtype
    )
    for bs in BLOCK_SIZES:
        for rate in rates_for(dtype, bs):
            c = BitplaneCodec(rate=rate, block_size=bs)
            p = c.nplanes(dtype)
            buf = c.encode(x)
            assert np.array_equal(buf, reference_encode(x, p, bs))
            y = c.decode(buf, count=x.size, dtype=dtype)
            assert np.all(np.isfinite(y))
            check_bound(x, y, p, bs)


def test_clamped_value():
    """A value that rounds up to 2**m is stored as 2**m - 1 and stays within one quantum."""
    c = BitplaneCodec(rate=4.25, block_size=32)  # P = 4, m = 3
    x = np.zeros(32, np.float32)
    x[0] = 1.99  # Emax = 127, quantum = 2**(1 - 3) = 0.25: 1.99 / 0.25 = 7.96 -> 8 -> 7
    y = c.decode(c.encode(x), count=32, dtype=np.float32)
    assert y[0] == 1.75
    quantum, bound = reference_error_bound(x, 4, 32)
    assert quantum[0] == 0.25 and bound[0] == 0.25


def test_exact_values_survive():
    """Values with at most m significant bits at the block's scale are exact."""
    c = BitplaneCodec(rate=8.25)  # P = 8, m = 7
    x = np.arange(-64, 64, dtype=np.float32)  # |x| < 128 = 2**7 at quantum 1
    x[x.size // 2] = -0.0
    y = c.decode(c.encode(x), out=np.empty_like(x))
    assert np.array_equal(y.view(np.uint32), x.view(np.uint32))


def test_documented_example_bytes():
    """The example in docs/format.md, section bitplane."""
    x = np.array([1.0, -0.5, 0.25, 3.0], dtype=np.float32)
    c = BitplaneCodec(rate=9, block_size=8)  # P = floor(9 - 1) = 8
    assert c.encode(x).tobytes().hex(" ") == "02 08 09 02 04 00 00 00 80"


@pytest.mark.parametrize("dtype", DTYPES)
def test_negative_zero_roundtrip(dtype):
    c = BitplaneCodec(rate=8.25)
    x = np.array([-0.0] * 5 + [0.0] * 3 + [1.0, -1e-30], dtype=dtype)
    y = c.decode(c.encode(x), count=x.size, dtype=dtype)
    assert np.all(y[:8] == 0)
    assert np.array_equal(np.signbit(y[:8]), np.signbit(x[:8]))
    assert y[9] == 0 and np.signbit(y[9])  # too small for its block: -0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, 37, 99])  # first block, middle, partial last block
def test_nonfinite_rejected(dtype, bad, where):
    x = make_data("gaussian", 100, dtype)
    x[where] = bad
    x[where + 1 :: 50] = bad
    c = BitplaneCodec(rate=8.25, block_size=32)
    with pytest.raises(UncompressibleError) as info:
        c.encode(x)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.reason == "nonfinite" and err.codec_id == "bitplane"
    assert f"first at index {where}" in str(err)
    assert f"{np.count_nonzero(~np.isfinite(x))} NaN/Inf value(s)" in str(err)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sizes_and_out(dtype):
    c = BitplaneCodec(rate=8.25, block_size=32)
    p = c.nplanes(dtype)
    e = _EBITS[dtype]
    for n in SIZES:
        nbytes = -(-n // 32) * (p * 4 + e // 8)
        assert c.encoded_nbytes(n, dtype) == nbytes
        if n:
            assert c.bits_per_value(n, dtype) == 8 * nbytes / n
    assert c.bits_per_value(32 * 1000, np.float32) == 8.25
    assert c.bits_per_value(32 * 1000, np.float64) == 7.5

    x = make_data("gradient", 1000, dtype)
    n = c.encoded_nbytes(x.size, dtype)
    big = np.full(n + 10, 0xAB, dtype=np.uint8)
    head = c.encode(x, out=big)
    assert head.size == n and np.shares_memory(head, big)
    assert np.all(big[n:] == 0xAB)
    assert np.array_equal(head, c.encode(x))
    # an unaligned output and input buffer
    raw = np.empty(n + 1, dtype=np.uint8)
    odd = c.encode(x, out=raw[1:])
    assert np.array_equal(odd, head)
    out = np.empty_like(x)
    assert c.decode(odd, out=out) is out
    assert np.array_equal(out, c.decode(head.tobytes(), count=x.size, dtype=dtype))
    # a 2-D input is coded as its flat C-order buffer
    assert np.array_equal(c.encode(x.reshape(10, 100)), head)


def test_nplanes_and_config():
    c = get_codec("bitplane", rate=8.25, block_size=32)
    assert (c.nplanes(np.float32), c.nplanes(np.float64)) == (8, 7)
    assert get_codec("bitplane").get_config() == {"id": "bitplane", "rate": 8.25, "block_size": 32}
    c2 = get_codec({"id": "bitplane", "rate": 4.25, "block_size": 16})
    assert c2.nplanes(np.float32) == 3 and get_codec(c2.get_config()) == c2
    assert BitplaneCodec(rate=np.float32(6.5), block_size=np.int64(8)).nplanes("float32") == 5


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"block_size": 12}, ValueError, ["block_size", "[8, 16, 32, 64]", "12"]),
        ({"block_size": 32.0}, TypeError, ["block_size", "integer"]),
        ({"block_size": True}, TypeError, ["block_size"]),
        ({"rate": "8"}, TypeError, ["rate", "'8'"]),
        ({"rate": None}, TypeError, ["rate"]),
        ({"rate": 2.0}, ValueError, ["rate", "[2.25, 53.5]", "got 2"]),
        ({"rate": 60.0}, ValueError, ["rate", "60"]),
        ({"rate": float("nan")}, ValueError, ["rate"]),
        ({"rate": 2.5, "block_size": 8}, ValueError, ["[3, 55]", "2.5"]),
    ],
)
def test_bad_parameters(kwargs, exc, words):
    with pytest.raises(exc) as info:
        get_codec("bitplane", **kwargs)
    for w in words:
        assert w in str(info.value)


def test_dtype_specific_rate_limits():
    # P = 29 is fine for float64 but beyond float32's 24 bits
    c = BitplaneCodec(rate=30.0)
    assert c.nplanes(np.float64) == 29
    x = np.ones(10, np.float32)
    for call in (lambda: c.encode(x), lambda: c.encoded_nbytes(10, np.float32),
                 lambda: c.decode(np.zeros(100, np.uint8), count=10, dtype=np.float32)):
        with pytest.raises(ValueError, match=r"P = 29 .*float32 needs P in \[2, 24\]"):
            call()
    # rate 2.3 gives P = 2 for float32 but P = 1 for float64
    c = BitplaneCodec(rate=2.3)
    assert c.nplanes(np.float32) == 2
    expect = r"P = 1 .*float64 needs P in \[2, 53\], i.e. a rate in \[2.5, 53.5\]"
    with pytest.raises(ValueError, match=expect):
        c.encode(np.ones(4))
    with pytest.raises(TypeError, match="supports dtypes"):
        BitplaneCodec().encode(np.ones(4, np.float16))
