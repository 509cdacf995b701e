"""Real 2-D and 3-D fields for the benchmarks, solved at run time by py-pde (PyPI ``py-pde``).

``gray_scott(dims, seed)`` returns the ``v`` concentration of the Gray-Scott
reaction-diffusion system, a grid of ``dims`` (2 or 3 dimensions, C order):

    u_t = Du lap(u) - u v**2 + F (1 - u)
    v_t = Dv lap(v) + u v**2 - (F + k) v

Initial state
    ``u = 1, v = 0`` but in 6 boxes of random centre and side (a tenth to a
    fifth of the domain's), ``u = 0.5, v = 0.25``, plus noise of 0.01
    (``numpy.random.default_rng(seed)``).
Solver
    py-pde's explicit Euler stepper on a periodic Cartesian grid of unit
    spacing (its numba-compiled 5- and 7-point Laplacians), ``dt = 0.5``,
    ``Du = 0.16, Dv = 0.08, F = 0.035, k = 0.065`` (spots that divide and
    fill the domain), to ``t = T`` (``T = 4 * side`` in 2-D, ``2 * side`` in
    3-D: the pattern grows across a good part of the grid).

The field has smooth fronts and spots a few grid points wide on a flat
background: what HPC codes exchange, and what SZ3's and zfp's predictors
are built for. 256 x 256 takes about 5 s on a 2-core machine, 64**3 about
15 s (py-pde compiles its stepper the first time).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["available", "gray_scott"]

DU, DV, F, K = 0.16, 0.08, 0.04, 0.06
DT = 0.5


def available() -> bool:
    """Whether py-pde imports (``pip install py-pde``, or ``mpicomp[bench]``)."""
    import importlib.util

    return importlib.util.find_spec("pde") is not None


def gray_scott(dims: tuple[int, ...], seed: int = 0, t_end: float | None = None,
               dtype: Any = "float32") -> np.ndarray:
    """The solved ``v`` field on a grid of ``dims`` (see the module docstring)."""
    import pde

    dims = tuple(int(d) for d in dims)
    if len(dims) not in (2, 3) or min(dims) < 8:
        raise ValueError(f"gray_scott: 2 or 3 dimensions of at least 8 points, got {dims}")
    side = max(dims)
    if t_end is None:
        t_end = (4 if len(dims) == 2 else 2) * side
    grid = pde.CartesianGrid([(0, d) for d in dims], list(dims), periodic=True)
    rng = np.random.default_rng(seed)
    u = np.ones(dims)
    v = np.zeros(dims)
    for _ in range(6):
        half = [int(rng.integers(max(1, d // 20), max(2, d // 10))) for d in dims]
        centre = [int(rng.integers(0, d)) for d in dims]
        box = tuple(np.arange(c - h, c + h) % d for c, h, d in zip(centre, half, dims,
                                                                  strict=True))
        u[np.ix_(*box)] = 0.5
        v[np.ix_(*box)] = 0.25
    u += 0.01 * rng.standard_normal(dims)
    v += 0.01 * rng.standard_normal(dims)
    state = pde.FieldCollection([pde.ScalarField(grid, u), pde.ScalarField(grid, v)])
    eq = pde.PDE({"u": f"{DU} * laplace(u) - u * v**2 + {F} * (1 - u)",
                  "v": f"{DV} * laplace(v) + u * v**2 - {F + K} * v"})
    result = eq.solve(state, t_range=t_end, dt=DT, solver="euler", tracker=None,
                      backend="numba")
    return np.ascontiguousarray(result[1].data, dtype=dtype)
