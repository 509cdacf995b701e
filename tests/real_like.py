"""Test data shared by the test files: values shaped like real gradients, and exact sums.

Gradients of trained networks are roughly Gaussian with a scale that varies
over orders of magnitude from value to value; ``gradient_like`` draws that
(a Gaussian times a log-normal scale), seeded, so every rank can make its own
and any rank can make another's. ``exact_sum`` is the float64 sum of every
rank's values, the reference a lossy result is checked against.
"""
from __future__ import annotations

import numpy as np

__all__ = ["exact_sum", "gradient_like"]


def gradient_like(n: int, dtype=np.float32, seed: int = 0, spread: float = 1.0) -> np.ndarray:
    """``n`` values: standard normal times ``exp(spread * standard normal)``."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * np.exp(spread * rng.standard_normal(n))).astype(dtype)


def exact_sum(comm, x: np.ndarray) -> np.ndarray:
    """The float64 sum over ``comm``'s ranks of each rank's ``x`` (plain MPI)."""
    out = np.empty(x.size, np.float64)
    comm.Allreduce(x.astype(np.float64), out)
    return out
