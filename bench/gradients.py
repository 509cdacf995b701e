"""Real gradients for the benchmarks: a small MLP trained at run time on digits.

``gradients(n, dtype, seed)`` returns ``n`` values of the gradients that a
data-parallel allreduce would carry while training a real model:

Model
    A multilayer perceptron in plain NumPy, ``64 -> 512 -> 256 -> 10``
    (:data:`LAYERS`), ReLU after each hidden layer, softmax cross-entropy
    (mean over the minibatch), 167,178 parameters. Weights are He-initialised
    from a fixed seed (:data:`INIT_SEED`, the same for every ``seed``, as the
    replicas of a data-parallel job start alike), biases at zero; weights are
    stored ``(out, in)`` as PyTorch's ``Linear`` does.
Data set
    scikit-learn's digits (``sklearn.datasets.load_digits``: 1797 images of
    8x8 pixels, values 0..16 scaled to [0, 1], 10 classes), which ships inside
    the scikit-learn wheel, so nothing is downloaded.
Training
    Minibatch SGD, :data:`BATCH` = 32 samples per step, learning rate
    :data:`LEARNING_RATE` = 0.05, no momentum; each epoch visits the 1797
    samples in an order drawn from ``numpy.random.default_rng(seed)``. So
    ranks that pass ``seed + rank`` see different minibatches of the same
    data: different but statistically alike gradients, as data-parallel
    ranks do (here each rank's model follows its own SGD path).
Values
    Step after step, the gradient of every parameter flattened and
    concatenated in layer order (W1, b1, W2, b2, W3, b3; 167,178 values per
    step), taken before the SGD update of that step, until ``n`` values are
    reached. Computed in float64 and rounded once to ``dtype``, so float32 and
    float64 see the same numbers; deterministic for a given
    ``(n, dtype, seed)`` on a given machine (BLAS may round differently
    elsewhere).

What the values look like (measured, seed 0, 2**24 float32 values = 101
steps): about 29 % exact zeros (the W1 entries of pixels blank in the whole
minibatch, such as the image border: 34 % of W1 is zero; and the weights
into and out of hidden units that no sample of the minibatch activates,
about 11 % of the units), the rest spread over many orders of magnitude: median ``|g|`` of the
non-zeros about 1e-3, 1st percentile about 3e-6, 99th percentile about 2e-2,
largest about 0.3, smallest about 4e-12; mean about -1e-4, standard
deviation about 4.5e-3; no NaN/Inf. The output layer's gradients are about
5x larger than the hidden layers' (median 1.1e-2 vs 2e-3). The loss falls
from 2.5 to about 0.3 over those 101 steps (to about 0.05 after 400), and
the gradients shrink as it does. zlib shrinks the float32 bytes only to
about 72 % (the synthetic ``gradient`` data: 95 %).

Speed (measured on a 2-core machine, BLAS on one thread, which is faster for
these small products): 2**24 float32 values (16 Mi values, 101 SGD steps)
in about 0.3 s (0.3 to 0.7 s from run to run), 2**26 in about 1.9 s, plus
about 1.7 s once per process to import scikit-learn and load digits.
Results are cached in-process: per seed the longest stream generated so far
(in float64) and the training state, so a longer request continues the
training and a shorter or repeated one only slices and casts (about 20 ms
for 2**24 values); :func:`clear_cache` frees it.

Needs scikit-learn: ``pip install 'mpicomp[bench]'`` (or
``pip install scikit-learn``); without it :func:`gradients` raises an
ImportError saying so.

>>> from mpicomp.bench.gradients import gradients
>>> g = gradients(1000, "float32", seed=1)
>>> g.dtype.name, g.shape
('float32', (1000,))
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any

import numpy as np

__all__ = [
    "BATCH", "INIT_SEED", "LAYERS", "LEARNING_RATE", "N_PARAMS",
    "WEIGHT_INTERVAL", "array_module", "clear_cache", "gradients", "init_params",
    "load_digits_data", "loss_and_grads", "weights",
]

#: layer widths: 64 input pixels, two hidden ReLU layers, 10 classes
LAYERS = (64, 512, 256, 10)
#: samples per SGD step
BATCH = 32
#: SGD step size
LEARNING_RATE = 0.05
#: seed of the initial weights (the same for every data seed)
INIT_SEED = 20240601
#: parameters of the model = gradient values per training step
N_PARAMS = sum(o * i + o for i, o in zip(LAYERS[:-1], LAYERS[1:]))

#: SGD steps between two snapshots of the weights (:func:`weights`)
WEIGHT_INTERVAL = 25

_DTYPES = ("float32", "float64")
_INSTALL_HINT = (
    "mpicomp.bench.gradients (the benchmarks' 'real' data) needs scikit-learn for its "
    "digits data set: pip install 'mpicomp[bench]' (or: pip install scikit-learn)"
)


def load_digits_data() -> tuple[np.ndarray, np.ndarray]:
    """Digits as ``(X, y)``: X float64 (1797, 64) in [0, 1], y int64 labels 0..9."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # scikit-learn missing (or broken)
        raise ImportError(_INSTALL_HINT) from e
    d = load_digits()
    x = np.ascontiguousarray(d.data, dtype=np.float64) / 16.0
    y = np.ascontiguousarray(d.target, dtype=np.int64)
    return x, y


def init_params(layers: tuple[int, ...] = LAYERS, seed: int = INIT_SEED) -> list[np.ndarray]:
    """He-initialised parameters ``[W1, b1, W2, b2, ...]``, W of shape (out, in), float64."""
    rng = np.random.default_rng(seed)
    params: list[np.ndarray] = []
    for fan_in, fan_out in zip(layers[:-1], layers[1:]):
        params.append(rng.standard_normal((fan_out, fan_in)) * np.sqrt(2.0 / fan_in))
        params.append(np.zeros(fan_out))
    return params


def array_module(x: Any) -> Any:
    """CuPy for a CuPy array, else NumPy."""
    cp = sys.modules.get("cupy")
    return cp if cp is not None and isinstance(x, cp.ndarray) else np


def loss_and_grads(params: list[np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Mean softmax cross-entropy of the MLP on ``(x, y)`` and its gradient per parameter.

    ``params`` is ``[W1, b1, ..., WL, bL]`` (W of shape (out, in)); ReLU after
    every layer but the last. Backpropagation by hand; the gradients have the
    parameters' shapes and order. NumPy or CuPy arrays (the module of ``x``).
    """
    xp = array_module(x)
    n_layers = len(params) // 2
    acts = [x]                      # the input of each layer
    h = x
    for k in range(n_layers):
        w, b = params[2 * k], params[2 * k + 1]
        z = h @ w.T
        z += b
        if k < n_layers - 1:
            xp.maximum(z, 0.0, out=z)
            acts.append(z)
        h = z
    logits = h
    logits = logits - logits.max(axis=1, keepdims=True)
    e = xp.exp(logits)
    s = e.sum(axis=1, keepdims=True)
    m = x.shape[0]
    rows = xp.arange(m)
    loss = float(xp.mean(xp.log(s[:, 0]) - logits[rows, y]))
    delta = e / s                   # d loss / d logits = (softmax - onehot) / m
    delta[rows, y] -= 1.0
    delta /= m
    grads: list[np.ndarray] = [None] * len(params)  # type: ignore[list-item]
    for k in range(n_layers - 1, -1, -1):
        a = acts[k]
        grads[2 * k] = delta.T @ a
        grads[2 * k + 1] = delta.sum(axis=0)
        if k > 0:
            delta = delta @ params[2 * k]
            delta *= a > 0.0        # ReLU' (a is the ReLU output of layer k-1)
    return loss, grads


def _one_blas_thread():
    """A context in which BLAS runs on one thread (faster for these small products, and
    no idle BLAS threads spinning beside MPI ranks); a no-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


class _Stream:
    """One seed's training run and the float64 gradient values it has produced so far."""

    def __init__(self, seed: int, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y
        self.params = init_params()
        self.rng = np.random.default_rng(seed)
        self.order = np.empty(0, dtype=np.int64)
        self.pos = 0
        self.buf = np.empty(0)
        self.length = 0
        self.losses: list[float] = []

    def _batch(self) -> np.ndarray:
        if self.pos + BATCH > self.order.size:   # new epoch (a partial tail is dropped)
            self.order = self.rng.permutation(self.x.shape[0])
            self.pos = 0
        idx = self.order[self.pos:self.pos + BATCH]
        self.pos += BATCH
        return idx

    def extend(self, n: int) -> None:
        if n <= self.length:
            return
        steps = -(-(n - self.length) // N_PARAMS)
        with _one_blas_thread():
            self._train(steps)

    def _train(self, steps: int) -> None:
        need = self.length + steps * N_PARAMS
        if need > self.buf.size:
            buf = np.empty(max(need, 2 * self.buf.size))
            buf[:self.length] = self.buf[:self.length]
            self.buf = buf
        for _ in range(steps):
            idx = self._batch()
            loss, grads = loss_and_grads(self.params, self.x[idx], self.y[idx])
            self.losses.append(loss)
            at = self.length
            for p, g in zip(self.params, grads):
                self.buf[at:at + g.size] = g.ravel()
                at += g.size
                p -= LEARNING_RATE * g
            self.length = at


_lock = threading.Lock()
_data: tuple[np.ndarray, np.ndarray] | None = None
_streams: dict[int, _Stream] = {}


def gradients(n: int, dtype: Any = "float32", seed: int = 0) -> np.ndarray:
    """Return ``n`` real gradient values (see the module docstring) as a new 1-D array.

    ``seed`` picks the minibatch order (pass ``seed + rank`` on MPI rank
    ``rank``). Deterministic for a given ``(n, dtype, seed)``; a shorter
    request is a prefix of a longer one with the same seed.
    """
    global _data
    dt = np.dtype(dtype)
    if dt.name not in _DTYPES:
        raise TypeError(f"dtype must be one of {list(_DTYPES)}, got {dt.name}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    n, seed = int(n), int(seed)
    with _lock:
        if _data is None:
            _data = load_digits_data()
        stream = _streams.get(seed)
        if stream is None:
            stream = _streams[seed] = _Stream(seed, *_data)
        stream.extend(n)
        return stream.buf[:n].astype(dt, copy=True)


def weights(n: int, dtype: Any = "float32", seed: int = 0) -> np.ndarray:
    """Return ``n`` values of the model's own parameters (dense weights) as it trains.

    The same training as :func:`gradients` (``seed`` picks the minibatch
    order); every :data:`WEIGHT_INTERVAL` steps a snapshot of all parameters
    flattened in layer order (167,178 values: dense, no exact zeros but the
    biases' first steps), snapshots concatenated until ``n`` values. Not
    cached: 2**20 values take 7 snapshots, about 0.5 s.
    """
    dt = np.dtype(dtype)
    if dt.name not in _DTYPES:
        raise TypeError(f"dtype must be one of {list(_DTYPES)}, got {dt.name}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    global _data
    with _lock:
        if _data is None:
            _data = load_digits_data()
        x, y = _data
    stream = _Stream(int(seed), x, y)
    out = np.empty(int(n))
    at = 0
    with _one_blas_thread():
        while at < n:
            for _ in range(WEIGHT_INTERVAL):
                idx = stream._batch()
                _, grads = loss_and_grads(stream.params, x[idx], y[idx])
                for p, g in zip(stream.params, grads, strict=True):
                    p -= LEARNING_RATE * g
            for p in stream.params:
                take = min(p.size, n - at)
                out[at:at + take] = p.ravel()[:take]
                at += take
    return out.astype(dt, copy=False)


def clear_cache() -> None:
    """Forget every cached stream (the loaded data set stays)."""
    with _lock:
        _streams.clear()
