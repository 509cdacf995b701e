"""Data shared by the benchmarks: real gradients (the default) and synthetic sets.

Every generator is deterministic for a given ``(n, dtype, seed)``: values are
computed in float64 and rounded once to the requested dtype, so float32 and
float64 runs see the same numbers.

``real``
    Real gradients, the benchmarks' default: the flattened per-parameter
    gradients of successive SGD steps of a 64-512-256-10 MLP trained at run
    time on scikit-learn's digits, ``seed`` picking the minibatch order
    (``mpicomp.bench.gradients``, which describes the values: about 29 %
    exact zeros, non-zeros mostly between 1e-6 and 2e-2). Needs scikit-learn
    (``pip install 'mpicomp[bench]'``); 2**24 values take well under a second
    after a one-off ~2 s to load scikit-learn, and are cached in-process.

``weights``
    Dense weights: snapshots of the same model's parameters every 25 SGD
    steps as it trains (``mpicomp.bench.gradients.weights``; scikit-learn).
``field``
    A smooth physical field: the displacement of a 2-D wave equation solved
    at run time by finite differences, flattened row by row
    (``mpicomp.bench.field``).

The synthetic kinds draw from ``numpy.random.default_rng(seed)``:

``gradient``
    ``N(0, 1) * exp(2 * N(0, 1))`` per value: a Gaussian with a log-normal
    scale, i.e. noisy data whose magnitude varies over orders of magnitude,
    as training gradients do. Heavy-tailed: about 2e-8 of the values exceed
    float16's range (65520), so large buffers may not be castable to float16
    (seed 0 at 2**24 values is).
``gaussian``
    iid ``N(0, 1)``.
``smooth``
    A sum of 4 sines with periods between 100 and 10,000 samples, random
    amplitudes in ``[0.1, 1]`` and random phases: locally smooth data, the
    case transform codecs such as zfp are built for.

>>> from mpicomp.bench.data import generate
>>> x = generate("gradient", 1000, "float32", seed=1)
>>> x.dtype.name, x.shape
('float32', (1000,))
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["DTYPES", "KINDS", "add_data_arguments", "generate", "kinds_and_size"]

#: the data kinds; the first, "real", is the benchmarks' default
KINDS = ("real", "gradient", "gaussian", "smooth", "weights", "field")
DTYPES = ("float32", "float64")


def generate(kind: str, n: int, dtype: Any = "float32", seed: int = 0) -> np.ndarray:
    """Return ``n`` values of the data set ``kind`` as a 1-D array of ``dtype``."""
    if kind not in KINDS:
        raise ValueError(f"data kind must be one of {list(KINDS)}, got {kind!r}")
    dt = np.dtype(dtype)
    if dt.name not in DTYPES:
        raise TypeError(f"dtype must be one of {list(DTYPES)}, got {dt.name}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if kind == "real":
        from .gradients import gradients
        return gradients(int(n), dt, seed)
    if kind == "weights":
        from .gradients import weights
        return weights(int(n), dt, seed)
    if kind == "field":
        from .field import field
        return field(int(n), dt, seed)
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        x = rng.standard_normal(n)
    elif kind == "gradient":
        x = rng.standard_normal(n)
        scale = rng.standard_normal(n)
        scale *= 2.0
        np.exp(scale, out=scale)
        x *= scale
    else:
        periods = np.exp(rng.uniform(np.log(100.0), np.log(10_000.0), 4))
        amplitudes = rng.uniform(0.1, 1.0, 4)
        phases = rng.uniform(0.0, 2 * np.pi, 4)
        t = np.arange(n, dtype=np.float64)
        x = np.zeros(n)
        for period, amplitude, phase in zip(periods, amplitudes, phases, strict=True):
            x += amplitude * np.sin(t * (2 * np.pi / period) + phase)
    return x.astype(dt, copy=False)


def kinds_and_size(data: str, n: Any) -> list[str]:
    """The data kinds of a comma-separated ``--data`` list, checked with the values per set
    ``n`` (an integer >= 64): ValueError naming the bad value."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 64:
        raise ValueError(f"n must be an integer >= 64, got {n!r}")
    kinds = [k.strip() for k in data.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            raise ValueError(f"data kind must be one of {list(KINDS)}, got {k!r}")
    return kinds


def add_data_arguments(parser: Any, n: int) -> None:
    """A single-process benchmark's ``--n`` (values per data set, default ``n``) and
    ``--data`` (comma-separated kinds, default ``real,weights,field``) options."""
    parser.add_argument("--n", type=int, default=n, help=f"values per data set ({n})")
    parser.add_argument("--data", default="real,weights,field",
                        help="comma-separated data sets among " + ", ".join(KINDS)
                        + " (real,weights,field)")
