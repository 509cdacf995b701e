"""The ``cast`` codec: codes vs NumPy references, error bounds, NaN/Inf, overflow, API.

float16 codes are compared with NumPy's own casts; bfloat16 codes with the
vectorized formula of docs/format.md, written here in NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest

from mpicomp.codecs import CastCodec, get_codec
from mpicomp.errors import UncompressibleError

SIZES = [0, 1, 31, 32, 33, 1000, 4097, 100000]
DTYPES = [np.float32, np.float64]
TARGETS = ["float16", "bfloat16"]
KINDS = ["gaussian", "gradient", "zeros", "subnormal", "mixed", "pow2", "negzero", "halfway"]


def make_data(kind: str, n: int, dtype, target: str, seed: int = 0) -> np.ndarray:
    """Finite values that the target can hold (no overflow)."""
    rng = np.random.default_rng(seed)
    top = 6e4 if target == "float16" else 3e38
    if kind == "gaussian":
        x = rng.standard_normal(n)
    elif kind == "gradient":
        x = rng.standard_normal(n) * np.exp(2.0 * rng.standard_normal(n))
    elif kind == "zeros":
        x = np.zeros(n)
    elif kind == "subnormal":  # around the target's and float32's subnormal ranges
        scale = 2.0**-14 if target == "float16" else 2.0**-126
        x = rng.uniform(-2, 2, n) * scale
        x[rng.random(n) < 0.2] *= 2.0**-20
    elif kind == "mixed":  # every magnitude the target holds, down to underflow
        lo = -12 if target == "float16" else -45
        x = rng.choice([-1.0, 1.0], n) * np.minimum(10.0 ** rng.uniform(lo, np.log10(top), n), top)
    elif kind == "pow2":
        e = rng.integers(-30, 16, n) if target == "float16" else rng.integers(-140, 128, n)
        x = rng.choice([-1.0, 1.0], n) * np.ldexp(1.0, e)
    elif kind == "negzero":
        x = rng.standard_normal(n)
        x[rng.random(n) < 0.3] = -0.0
    elif kind == "halfway":  # ties and near-ties of the target (and of float32 for bfloat16)
        if target == "float16":
            h = rng.integers(0, 0x7BFF, n).astype(np.uint16)
            lo = h.view(np.float16).astype(np.float64)
            hi = (h + np.uint16(1)).view(np.float16).astype(np.float64)
        else:
            b = rng.integers(0, 0x7F7E, n).astype(np.uint32) << np.uint32(16)
            lo = b.view(np.float32).astype(np.float64)
            hi = (b + np.uint32(0x10000)).view(np.float32).astype(np.float64)
        x = (lo + hi) / 2
        nudge = rng.integers(-1, 2, n)
        x = np.where(nudge < 0, np.nextafter(x, 0), np.where(nudge > 0, np.nextafter(x, np.inf), x))
        x *= rng.choice([-1.0, 1.0], n)
    else:
        raise ValueError(kind)
    return x.astype(dtype)


def bf16_reference(x: np.ndarray) -> np.ndarray:
    """bfloat16 codes per docs/format.md, in NumPy (float64 goes through float32 first)."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rne = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    nan = (b & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    return np.where(nan, (b >> np.uint64(16)) | np.uint64(0x40), rne).astype(np.uint16)


def f16_reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float16).view(np.uint16)


def check_bound(x: np.ndarray, y: np.ndarray, target: str) -> None:
    """Per-value error bound of docs/format.md, section cast."""
    ax = np.abs(x.astype(np.float64))
    err = np.abs(y.astype(np.float64) - x.astype(np.float64))
    if target == "float16":
        rel, tiny, absb = 2.0**-11, 2.0**-14, 2.0**-25
    elif x.dtype == np.float32:
        rel, tiny, absb = 2.0**-8, 2.0**-126, 2.0**-134
    else:
        rel, tiny, absb = 2.0**-8 + 2.0**-24 + 2.0**-32, 2.0**-126, 2.0**-134 + 2.0**-150
    bound = np.where(ax >= tiny, rel * ax, absb)
    bad = np.flatnonzero(err > bound)
    assert bad.size == 0, f"{bad.size} beyond bound; first x={x[bad[0]]!r} y={y[bad[0]]!r}"
    assert np.array_equal(np.signbit(y), np.signbit(x))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_codes_match_reference(dtype, target, kind):
    c = get_codec("cast", dtype=target)
    ref = f16_reference if target == "float16" else bf16_reference
    for n in SIZES:
        x = make_data(kind, n, dtype, target, seed=n)
        buf = c.encode(x)
        assert buf.size == c.encoded_nbytes(n, dtype) == 2 * n
        codes = buf.view("<u2")
        assert np.array_equal(codes, ref(x)), f"n={n}"
        y = c.decode(buf, count=n, dtype=dtype)
        if target == "float16":
            expect = codes.view(np.float16).astype(dtype)
        else:
            expect = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(dtype)
        assert np.array_equal(y.view(np.uint8), expect.view(np.uint8))
        check_bound(x, y, target)
        assert np.array_equal(c.encode(y), buf)


def test_f16_float32_bit_patterns():
    """A stride through all float32 bit patterns (every sign, exponent and rounding case)."""
    u = np.arange(0, 2**32, 4093, dtype=np.uint64).astype(np.uint32)
    x = u.view(np.float32)
    fin = x[np.isfinite(x) & (np.abs(x) < 65520)]
    c = CastCodec(dtype="float16")
    assert np.array_equal(c.encode(fin).view(np.uint16), f16_reference(fin))
    b = CastCodec(dtype="bfloat16")
    fin = x[np.isfinite(x) & (np.abs(x) < 3.39e38)]
    assert np.array_equal(b.encode(fin).view(np.uint16), bf16_reference(fin))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_code_decodes_exactly(dtype):
    codes = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    f16 = CastCodec(dtype="float16").decode(codes, count=codes.size, dtype=dtype)
    ref = codes.view(np.float16).astype(dtype)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(f16), nan)
    assert np.array_equal(f16[~nan], ref[~nan]) and np.array_equal(np.signbit(f16), np.signbit(ref))
    bf = CastCodec().decode(codes.tobytes(), count=codes.size, dtype=dtype)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        ref = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(dtype)
    assert np.array_equal(bf.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_pass_through(dtype, target):
    c = CastCodec(dtype=target)
    x = make_data("gaussian", 1000, dtype, target)
    x[[0, 10, 999]] = [np.nan, np.inf, -np.inf]
    x[500] = -np.nan
    snan = np.array([0x7F800001 if dtype == np.float32 else 0x7FF0000000000001],
                    dtype=np.uint32 if dtype == np.float32 else np.uint64).view(dtype)
    x[501] = snan[0]  # a signalling NaN whose payload lies below the kept bits
    y = c.decode(c.encode(x), count=x.size, dtype=dtype)
    nan = np.isnan(x)
    assert np.array_equal(np.isnan(y), nan)
    assert np.array_equal(np.signbit(y[nan]), np.signbit(x[nan]))
    assert y[10] == np.inf and y[999] == -np.inf
    check_bound(x[~nan & np.isfinite(x)], y[~nan & np.isfinite(x)], target)


@pytest.mark.parametrize(
    "target, dtype, value",
    [
        ("float16", np.float32, 65520.0),
        ("float16", np.float64, 65520.0),
        ("float16", np.float64, -1e300),
        ("bfloat16", np.float32, np.uint32(0x7F7F8000).view(np.float32)),
        ("bfloat16", np.float32, np.finfo(np.float32).max),
        ("bfloat16", np.float64, 3.4e38),
        ("bfloat16", np.float64, -1e39),
        ("bfloat16", np.float64, 1e300),
    ],
)
def test_overflow_raises(target, dtype, value):
    c = CastCodec(dtype=target)
    x = make_data("gaussian", 4097, dtype, target)
    x[[7, 4000]] = value
    x[100] = np.inf  # Inf on input is not an overflow
    with pytest.raises(UncompressibleError) as info:
        c.encode(x)
    assert info.value.reason == "overflow" and isinstance(info.value, ValueError)
    assert "2 finite value(s)" in str(info.value) and "first at index 7" in str(info.value)


@pytest.mark.parametrize("dtype", DTYPES)
def test_largest_values_do_not_overflow(dtype):
    f16 = np.array([65519.99, -65504.0, 65504.0], dtype=dtype)
    c = CastCodec(dtype="float16")
    y = c.decode(c.encode(f16), out=np.empty_like(f16))
    assert np.array_equal(y, [65504.0, -65504.0, 65504.0])
    below = np.uint32(0x7F7F7FFF).view(np.float32)
    bf = np.array([below, -below], dtype=dtype)
    y = CastCodec().decode(CastCodec().encode(bf), out=np.empty_like(bf))
    assert np.all(np.isfinite(y))


@pytest.mark.parametrize("target", TARGETS)
def test_out_and_sizes(target):
    c = CastCodec(dtype=target)
    x = make_data("gradient", 1001, np.float32, target)
    big = np.full(2 * x.size + 5, 7, dtype=np.uint8)
    head = c.encode(x, out=big)
    assert head.size == 2 * x.size and np.shares_memory(head, big) and np.all(big[-5:] == 7)
    out = np.empty(x.size, np.float64)
    assert c.decode(head, out=out) is out
    assert np.array_equal(out, c.decode(head, count=x.size, dtype=np.float32).astype(np.float64))
    assert c.bits_per_value(1000, np.float32) == 16.0


def test_params_and_config():
    assert get_codec("cast").get_config() == {"id": "cast", "dtype": "bfloat16"}
    c = get_codec("cast", dtype="float16", rate=16)
    assert c.get_config() == {"id": "cast", "dtype": "float16"}
    assert get_codec(c.get_config()) == c
    assert CastCodec(dtype=np.float16) == c and CastCodec(dtype=np.dtype("float16")) == c
    CastCodec(rate=32.5)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"dtype": "float8"}, ValueError, ["dtype", "'bfloat16', 'float16'", "'float8'"]),
        ({"dtype": np.float32}, ValueError, ["dtype", "float32"]),
        ({"dtype": 16}, TypeError, ["dtype", "16"]),
        ({"rate": 8}, ValueError, ["rate", "[16, inf]", "got 8"]),
        ({"rate": "16"}, TypeError, ["rate", "'16'"]),
    ],
)
def test_bad_parameters(kwargs, exc, words):
    with pytest.raises(exc) as info:
        get_codec("cast", **kwargs)
    for w in words:
        assert w in str(info.value)
