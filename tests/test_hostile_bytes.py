"""Hostile bytes: every decoder, given arbitrary, truncated or oversized input, returns or
raises a clear error; it never crashes, hangs, or writes outside its buffers.

Everything mpicomp decodes came over the network: codec streams, the frame
of a point-to-point message, and the agreement step's record. Property
tests (hypothesis). CI runs the ``ci`` profile; a longer run is
``HYPOTHESIS_PROFILE=long python -m pytest tests/test_hostile_bytes.py``
(docs/reliability.md has its figures).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mpicomp import frame_format  # noqa: E402
from mpicomp.codecs import get_codec  # noqa: E402

settings.register_profile("ci", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=20_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

CONFIGS = [
    {"id": "bitplane", "rate": 4.25}, {"id": "bitplane", "rate": 8.25},
    {"id": "bitplane", "rate": 16.25, "block_size": 64},
    {"id": "zfp", "rate": 4}, {"id": "zfp", "rate": 8}, {"id": "zfp", "rate": 16.5},
    {"id": "zfp", "rate": 8, "dims": 3},
    {"id": "cast", "dtype": "bfloat16"}, {"id": "cast", "dtype": "float16"},
    {"id": "none"},
]
SENTINEL = 7  # guard elements on each side of the output


def _codec_cases():
    out = []
    for cfg in CONFIGS:
        codec = get_codec(cfg)
        for dt in (np.float32, np.float64):
            if np.dtype(dt) in codec.dtypes:
                out.append((cfg, np.dtype(dt)))
    return out


CASES = _codec_cases()


@given(case=st.sampled_from(CASES), count=st.integers(0, 700), data=st.data())
def test_codec_decode_of_arbitrary_bytes_stays_in_bounds(case, count, data):
    cfg, dtype = case
    codec = get_codec(cfg)
    n = codec.encoded_nbytes(count, dtype)
    raw = data.draw(st.binary(min_size=n, max_size=n))
    guarded = np.full(count + 2 * SENTINEL, 12345.0, dtype=dtype)
    out = guarded[SENTINEL : SENTINEL + count]
    codec.decode(np.frombuffer(raw, dtype=np.uint8), out=out)
    assert np.all(guarded[:SENTINEL] == 12345.0) and np.all(guarded[-SENTINEL:] == 12345.0)


@pytest.mark.parametrize("block_size", [32, 64])
def test_bitplane_float64_exponents_past_11_bits_read_as_the_all_ones_one(block_size):
    """A float64 block's exponent is a uint16 on the wire that only 11 bits of are valid:
    a corrupt one (up to 65535) decodes as the all-ones exponent does, never by reading
    past the decoder's table of 2**11 powers of two (which once read arbitrary memory)."""
    codec = get_codec({"id": "bitplane", "rate": 8.25, "block_size": block_size})
    count = 3 * block_size
    n = codec.encoded_nbytes(count, np.float64)
    stream = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
    exponents = stream[n - 6:].view(np.uint16)  # the last of the stream: one per block
    reference = exponents.copy()
    reference[:] = 2047
    expected = codec.decode(np.concatenate([stream[:n - 6], reference.view(np.uint8)]),
                            out=np.empty(count))
    for e in (2048, 4095, 40000, 65535):
        exponents[:] = e
        got = codec.decode(stream, out=np.empty(count))
        assert np.array_equal(got, expected, equal_nan=True), e


@given(case=st.sampled_from(CASES), count=st.integers(1, 700), delta=st.integers(-64, 64))
def test_codec_decode_of_wrong_length_is_a_value_error(case, count, delta):
    cfg, dtype = case
    codec = get_codec(cfg)
    n = codec.encoded_nbytes(count, dtype) + delta
    if delta == 0 or n < 0:
        return
    out = np.empty(count, dtype)
    if delta > 0:  # a longer stream: its head is decoded (the codec reads what it needs)
        try:
            codec.decode(np.zeros(n, np.uint8), out=out)
        except ValueError:
            pass
        return
    with pytest.raises(ValueError):
        codec.decode(np.zeros(n, np.uint8), out=out)


@given(raw=st.binary(max_size=400))
def test_frame_parse_of_arbitrary_bytes(raw):
    frame = np.frombuffer(raw, dtype=np.uint8)
    try:
        codec, count, dtype, stream = frame_format.parse(frame)
    except frame_format.FrameError:
        return
    assert stream.size == codec.encoded_nbytes(count, dtype)


def _frame(cfg, count: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(count).astype(np.float32)
    return frame_format.build(get_codec(cfg), x)


@given(cfg=st.sampled_from([c for c in CONFIGS if c["id"] != "none"]),
       count=st.integers(0, 300), flips=st.lists(st.tuples(st.integers(0, 10**6),
                                                           st.integers(1, 255)), max_size=6),
       cut=st.integers(0, 40), grow=st.binary(max_size=20))
def test_mutated_frames_parse_or_refuse(cfg, count, flips, cut, grow):
    """Flipped bytes (header included), truncated and extended frames: a FrameError, or a
    frame whose stream decodes into a buffer of its stated count without error."""
    frame = bytearray(_frame(cfg, count, count).tobytes())
    for pos, xor in flips:
        frame[pos % len(frame)] ^= xor
    frame = frame[: max(len(frame) - cut, 0)] + grow
    arr = np.frombuffer(bytes(frame), dtype=np.uint8)
    try:
        codec, n, dtype, stream = frame_format.parse(arr)
    except frame_format.FrameError:
        return
    if n > 1 << 20:
        return  # a stated count this large is refused by the receiver (larger than its buffer)
    guarded = np.full(n + 2 * SENTINEL, 3.0, dtype=dtype)
    codec.decode(stream, out=guarded[SENTINEL : SENTINEL + n])
    assert np.all(guarded[:SENTINEL] == 3.0) and np.all(guarded[-SENTINEL:] == 3.0)


@given(header=st.dictionaries(st.sampled_from(["v", "codec", "dtype", "count", "x"]),
                              st.one_of(st.integers(-5, 10**12), st.text(max_size=12),
                                        st.none(), st.floats(allow_nan=True),
                                        st.dictionaries(st.text(max_size=6),
                                                        st.integers(-3, 40), max_size=3)),
                              max_size=5),
       payload=st.integers(0, 64))
def test_frames_with_hostile_headers(header, payload):
    """A well-formed trailer around any JSON header: a FrameError or a consistent frame."""
    import json
    import struct

    body = json.dumps(header).encode()
    data = b"\0" * payload + body
    if (len(data) + 6) % 2 == 0:
        data += b" "
        body += b" "
    raw = data + struct.pack("<H4s", len(body), frame_format.MAGIC)
    try:
        codec, n, dtype, stream = frame_format.parse(np.frombuffer(raw, dtype=np.uint8))
    except frame_format.FrameError:
        return
    assert stream.size == codec.encoded_nbytes(n, dtype) == payload
