"""A smooth physical field for the benchmarks: a 2-D wave equation solved at run time.

``field(n, dtype, seed)`` returns ``n`` values of the displacement ``u`` of
the wave equation ``u_tt = c**2 (u_xx + u_yy)`` on a square grid of
``side = ceil(sqrt(n))`` points a side, flattened row by row (what a
stencil code exchanges):

Initial state
    4 Gaussian pulses of random centre, width (2 % to 8 % of the side) and
    amplitude in [-1, 1] (``numpy.random.default_rng(seed)``), at rest.
Solver
    Second-order finite differences in space (the 5-point Laplacian) and
    time (leapfrog), Courant number 0.5, fixed ``u = 0`` boundaries, for
    ``side // 2`` steps: the pulses spread into overlapping ring waves that
    reflect off the walls. Computed in float64 and rounded once to ``dtype``.

The field is smooth on the grid's scale, with values spread over the whole
range: the data transform and prediction codecs (zfp, SZ3) are built for.
1024 x 1024 (2**20 values) takes about 2 s on a 2-core machine.

>>> from mpicomp.bench.field import field
>>> field(100, "float32").shape
(100,)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["COURANT", "field"]

#: c * dt / dx of the leapfrog scheme (stable below 1 / sqrt(2))
COURANT = 0.5
_DTYPES = ("float32", "float64")


def field(n: int, dtype: Any = "float32", seed: int = 0) -> np.ndarray:
    """Return ``n`` values of the solved wave field (see the module docstring)."""
    dt = np.dtype(dtype)
    if dt.name not in _DTYPES:
        raise TypeError(f"dtype must be one of {list(_DTYPES)}, got {dt.name}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    side = max(int(math.ceil(math.sqrt(int(n)))), 3)
    rng = np.random.default_rng(seed)
    grid = np.arange(side, dtype=np.float64)
    u = np.zeros((side, side))
    for _ in range(4):
        cx, cy = rng.uniform(0.2, 0.8, 2) * side
        width = rng.uniform(0.02, 0.08) * side
        amplitude = rng.uniform(-1.0, 1.0)
        u += amplitude * np.exp(-((grid[:, None] - cy) ** 2 + (grid[None, :] - cx) ** 2)
                                / (2 * width * width))
    u[0, :] = u[-1, :] = u[:, 0] = u[:, -1] = 0.0
    previous = u.copy()  # at rest: u(-dt) = u(0)
    c2 = COURANT * COURANT
    lap = np.empty((side - 2, side - 2))
    for _ in range(side // 2):
        inner = u[1:-1, 1:-1]
        np.add(u[:-2, 1:-1], u[2:, 1:-1], out=lap)
        lap += u[1:-1, :-2]
        lap += u[1:-1, 2:]
        lap -= 4.0 * inner
        lap *= c2
        lap += 2.0 * inner
        lap -= previous[1:-1, 1:-1]
        previous[1:-1, 1:-1] = lap  # u(t + dt) into the old buffer, then swap
        u, previous = previous, u
    return u.ravel()[:n].astype(dt, copy=True)
