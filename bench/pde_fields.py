"""Real 2-D and 3-D fields for the benchmarks, solved at run time by py-pde (PyPI ``py-pde``).

``gray_scott(dims, seed)`` returns the ``v`` concentration of the Gray-Scott
reaction-diffusion system, a grid of ``dims`` (2 or 3 dimensions, C order):

    u_t = Du lap(u) - u v**2 + F (1 - u)
    v_t = Dv lap(v) + u v**2 - (F + k) v

Initial state
    ``u = 1, v = 0`` but in 6 boxes of random centre and side (a tenth to a
    fifth of the domain's, 6 points at least), ``u = 0.5, v = 0.25``, plus
    noise of 0.01 (``numpy.random.default_rng(seed)``).
Solver
    py-pde's explicit Euler stepper on a periodic Cartesian grid of unit
    spacing (its numba-compiled Laplacians), ``dt = 0.5``, ``Du = 0.16,
    Dv = 0.08, F = 0.04, k = 0.06`` (labyrinthine stripes that grow from the
    boxes and fill the domain), to ``t = 2000`` (4,000 steps).

The field has stripes a few grid points wide with smooth fronts: what HPC
codes exchange, and what SZ3's and zfp's predictors are built for.
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


def gray_scott(dims: tuple[int, ...], seed: int = 0, t_end: float = 2000.0,
               dtype: Any = "float32") -> np.ndarray:
    """The solved ``v`` field on a grid of ``dims`` at ``t_end`` (see the module
    docstring)."""
    import pde

    dims = tuple(int(d) for d in dims)
    if len(dims) not in (2, 3) or min(dims) < 8:
        raise ValueError(f"gray_scott: 2 or 3 dimensions of at least 8 points, got {dims}")
    grid = pde.CartesianGrid([(0, d) for d in dims], list(dims), periodic=True)
    rng = np.random.default_rng(seed)
    u = np.ones(dims)
    v = np.zeros(dims)
    for _ in range(6):
        half = [int(rng.integers(max(3, d // 20), max(4, d // 10) + 1)) for d in dims]
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
