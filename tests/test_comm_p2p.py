"""Point-to-point: compressed frames, plain fallbacks, nonblocking completion, hostile frames."""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi4py import MPI

import mpicomp
from mpicomp import frame_format
from mpicomp.algorithms import bounds
from mpicomp.codecs import get_codec


def values(seed: int, n: int = 3000, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def within_codec_bound(y: np.ndarray, x: np.ndarray, config: dict) -> bool:
    c, a = bounds.codec_constants(get_codec(config), x.dtype)
    return bool(np.abs(y.astype(np.float64) - x).max() <= c * np.abs(x).max() + a)


@pytest.mark.mpi
def test_ring_of_sends_each_rank_with_its_own_codec(comm):
    """The receiver decodes with the sender's codec config, whatever its own policy says."""
    p, r = comm.Get_size(), comm.Get_rank()
    configs = [{"id": "bitplane", "rate": 8.25}, {"id": "cast", "dtype": "float16"},
               {"id": "bitplane", "rate": 12.25}, {"id": "cast", "dtype": "bfloat16"}]
    mine = configs[r % len(configs)]
    mc = mpicomp.Comm(comm, codec=mine, threshold=0)
    x = values(r)
    y = np.empty_like(x)
    status = MPI.Status()
    req = mc.Isend(x, (r + 1) % p, tag=3)
    mc.Recv(y, (r - 1) % p, 3, status)
    req.Wait()
    left = (r - 1) % p
    st = mc.stats()
    assert within_codec_bound(y, values(left), configs[left % len(configs)])
    assert status.Get_source() == left and status.Get_tag() == 3
    assert status.Get_count(MPI.FLOAT) == x.size
    assert st["Isend"]["compressed"] == 1 and st["Recv"]["compressed"] == 1
    assert st["Isend"]["wire_bytes"] < x.nbytes


@pytest.mark.mpi
def test_nonfinite_message_goes_plain_and_arrives_exactly(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=4.25, threshold=0)
    x = values(r)
    x[5], x[6] = np.nan, -np.inf
    y = np.empty_like(x)
    mc.Sendrecv(x, (r + 1) % p, 0, y, (r - 1) % p, 0)
    expected = values((r - 1) % p)
    expected[5], expected[6] = np.nan, -np.inf
    st = mc.stats()
    np.testing.assert_array_equal(y, expected)
    assert st["Sendrecv"]["fallbacks"] == {"nonfinite (NaN or Inf)": 1}
    assert st["Recv"]["fallbacks"] == {"sender sent plain data": 1}


@pytest.mark.mpi
@pytest.mark.parametrize("order", ["recv-first", "send-first"])
def test_irecv_isend_complete_in_any_order(comm, order):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=16.25, threshold=0)
    xs = [values(10 * r + k) for k in range(3)]
    ys = [np.empty_like(x) for x in xs]
    reqs = []
    for k in range(3):
        if order == "recv-first":
            reqs.append(mc.Irecv(ys[k], (r - 1) % p, tag=k))
            reqs.append(mc.Isend(xs[k], (r + 1) % p, tag=k))
        else:
            reqs.append(mc.Isend(xs[k], (r + 1) % p, tag=k))
            reqs.append(mc.Irecv(ys[k], (r - 1) % p, tag=k))
    # finish them in reverse order, mixing mpicomp's and MPI's waits
    for q in reversed(reqs[2:]):
        q.Wait()
    mpicomp.Request.Waitall(reqs[:2])
    left = (r - 1) % p
    for k in range(3):
        assert within_codec_bound(ys[k], values(10 * left + k), {"id": "bitplane", "rate": 16.25})


@pytest.mark.mpi
def test_small_messages_stay_plain(comm):
    p, r = comm.Get_size(), comm.Get_rank()
    mc = mpicomp.Comm(comm, codec="bitplane", rate=4.25, threshold=1 << 20)
    x = values(r, 100)
    y = np.empty_like(x)
    req = mc.Irecv(y, (r - 1) % p, 1)
    mc.Send(x, (r + 1) % p, 1) if p > 1 else mc.Isend(x, 0, 1).Wait()
    req.Wait()
    np.testing.assert_array_equal(y, values((r - 1) % p, 100))
    assert mc.stats()["Irecv"]["fallbacks"] == {"below threshold (400 B < 1048576 B)": 1}


def test_frame_roundtrip_and_odd_length():
    codec = get_codec("zfp", rate=8)
    x = values(1, 1001, np.float64)
    frame = frame_format.build(codec, x)
    assert frame_format.is_frame_length(frame.size)
    got_codec, count, dtype, stream = frame_format.parse(frame)
    assert got_codec == codec and count == 1001 and dtype == np.float64
    np.testing.assert_array_equal(stream, codec.encode(x))


def _with_header(frame: np.ndarray, header: dict, payload: int) -> np.ndarray:
    tail = json.dumps(header).encode()
    if (payload + len(tail) + 6) % 2 == 0:
        tail += b" "
    tail += len(tail).to_bytes(2, "little") + frame_format.MAGIC
    return np.concatenate([frame[:payload], np.frombuffer(tail, np.uint8)])


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda f, n: f[:-1], "odd length"),
        (lambda f, n: np.concatenate([f[:-4], np.frombuffer(b"XXXX", np.uint8)]), "bad magic"),
        (lambda f, n: np.concatenate([f[:-6], np.frombuffer(b"\xff\xff", np.uint8), f[-4:]]),
         "header length 65535 exceeds"),
        (lambda f, n: _with_header(f, {"v": 9}, n), "unknown version 9"),
        (lambda f, n: _with_header(f, {"v": 1, "codec": {"id": "lz4"}, "dtype": "float32",
                                       "count": 10}, n), "unreadable header"),
        (lambda f, n: _with_header(f, {"v": 1, "codec": {"id": "none"}, "dtype": "float32",
                                       "count": -1}, n), "bad count -1"),
        (lambda f, n: _with_header(f, {"v": 1, "codec": {"id": "none"}, "dtype": "float32",
                                       "count": 7}, n), "7 float32 values need a 28-byte"),
    ],
)
def test_hostile_frames_raise_frame_error(mutate, match):
    codec = get_codec("bitplane", rate=8.25)
    x = values(2, 640)
    frame = frame_format.build(codec, x)
    n = codec.encoded_nbytes(x.size, x.dtype)
    with pytest.raises(frame_format.FrameError, match=match):
        frame_format.parse(mutate(frame, n))


def test_no_frame_is_shorter_than_min_frame_nbytes():
    """Receivers and probes take an odd-length message shorter than MIN_FRAME_NBYTES for
    plain data: every codec's smallest frame is longer."""
    from mpicomp.codecs import registered_codecs

    for codec_id in registered_codecs():
        codec = get_codec({"id": codec_id})
        for dtype in codec.dtypes:
            frame = frame_format.build(codec, np.zeros(1, dtype))
            assert frame.nbytes >= frame_format.MIN_FRAME_NBYTES, (codec_id, dtype, frame.nbytes)
            assert frame_format.is_frame_length(frame.nbytes)
    assert not frame_format.is_frame_length(3) and not frame_format.is_frame_length(4000)
