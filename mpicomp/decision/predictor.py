"""The performance model's verdicts for one communicator, and the measurements they rest on.

Under the codec ``auto`` (compress or not) and the algorithm ``auto`` (which
allreduce), the screen asks :class:`Predictor`: the model
(:mod:`mpicomp.model`) on this job's calibration (:mod:`mpicomp.calibration`,
measured or loaded at the same call on every rank) and the codec's measured
speeds, each prediction kept per call size. A variable codec's streams are
priced at the ratio its kind of blocking call learned (:mod:`mpicomp.ratios`).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import calibration, calibration_file, model, topology
from ..policy import Resolved
from ..ratios import LearnedRatios
from ..stats import Recorder

if TYPE_CHECKING:
    from ..private_comm import PrivateComms
    from ..settings import CommSettings

__all__ = ["PREDICTIONS_KEPT", "Predictor"]

#: how many of the model's predictions a communicator keeps
PREDICTIONS_KEPT = 256


class Predictor:
    """The model's predictions for one communicator (``settings``: its settings;
    ``privates``: its private communicators; ``ratios``: the learned stream ratios).

    Filled at the same collective calls on every rank, so every rank holds
    the same numbers and takes the same decisions.
    """

    def __init__(self, settings: CommSettings, privates: PrivateComms,
                 ratios: LearnedRatios) -> None:
        self.settings = settings
        self.privates = privates
        self.ratios = ratios
        self._cal: model.Calibration | None = None
        #: the model's predictions by (method, bytes, dtype, device, settings): a call of a
        #: size seen before asks the model nothing (cleared with a new calibration)
        self._predictions: dict[tuple[Any, ...], model.Prediction] = {}
        self.speeds: dict[tuple[str, str, bool], tuple[float, float]] = {}

    @property
    def cal(self) -> model.Calibration | None:
        """The calibration the model uses (None until a call or ``calibrate`` needed it)."""
        return self._cal

    @cal.setter
    def cal(self, cal: model.Calibration | None) -> None:
        self._cal = cal
        self._predictions.clear()

    def consult(self, method: str, pol: Resolved, nbytes: int, dtype: np.dtype,
                on_device: bool, rec: Recorder | None, blocking: bool = True) -> str | None:
        """Ask the model (collective the first time); the plain-MPI reason or None."""
        # Before the agreement step, ranks may hold different per-call settings (an error
        # the agreement reports): so the codec speed used here is that of the
        # communicator's own codec, which every rank measured at the same call (a
        # per-call codec enters through its compression ratio).
        rho = (self.ratios.ratio(LearnedRatios.key(method, nbytes, dtype, on_device,
                                                   pol.description))
               if blocking and pol.codec.variable else None)
        key = (method, nbytes, dtype.name, on_device, pol.description, rho)
        pred = self._predictions.get(key)
        if pred is None:
            pred = self.predict(method, self.settings.default, nbytes, dtype, on_device,
                                codec=pol.codec, algorithm=pol.algorithm, rho=rho)
            if len(self._predictions) >= PREDICTIONS_KEPT:
                self._predictions.clear()
            self._predictions[key] = pred
        if rec is not None:
            rec.predicted(pred)
        if pol.auto and not pred.compress:
            return "model: plain MPI predicted faster"
        return None

    def calibrate(self, pol: Resolved, force: bool = False) -> model.Calibration:
        """See :meth:`mpicomp.Comm.calibrate`."""
        private = self.privates.main().comm
        if force or self.cal is None:
            self.cal = calibration_file.obtain(private, topology.layout(private), force=force)
            self.speeds.clear()
        if pol.enabled:
            self.codec_speed(pol, np.dtype(np.float32), False)
        return self.cal

    def predict(self, method: str, pol: Resolved, nbytes: int, dtype: np.dtype,
                on_device: bool, codec: Any = None, algorithm: str | None = None,
                rho: float | None = None) -> model.Prediction:
        """The model's prediction with ``pol``'s codec speed (collective if not measured yet);
        ``rho``: a variable codec's stream ratio (None: its upper bound)."""
        if self.cal is None:
            self.calibrate(self.settings.default)
        speed = self.codec_speed(pol, np.dtype(dtype), on_device)
        assert self.cal is not None
        return model.predict(self.cal, method, nbytes, codec or pol.codec, dtype, speed,
                             algorithm or pol.algorithm, on_device=on_device, rho=rho,
                             call_s=calibration.codec_call_s(self.cal, pol.codec, dtype,
                                                             on_device))

    def codec_speed(self, pol: Resolved, dtype: np.dtype, on_device: bool) -> tuple[float, float]:
        """``pol``'s codec's (encode, decode) seconds per byte, measured once per job."""
        key = (json.dumps(pol.codec.get_config(), sort_keys=True), dtype.name, on_device)
        speed = self.speeds.get(key)
        if speed is None:
            private = self.privates.main()
            assert self.cal is not None
            speed, measured = calibration.codec_speed(private.comm, self.cal, pol.codec, dtype,
                                                      private.memory(on_device))
            if measured:  # (a speed the file held, or another communicator measured: kept)
                calibration_file.save(private.comm, self.cal)
            self.speeds[key] = speed
        return speed
