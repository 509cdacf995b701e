"""Error metrics of a lossy round trip, computed in float64.

``psnr`` follows zfp's definition: ``20 * log10(range / (2 * RMSE))`` with
``range = max(x) - min(x)`` (zfp's ``zfp -s`` statistics), so figures can be
compared with zfp's papers and tools.

>>> import numpy as np
>>> from mpicomp.bench.metrics import error_stats
>>> s = error_stats(np.array([0.0, 1.0]), np.array([0.0, 0.5]))
>>> round(s["psnr_db"], 2), s["max_abs_err"]
(3.01, 0.5)
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["error_stats"]

#: values per chunk: keeps the float64 temporaries small for large buffers
_CHUNK = 1 << 22


def error_stats(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """PSNR (dB), relative L2 error, RMSE and max abs error of ``y`` as an approximation of ``x``.

    PSNR is ``inf`` for an exact round trip; relative L2 is ``inf`` when
    ``x`` is all zeros and ``y`` is not.
    """
    x = np.asarray(x).reshape(-1)
    y = np.asarray(y).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same size, got {x.size} and {y.size}")
    if x.size == 0:
        raise ValueError("x and y must not be empty")
    sq_err = sq_ref = max_err = 0.0
    for i in range(0, x.size, _CHUNK):
        xs = x[i:i + _CHUNK].astype(np.float64)
        d = y[i:i + _CHUNK].astype(np.float64)
        d -= xs
        # (einsum, not np.dot: BLAS's threads spin on the cores after a call and slow the
        # codec timed next to half its speed)
        sq_err += float(np.einsum("i,i->", d, d))
        sq_ref += float(np.einsum("i,i->", xs, xs))
        max_err = max(max_err, float(np.max(np.abs(d))))
    rmse = math.sqrt(sq_err / x.size)
    value_range = float(np.max(x)) - float(np.min(x))
    if rmse == 0.0:
        psnr = math.inf
    elif value_range == 0.0:
        psnr = -math.inf
    else:
        psnr = 20.0 * math.log10(value_range / (2.0 * rmse))
    if sq_err == 0.0:
        rel_l2 = 0.0
    elif sq_ref == 0.0:
        rel_l2 = math.inf
    else:
        rel_l2 = math.sqrt(sq_err / sq_ref)
    return {"psnr_db": psnr, "rel_l2": rel_l2, "rmse": rmse, "max_abs_err": max_err}
