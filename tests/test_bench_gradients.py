"""The benchmarks' real data: gradients of an MLP trained on digits.

Checked: the values are deterministic, depend on the seed, are finite, have
the requested dtype and length, look like gradients (not mostly zeros, not
trivially compressible), and are real gradients: the hand-written
backpropagation agrees with finite differences of the loss.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the real gradients need scikit-learn (mpicomp[bench])")

from mpicomp.bench import data as bench_data  # noqa: E402
from mpicomp.bench import gradients as G  # noqa: E402

pytestmark = pytest.mark.slow  # left out of make test-quick

N = 3 * G.N_PARAMS + 12345          # three steps and part of a fourth


def test_deterministic_and_prefix():
    a = G.gradients(N, "float32", seed=3)
    G.clear_cache()
    b = G.gradients(N, "float32", seed=3)
    assert np.array_equal(a, b)
    c = G.gradients(1000, "float32", seed=3)        # from the cache: a prefix
    assert np.array_equal(c, a[:1000])
    G.clear_cache()
    d = G.gradients(1000, "float32", seed=3)        # from scratch
    assert np.array_equal(d, a[:1000])


def test_returns_a_new_array():
    a = G.gradients(5000, "float32", seed=0)
    a[:] = 7.0
    assert not np.any(G.gradients(5000, "float32", seed=0) == 7.0)


def test_seeds_differ_but_alike():
    a = G.gradients(N, "float64", seed=0)
    b = G.gradients(N, "float64", seed=1)
    assert not np.array_equal(a, b)
    # the first step already sees a different minibatch
    assert np.mean(a[:G.N_PARAMS] != b[:G.N_PARAMS]) > 0.5
    # statistically alike: the same order of magnitude
    ra, rb = np.sqrt(np.mean(a * a)), np.sqrt(np.mean(b * b))
    assert 0.5 < ra / rb < 2.0


@pytest.mark.parametrize("dtype", ["float32", "float64", np.float32, np.dtype(np.float64)])
def test_dtype_length_finite(dtype):
    for n in (0, 1, 1000, N):
        x = G.gradients(n, dtype, seed=0)
        assert x.dtype == np.dtype(dtype) and x.shape == (n,)
        assert np.all(np.isfinite(x))


def test_float32_is_float64_rounded_once():
    x64 = G.gradients(N, "float64", seed=2)
    x32 = G.gradients(N, "float32", seed=2)
    assert np.array_equal(x32, x64.astype(np.float32))


def test_bad_arguments():
    with pytest.raises(TypeError):
        G.gradients(10, "float16")
    with pytest.raises(ValueError):
        G.gradients(-1)
    with pytest.raises(ValueError):
        G.gradients(1.5)  # type: ignore[arg-type]


def test_values_look_like_gradients():
    x = G.gradients(N, "float32", seed=0)
    a = np.abs(x.astype(np.float64))
    zeros = np.mean(a == 0)
    # measured about 29 % exact zeros (blank pixels, inactive ReLU units): some, not most
    assert 0.05 < zeros < 0.45, zeros
    nz = a[a > 0]
    # magnitudes spread over orders of magnitude, centred near 1e-3
    assert 1e-5 < np.median(nz) < 1e-1
    assert np.percentile(nz, 99) / np.percentile(nz, 1) > 100
    assert a.max() < 10.0
    # not trivially compressible (measured: zlib keeps about 72 % of the bytes)
    raw = x.tobytes()
    assert len(zlib.compress(raw, 6)) > 0.5 * len(raw)


def test_training_makes_progress():
    G.gradients(6 * G.N_PARAMS, "float32", seed=5)
    losses = G._streams[5].losses
    assert len(losses) == 6 and all(np.isfinite(losses))
    assert 1.5 < losses[0] < 3.5           # about log(10) at the start


def test_generate_real_kind():
    assert bench_data.KINDS[0] == "real"
    x = bench_data.generate("real", 4096, "float32", seed=4)
    assert np.array_equal(x, G.gradients(4096, "float32", seed=4))
    # the synthetic kinds are unchanged
    g = bench_data.generate("gradient", 1000, "float64", seed=1)
    rng = np.random.default_rng(1)
    ref = rng.standard_normal(1000)
    ref *= np.exp(2.0 * rng.standard_normal(1000))
    assert np.allclose(g, ref, rtol=1e-12, atol=0)


def test_backprop_matches_finite_differences():
    rng = np.random.default_rng(7)
    layers = (5, 7, 6, 4)
    params = G.init_params(layers, seed=11)
    for p in params[1::2]:                  # non-zero biases, so they are tested too
        p += 0.1 * rng.standard_normal(p.shape)
    x = rng.standard_normal((9, layers[0]))
    y = rng.integers(0, layers[-1], 9)
    _, grads = G.loss_and_grads(params, x, y)
    h = 1e-6
    for p, g in zip(params, grads, strict=True):
        assert g.shape == p.shape
        num = np.empty_like(p)
        for i in np.ndindex(p.shape):
            old = p[i]
            p[i] = old + h
            lp, _ = G.loss_and_grads(params, x, y)
            p[i] = old - h
            lm, _ = G.loss_and_grads(params, x, y)
            p[i] = old
            num[i] = (lp - lm) / (2 * h)
        assert np.allclose(g, num, rtol=1e-5, atol=1e-8), np.max(np.abs(g - num))


def test_missing_scikit_learn_says_what_to_install(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name == "sklearn" or name.startswith("sklearn."):
            raise ImportError("No module named 'sklearn'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(ImportError, match=r"pip install 'mpicomp\[bench\]'"):
        G.load_digits_data()


def test_weights_are_the_trained_parameters():
    """Snapshot 1 is the parameters after WEIGHT_INTERVAL SGD steps on the gradients of
    the same seed's training; dense; deterministic; float32 is float64 rounded once."""
    n = G.N_PARAMS + 100
    w = bench_data.generate("weights", n, "float64", seed=3)
    params = G.init_params()
    g = G.gradients(G.WEIGHT_INTERVAL * G.N_PARAMS, "float64", seed=3)
    at = 0
    for _ in range(G.WEIGHT_INTERVAL):
        for p in params:
            p -= G.LEARNING_RATE * g[at:at + p.size].reshape(p.shape)
            at += p.size
    first = np.concatenate([p.ravel() for p in params])
    np.testing.assert_allclose(w[:G.N_PARAMS], first, rtol=1e-12, atol=1e-15)
    assert np.mean(w == 0) < 0.01
    np.testing.assert_array_equal(bench_data.generate("weights", n, "float32", seed=3),
                                  w.astype(np.float32))


def test_field_solves_the_wave_equation():
    """The field is smooth (neighbours differ by a few % of the range), non-trivial, zero on
    the walls, and one more leapfrog step from it agrees with the discrete equation."""
    from mpicomp.bench import field as F

    side = 64
    u = bench_data.generate("field", side * side, "float64", seed=2).reshape(side, side)
    assert np.all(u[0] == 0) and np.all(u[:, -1] == 0)
    spread = float(u.max() - u.min())
    assert spread > 0.01
    assert float(np.abs(np.diff(u, axis=1)).max()) < 0.2 * spread
    assert np.array_equal(F.field(100, "float32", seed=2), F.field(100, "float32", seed=2))
    with pytest.raises(ValueError, match="n must be"):
        F.field(-1)
