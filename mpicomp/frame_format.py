"""Point-to-point messages: the frame a compressed message travels in.

A receiver cannot know in advance whether its peer compressed a message
(the sender may have fallen back to plain MPI because the buffer held a
NaN, or used another rate), so a compressed message carries its own
description at its end::

    [codec stream][JSON header, space padded][uint16 LE header length][b"MPCZ"]

The JSON header is ``{"v": 1, "codec": <codec config>, "dtype": "float32",
"count": n}``; the receiver decodes with the sender's codec config. A
variable codec's stream is the bytes its encode used (between the codec's
least and upper bound), the header right after them. The
padding makes the frame's byte length odd. A plain message of float32 or
float64 values always has a length that is a multiple of 4, so the length
alone (from ``MPI.Status.Get_count(MPI.BYTE)``) tells the two apart, before
a byte is read.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from . import cuda_runtime as cuda
from .backend.host import HOST
from .codecs import Codec, get_codec

__all__ = ["MAGIC", "MIN_FRAME_NBYTES", "FrameError", "build", "frame_nbytes", "is_frame_length",
           "parse"]

MAGIC = b"MPCZ"
_TRAILER = struct.Struct("<H4s")
VERSION = 1


class FrameError(ValueError):
    """A message that should be a compressed frame is not a valid one."""


#: no frame is shorter: its JSON header alone (codec config, count, dtype, version) is
#: longer; so a plain message of fewer bytes, of an odd length or not, is never taken for one
MIN_FRAME_NBYTES = 40


def is_frame_length(nbytes: int) -> bool:
    """True for the byte length of a compressed frame (odd, and at least
    :data:`MIN_FRAME_NBYTES`), False for plain float data (a multiple of 4 bytes) and
    for plain messages too short to be a frame."""
    return nbytes % 2 == 1 and nbytes >= MIN_FRAME_NBYTES


def header_bytes(codec: Codec, count: int, dtype: np.dtype, payload: int) -> bytes:
    """A frame's tail after a stream of ``payload`` bytes: header, padding, trailer."""
    return _tail(_header(codec, count, dtype), payload)


def _header(codec: Codec, count: int, dtype: np.dtype) -> bytes:
    return json.dumps(
        {"v": VERSION, "codec": codec.get_config(), "dtype": dtype.name, "count": count},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()


def _tail(header: bytes, payload: int) -> bytes:
    if (payload + len(header) + _TRAILER.size) % 2 == 0:
        header += b" "  # an odd frame length
    return header + _TRAILER.pack(len(header), MAGIC)


def frame_nbytes(codec: Codec, x: np.ndarray) -> int:
    """Length of the frame :func:`build` would make for ``x`` (a variable codec's: the
    longest it can make)."""
    nb = codec.encoded_nbytes(x.size, x.dtype)
    return nb + len(header_bytes(codec, x.size, x.dtype, nb))


def build(codec: Codec, x: Any, memory: Any = None) -> Any:
    """A new frame holding ``x`` encoded with ``codec`` (a uint8 array of odd length).

    ``memory`` (:mod:`mpicomp.backend`) places a device buffer's frame: on
    the device for a CUDA-aware MPI, else in host memory (only the stream is
    copied off the device). The frame may still be being written on the
    call's stream when this returns.
    """
    x_dtype = np.dtype(x.dtype)
    nb = codec.encoded_nbytes(x.size, x_dtype)
    header = _header(codec, x.size, x_dtype)
    memory = HOST if memory is None else memory
    frame = memory.fresh_wire(nb + len(header) + 1 + _TRAILER.size)  # (padding: 0 or 1)
    used = memory.encode(codec, x, frame[:nb]).size
    tail = np.frombuffer(_tail(header, used), dtype=np.uint8)
    memory.copy(frame[used : used + tail.size], tail)
    return frame[: used + tail.size]


def last_bytes_of(frame: Any) -> Callable[[int], bytes]:
    """A reader of a frame's last ``k`` bytes (copied off the device for a device frame)."""
    n = frame.size

    def last(k: int) -> bytes:
        part = frame[n - k :]
        if cuda.is_device_array(part):
            host = np.empty(k, dtype=np.uint8)
            cuda.as_device(part).copy_to_host(host)
            return host.tobytes()
        return bytes(part)

    return last


def parse(frame: Any) -> tuple[Codec, int, np.dtype, Any]:
    """(codec, count, dtype, stream) of a received frame; FrameError if it is malformed.

    ``frame`` is a host or device uint8 array; only its header is read on
    the host, and ``stream`` is a view of the frame.
    """
    n = frame.size
    last = last_bytes_of(frame)
    if n < _TRAILER.size or not is_frame_length(n):
        raise FrameError(f"a compressed frame has an odd length of at least 7 bytes, got {n}")
    hlen, magic = _TRAILER.unpack(last(_TRAILER.size))
    if magic != MAGIC:
        raise FrameError(f"compressed frame: bad magic {magic!r} (expected {MAGIC!r})")
    start = n - _TRAILER.size - hlen
    if start < 0:
        raise FrameError(f"compressed frame: header length {hlen} exceeds the frame ({n} bytes)")
    try:
        header = json.loads(last(n - start)[: hlen])
        if header.get("v") != VERSION:
            raise FrameError(f"compressed frame: unknown version {header.get('v')!r}")
        codec = get_codec(header["codec"])
        dtype = np.dtype(header["dtype"])
        count = header["count"]
        if not isinstance(count, int) or count < 0:
            raise FrameError(f"compressed frame: bad count {count!r}")
    except FrameError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise FrameError(f"compressed frame: unreadable header ({exc})") from None
    expected = codec.encoded_nbytes(count, dtype)
    if codec.variable:
        least = codec.min_stream_nbytes(count, dtype)
        if not least <= start <= expected:
            raise FrameError(
                f"compressed frame: {count} {dtype} values need a stream of {least} to "
                f"{expected} bytes, the frame holds {start}")
    elif expected != start:
        raise FrameError(
            f"compressed frame: {count} {dtype} values need a {expected}-byte stream, "
            f"the frame holds {start}"
        )
    return codec, count, dtype, frame[:start]
