"""The agreement step: one MAX allreduce before a compressed collective, and the verdict after.

Whether a collective can be compressed depends on
data only one rank sees (a NaN, a value so large that a sum of ``p`` of them
overflows) and on arguments every rank passes for itself (count, dtype, op,
codec, rate). If ranks decided alone, one could take the compressed path
while another took plain MPI, and both would wait forever. So before a
compressed collective the ranks make one MAX allreduce of twelve float64
numbers: the largest magnitude in this rank's input (+Inf for NaN/Inf), a
48-bit fingerprint of the call's settings and its negation (so that ``max``
and ``-max(-x)`` give the largest and the smallest fingerprint: they differ
exactly when two ranks disagree), a variable codec's stream ratio that
the previous call of this kind measured (:mod:`mpicomp.ratios`; -1: none),
a veto: this rank's number if its buffer cannot be compressed although
its type signature could (a derived datatype with gaps, where the other
ranks pass a plain array: MPI allows any datatypes with the same type
signature; -1: none), and the field each rank's coded values form (for
errbound's ``shape="auto"``: three dimensions and their negations, so that
the ranks that code their own values find whether they agree; a rank that
codes none, a Bcast's receiver, adds nothing), and whether this rank's buffers are on a
device (so that every rank cuts its pieces for the device where any rank's are:
``Ctx.device_pieces``). The screen before it decides from the signature's
element type and count, which every rank shares, so every rank reaches
this step or none does.
Every rank gets the same numbers back and therefore takes the same decision
or raises the same error. A speculative algorithm (the ring allreduce with a guarded codec, see
``Ctx.guarded``) passes no input (0): only the settings are agreed on, and
the encoders find unsafe data while it runs.
"""
from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..errors import RankDisagreement
from ..policy import Resolved
from ..ratios import NONE, LearnedRatios

if TYPE_CHECKING:
    from ..algorithms.common import Ctx
    from ..backend.device import DeviceMemory
    from ..backend.host import HostMemory
    from ..private_comm import PrivateComm

__all__ = ["GUARD_TRIPPED", "Agreement", "agree", "fingerprint", "local_agreement"]

#: the plain-MPI reason when a speculative encoder flagged a value or partial sum near
#: the dtype's range although every input passed the agreement's overflow rule
GUARD_TRIPPED = "overflow risk (an encoder met a value within the codec's headroom of the range)"

#: largest finite value of each cast target
_CAST_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


class Agreement:
    """A communicator's agreement steps, and the stream ratios they agree on
    (``ratios``: :mod:`mpicomp.ratios`, shared with the model's predictions)."""

    def __init__(self, ratios: LearnedRatios) -> None:
        self.ratios = ratios

    def agree(self, private: PrivateComm, name: str, pol: Resolved, local: Any, dtype: np.dtype,
              settings: str, summands: int, memory: HostMemory | DeviceMemory) -> str | None:
        """The agreement step: None to go ahead compressed, else the plain-MPI reason."""
        return self.agreement(private, name, pol, local, dtype, settings, summands, memory)[0]

    def agreement(self, private: PrivateComm, name: str, pol: Resolved, local: Any, dtype: np.dtype,
                  settings: str, summands: int, memory: HostMemory | DeviceMemory,
                  learning: tuple[Any, ...] | None = None, veto: str = "",
                  field: tuple[int, int, int] | None = None
                  ) -> tuple[str | None, float, tuple[int, int, int] | None, bool]:
        """:meth:`agree`'s reason, the largest magnitude of ``local`` over all ranks, the
        field the ranks' coded values form, and whether any rank's buffers are on a device
        (``memory``'s); ``learning``: the kind of a blocking call whose
        variable codec's stream ratio the ranks agree on here (:mod:`mpicomp.ratios`);
        ``veto``: why this rank cannot compress its buffer (a datatype with gaps, ...): the
        call goes plain everywhere; ``field``: the dimensions of this rank's coded values
        (:func:`agree`), None where it codes none."""
        local_max = memory.max_abs(local) if local is not None and not veto else 0.0
        pending = self.ratios.pending(learning) if learning is not None else NONE
        max_abs, ratio, vetoed, dims, device = agree(private.comm, name, local_max,
                                                     f"{settings} {pol.description}", pending,
                                                     bool(veto), field,
                                                     bool(memory.on_device))
        if learning is not None:
            self.ratios.agreed(learning, ratio)
        if vetoed >= 0:
            return (veto or f"rank {vetoed}'s buffer cannot be compressed (its datatype, "
                            "layout or memory)"), 0.0, None, device
        if not math.isfinite(max_abs):
            return "nonfinite (NaN or Inf on some rank)", max_abs, None, device
        return _overflow_risk(pol, dtype, max_abs, summands), max_abs, dims, device

    def verdict(self, private: PrivateComm, ctx: Ctx, name: str, pol: Resolved, local: Any,
                dtype: np.dtype, settings: str, summands: int) -> str | None:
        """After a compressed call: None when it stands, else the plain-MPI reason.

        A guarded call (speculative screening) whose encoders found unsafe data on
        some rank left its input intact, to be sent plain; the full agreement, with
        the scan of the input, names the reason the same way on every rank.
        """
        if not ctx.unsafe():
            return None
        return self.agree(private, name, pol, local, dtype, settings, summands,
                          ctx.memory) or GUARD_TRIPPED


def agree(comm: MPI.Intracomm, op: str, local_max_abs: float, settings: str,
          ratio: float = NONE, veto: bool = False, field: tuple[int, int, int] | None = None,
          device: bool = False) -> tuple[float, float, int, tuple[int, int, int] | None, bool]:
    """The agreement allreduce on ``comm`` (see the module docs): the largest magnitude over
    all ranks (+Inf: some rank holds NaN/Inf), the largest ``ratio`` (a learned stream
    ratio, -1 for none), the highest rank that vetoed compression (-1: none), the field
    (``(n0, n1, n2)``) of every rank that passed one, where they all passed the same (None
    where they differ, none passed one, or one passed ``(0, 0, 0)``: no field), and
    whether any rank passed ``device``; the same :class:`RankDisagreement` on every rank
    where their ``settings`` differ."""
    fp = fingerprint(settings)
    mine = [-math.inf] * 6 if field is None else [*map(float, field), *(-float(d) for d in field)]
    vec = np.array([local_max_abs, fp, -fp, ratio, comm.Get_rank() if veto else -1.0, *mine,
                    1.0 if device else 0.0], np.float64)
    out = np.empty_like(vec)
    comm.Allreduce(vec, out, op=MPI.MAX)
    if out[1] != -out[2]:
        raise RankDisagreement(
            f"{op}: the ranks disagree on count, dtype, op or compression settings; "
            f"this rank (rank {comm.Get_rank()}) has {settings}"
        )
    largest, smallest = out[5:8], -out[8:11]
    same = bool(np.all(largest == smallest) and np.all(largest >= 1))
    dims = tuple(int(d) for d in largest) if same else None
    return (float(out[0]), float(out[3]), int(out[4]), dims,  # type: ignore[return-value]
            bool(out[11] > 0))


def fingerprint(*parts: object) -> float:
    """A 48-bit hash of ``parts`` as a float64 (exact: below 2**53)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=6).digest()
    return float(int.from_bytes(digest, "little"))


def local_agreement(pol: Resolved, values: Any,
                    memory: HostMemory | DeviceMemory) -> tuple[str | None, float]:
    """A point-to-point message's own agreement (nothing to agree with): the plain-MPI
    reason when its values hold NaN/Inf or could overflow the codec, else None; and their
    largest magnitude."""
    m = memory.max_abs(values) if values.size else 0.0
    if not math.isfinite(m):
        return "nonfinite (NaN or Inf)", m
    return _overflow_risk(pol, values.dtype, m, 1), m


def _overflow_risk(pol: Resolved, dtype: np.dtype, max_abs: float, summands: int) -> str | None:
    """The plain-MPI reason when values of magnitude ``max_abs`` (``summands`` of them added)
    could overflow the codec's range, else None. A cast must hold the sum; the other codecs
    keep a factor of 8 of headroom (their transforms and rounding may grow a value)."""
    if pol.codec.codec_id == "cast":
        limit, factor = _CAST_MAX[pol.codec.get_config()["dtype"]], 1.0 * summands
    else:
        limit, factor = float(np.finfo(dtype).max), 8.0 * summands
    if max_abs * factor > limit:
        return f"overflow risk (max |x| {max_abs:.3g} x {factor:g} > {limit:.3g})"
    return None
