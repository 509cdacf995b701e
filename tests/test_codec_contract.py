"""The codec contract (mpicomp/codecs/base.py) and the registry, checked for every codec.

Tests taking ``codec_id`` run once per id in ``registered_codecs()`` with the
default-constructible instance ``get_codec(codec_id)``, so a newly registered
codec is covered without editing this file.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import mpicomp
from mpicomp.codecs import Codec, NoneCodec, get_codec, register_codec, registered_codecs
from mpicomp.codecs import registry as _registry
from mpicomp.errors import UnknownCodecError

CODEC_IDS = registered_codecs()
COUNTS = [0, 1, 7, 64, 1000, 4099]


def sample(n: int, dtype, seed: int = 0) -> np.ndarray:
    """Finite, moderately scaled values of ``dtype`` (any numeric dtype)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), n, endpoint=True).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    return rng.standard_normal(n).astype(dt)


def unsupported_dtype(codec: Codec) -> np.dtype:
    for cand in (np.bool_, np.object_, "U4", "M8[s]", np.int8, np.float16, np.complex128):
        dt = np.dtype(cand)
        if dt not in codec.dtypes:
            return dt
    pytest.skip(f"codec {codec.codec_id!r} accepts every candidate dtype")


@pytest.fixture(params=CODEC_IDS)
def codec_id(request) -> str:
    return request.param


@pytest.fixture
def codec(codec_id) -> Codec:
    return get_codec(codec_id)


@pytest.fixture
def restore_registry():
    saved = dict(_registry._REGISTRY)
    yield
    _registry._REGISTRY.clear()
    _registry._REGISTRY.update(saved)


# -- registry ---------------------------------------------------------------
def test_none_is_registered():
    assert "none" in CODEC_IDS
    assert CODEC_IDS == sorted(CODEC_IDS)
    assert isinstance(get_codec("none"), NoneCodec)
    assert mpicomp.get_codec is get_codec


def test_unknown_codec_raises_value_error_naming_the_id():
    with pytest.raises(UnknownCodecError) as info:
        get_codec("nope")
    err = info.value
    assert isinstance(err, ValueError)
    assert isinstance(err, mpicomp.MpicompError)
    assert "'nope'" in str(err)
    assert err.codec_id == "nope"
    assert "none" in err.known
    with pytest.raises(ValueError, match="nope"):
        get_codec({"id": "nope"})


def test_get_codec_from_config_dict():
    c = get_codec({"id": "none"})
    assert isinstance(c, NoneCodec)
    assert c == NoneCodec()
    with pytest.raises(ValueError, match="'id'"):
        get_codec({"rate": 8})


def test_get_codec_accepts_instance_and_rejects_other_types():
    c = NoneCodec()
    assert get_codec(c) is c
    with pytest.raises(TypeError):
        get_codec(c, rate=8)
    with pytest.raises(TypeError):
        get_codec(42)
    with pytest.raises(TypeError):
        get_codec(None)


def test_none_codec_ignores_rate():
    assert get_codec("none", rate=8.0) == NoneCodec()
    assert get_codec({"id": "none"}, rate=4).get_config() == {"id": "none"}


def test_register_codec(restore_registry):
    @register_codec
    class Doubler(NoneCodec):
        codec_id = "test-dummy"

    assert Doubler.codec_id == "test-dummy"  # the decorator returns the class
    assert "test-dummy" in registered_codecs()
    c = get_codec("test-dummy")
    assert type(c) is Doubler
    assert get_codec(c.get_config()) == c

    register_codec(NoneCodec, "test-alias")
    assert type(get_codec("test-alias")) is NoneCodec

    class Replacement(NoneCodec):
        codec_id = "test-dummy"

    register_codec(Replacement)  # registering an id again replaces the class
    assert type(get_codec("test-dummy")) is Replacement


def test_register_codec_rejects_non_codecs(restore_registry):
    with pytest.raises(TypeError):
        register_codec(object)
    with pytest.raises(TypeError):
        register_codec(NoneCodec())


# -- configuration ----------------------------------------------------------
def test_config_round_trip(codec):
    config = codec.get_config()
    assert config["id"] == codec.codec_id
    assert json.loads(json.dumps(config)) == config  # JSON-safe
    assert get_codec(config) == codec
    assert get_codec(json.loads(json.dumps(config))) == codec
    rebuilt = type(codec).from_config(config)
    assert rebuilt == codec
    assert hash(rebuilt) == hash(codec)
    assert rebuilt.get_config() == config
    assert repr(codec).startswith(type(codec).__name__ + "(")


def test_from_config_rejects_other_id(codec):
    config = dict(codec.get_config(), id="definitely-not-" + codec.codec_id)
    with pytest.raises(ValueError):
        type(codec).from_config(config)


def test_class_attributes(codec):
    assert isinstance(codec.codec_id, str) and codec.codec_id
    assert len(codec.dtypes) >= 1
    assert all(isinstance(dt, np.dtype) for dt in codec.dtypes)
    assert isinstance(codec.lossy, bool)


# -- sizes --------------------------------------------------------------------
@pytest.mark.parametrize("count", COUNTS)
def test_encode_size_is_known_in_advance(codec, count):
    dt = codec.dtypes[0]
    n = codec.encoded_nbytes(count, dt)
    assert isinstance(n, int) and n >= 0
    assert codec.encoded_nbytes(np.int64(count), dt.name) == n
    for seed in (0, 1):  # size depends on (count, dtype, params) only, not on the values
        stream = codec.encode(sample(count, dt, seed))
        assert isinstance(stream, np.ndarray)
        assert stream.dtype == np.uint8 and stream.ndim == 1
        if codec.variable:  # (errbound: the values decide, within a bound known in advance)
            assert codec.min_stream_nbytes(count, dt) <= stream.size <= n
        else:
            assert stream.size == n
    if count:
        assert codec.bits_per_value(count, dt) == pytest.approx(8.0 * n / count)
    else:
        assert codec.bits_per_value(0, dt) == 0.0


def test_encoded_nbytes_validates_arguments(codec):
    dt = codec.dtypes[0]
    with pytest.raises(ValueError):
        codec.encoded_nbytes(-1, dt)
    for bad in (1.5, "10", None, True):
        with pytest.raises(TypeError):
            codec.encoded_nbytes(bad, dt)
    with pytest.raises(TypeError):
        codec.encoded_nbytes(10, unsupported_dtype(codec))
    with pytest.raises(TypeError):
        codec.encoded_nbytes(10, "not a dtype")


# -- encode / decode ----------------------------------------------------------
def test_round_trip_shape_dtype_and_determinism(codec):
    dt = codec.dtypes[0]
    x = sample(1000, dt)
    x_before = x.copy()
    s1 = codec.encode(x)
    s2 = codec.encode(x)
    np.testing.assert_array_equal(s1, s2)  # every rank must produce the same bytes
    np.testing.assert_array_equal(x, x_before)  # the input is not modified
    y = codec.decode(s1, out=np.empty_like(x))
    assert y.dtype == dt and y.shape == x.shape
    z = codec.decode(s1, count=x.size, dtype=dt)
    assert z.dtype == dt and z.shape == (x.size,)
    np.testing.assert_array_equal(y, z)
    if dt.kind in "fc":
        assert np.all(np.isfinite(y))
    if not codec.lossy:
        np.testing.assert_array_equal(y, x)


def test_lossless_round_trip_every_dtype(codec):
    if codec.lossy:
        pytest.skip(f"codec {codec.codec_id!r} is lossy")
    for dt in codec.dtypes:
        x = sample(333, dt, seed=3)
        y = codec.decode(codec.encode(x), count=x.size, dtype=dt)
        np.testing.assert_array_equal(y, x, err_msg=f"dtype {dt}")


def test_multidimensional_contiguous_input(codec):
    dt = codec.dtypes[0]
    x = sample(4 * 64, dt).reshape(4, 64)
    s = codec.encode(x)
    np.testing.assert_array_equal(s, codec.encode(x.reshape(-1)))
    out = np.empty_like(x)
    assert codec.decode(s, out=out) is out
    np.testing.assert_array_equal(out.reshape(-1), codec.decode(s, count=x.size, dtype=dt))


def test_encode_into_out(codec):
    dt = codec.dtypes[0]
    x = sample(1000, dt)
    n = codec.encoded_nbytes(x.size, dt)
    big = np.full(n + 16, 0xAB, dtype=np.uint8)
    s = codec.encode(x, out=big)
    assert s.size == n or (codec.variable and s.size < n)
    assert np.shares_memory(s, big) and s.ctypes.data == big.ctypes.data  # the head of out
    np.testing.assert_array_equal(s, codec.encode(x))
    assert np.all(big[s.size:] == 0xAB)  # nothing written past the stream


def test_decode_accepts_bytes(codec):
    dt = codec.dtypes[0]
    x = sample(100, dt)
    s = codec.encode(x)
    y1 = codec.decode(s, count=x.size, dtype=dt)
    y2 = codec.decode(s.tobytes(), count=x.size, dtype=dt)
    np.testing.assert_array_equal(y1, y2)


def test_encode_wrong_types_raise_type_error(codec):
    dt = codec.dtypes[0]
    x = sample(64, dt)
    with pytest.raises(TypeError):
        codec.encode(x.tolist())
    with pytest.raises(TypeError):
        codec.encode(memoryview(x))
    with pytest.raises(TypeError):
        codec.encode(np.zeros(64, dtype=unsupported_dtype(codec)))
    n = codec.encoded_nbytes(x.size, dt)
    with pytest.raises(TypeError):
        codec.encode(x, out=np.empty(n + 8, dtype=np.int8))  # out must be uint8
    with pytest.raises(TypeError):
        codec.encode(x, out=bytearray(n + 8))
    with pytest.raises(TypeError):
        codec.encode(x, out=np.empty((2, n + 8), dtype=np.uint8))  # out must be 1-D


def test_every_input_layout_encodes_as_its_c_ordered_copy(codec):
    """Strided, transposed, broadcast (stride 0, read-only) and read-only inputs: the stream
    is that of a C-ordered copy (no kernel sees another layout); a decode into an output
    that is not C-contiguous fills it as a decode into a C-ordered copy does."""
    dt = codec.dtypes[0]
    x = sample(256, dt)
    readonly = x[:128].copy()
    readonly.flags.writeable = False
    layouts = {
        "strided": x[::2],
        "transposed": x[:128].reshape(8, 16).T,
        "fortran": np.asfortranarray(x[:128].reshape(8, 16)),
        "broadcast": np.broadcast_to(x[:1], (128,)),
        "readonly": readonly,
        "negative stride": x[:128][::-1],
    }
    for name, view in layouts.items():
        s = codec.encode(view)
        np.testing.assert_array_equal(s, codec.encode(np.ascontiguousarray(view)),
                                      err_msg=name)
    s = codec.encode(x[:64].copy())
    wide = np.full(128, 7, dtype=dt)
    codec.decode(s, out=wide[::2])
    np.testing.assert_array_equal(wide[::2], codec.decode(s, count=64, dtype=dt))
    np.testing.assert_array_equal(wide[1::2], np.full(64, 7, dtype=dt))


def test_out_too_small_raises_value_error(codec):
    dt = codec.dtypes[0]
    x = sample(1000, dt)
    n = codec.encoded_nbytes(x.size, dt)
    assert n > 0
    with pytest.raises(ValueError):
        codec.encode(x, out=np.empty(n - 1, dtype=np.uint8))
    with pytest.raises(ValueError):
        codec.encode(x, out=np.empty(2 * n, dtype=np.uint8)[::2])  # non-contiguous out
    ro = np.empty(n, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        codec.encode(x, out=ro)


def test_decode_argument_checks(codec):
    dt = codec.dtypes[0]
    x = sample(1000, dt)
    s = codec.encode(x)
    with pytest.raises(TypeError):
        codec.decode(s)
    with pytest.raises(TypeError):
        codec.decode(s, count=x.size)
    with pytest.raises(TypeError):
        codec.decode(s, dtype=dt)
    with pytest.raises(ValueError):
        codec.decode(s[:-1], count=x.size, dtype=dt)  # stream too short
    with pytest.raises(TypeError):
        codec.decode(s, out=x.tolist())
    with pytest.raises(TypeError):
        codec.decode(s, count=x.size, dtype=unsupported_dtype(codec))
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        codec.decode(s, out=ro)
    with pytest.raises(TypeError):
        codec.decode(object(), count=x.size, dtype=dt)
