"""Exceptions raised by mpicomp.

Every error a user can trigger with bad input is a ``TypeError`` or a
``ValueError`` (or a subclass of one), and its message names the constraint
and the value received.
"""
from __future__ import annotations

__all__ = ["MpicompError", "RankDisagreement", "UncompressibleError", "UnknownCodecError"]


class MpicompError(Exception):
    """Base class of the errors that are specific to mpicomp."""


class UnknownCodecError(MpicompError, ValueError):
    """No codec is registered under the requested id."""

    def __init__(self, codec_id: object, known: list[str]):
        self.codec_id = codec_id
        self.known = sorted(known)
        super().__init__(
            f"unknown codec id {codec_id!r}; registered codecs are {self.known}"
        )


class UncompressibleError(MpicompError, ValueError):
    """A buffer cannot be encoded without losing values outright.

    Raised by ``Codec.encode`` when the input holds NaN or +-Inf (for the
    block codecs, whose formats have no escape for them), or finite values
    that the target format cannot represent (e.g. 1e5 cast to float16).
    The communicator never lets it happen in a call: it scans the buffers
    first (for a collective, on every rank, see ``mpicomp/decision/agreement.py``) and
    sends such a buffer uncompressed, counting the fallback and its reason
    in its statistics.
    """

    def __init__(self, codec_id: str, reason: str, detail: str):
        self.codec_id = codec_id
        self.reason = reason
        super().__init__(f"codec {codec_id!r} cannot encode this buffer ({reason}): {detail}")


class RankDisagreement(MpicompError, ValueError):
    """The ranks passed different counts, dtypes, ops or compression settings to one call
    (raised on every rank alike by the agreement step, :mod:`mpicomp.decision.agreement`)."""
