"""GradientReducer on device buffers: packing, error feedback and averaging on the device.

Marked ``device``: on a GPU (``make test-gpu``) with CuPy and Numba device
arrays, without one under Numba's CUDA simulator (``make test`` stages
``sim2``/``sim3``) with simulator arrays and host memory behind
``__cuda_array_interface__``. Results are checked against the exact mean
with the codec's bound, bitwise across ranks, and (where the CPU codecs
run, on a GPU machine) bitwise against the host reducer's first step.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from mpicomp.algorithms import bounds
from mpicomp.backend.device import DEVICE
from mpicomp.backend.host import HOST
from mpicomp.codecs import get_codec
from mpicomp.kernels.jit import SIMULATOR
from mpicomp.training import ErrorFeedback, GradientReducer

sys.path.insert(0, str(Path(__file__).parent))
from device_buffers import KINDS, needs_device, to_device, to_host  # noqa: E402,F401

pytestmark = [pytest.mark.mpi, pytest.mark.device]

SHAPES = {"a.weight": (24, 40), "a.bias": (24,), "b.weight": (7, 33)}  # partial blocks


def host_grads(r: int, step: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * r + step)
    return {n: (rng.standard_normal(s) * np.exp(rng.standard_normal(s))).astype(dtype)
            for n, s in SHAPES.items()}


def kept_max(red: GradientReducer) -> float:
    """The largest magnitude of the residuals ``red`` keeps (0 without any)."""
    out = 0.0
    for key in red.feedback._state:
        v = red.feedback._load(key, DEVICE).copy_to_host()
        out = max(out, float(np.abs(v).max()))
    return out


@pytest.mark.parametrize(("kind", "dtype"), [(KINDS[0], np.float32), (KINDS[1], np.float64)],
                         ids=[f"{KINDS[0]}-f32", f"{KINDS[1]}-f64"])
@pytest.mark.parametrize("feedback", ["none", "classic", "loco"])
def test_device_reduce_within_bound_identically(comm, kind, dtype, feedback):
    """Two steps: the mean within the codec's bound of the exact mean of the gradients plus
    the residuals added to them (at most ``e`` per value on each rank), the same bits on
    every rank, biases (a rule: plain) exact."""
    p, r = comm.Get_size(), comm.Get_rank()
    config = {"id": "bitplane", "rate": 8.25}
    red = GradientReducer(comm, codec=config, threshold=0, bucket_mib=0.002,
                          error_feedback=feedback, rules=[("*.bias", {"codec": "none"})])
    c, a = bounds.codec_constants(get_codec(config), np.dtype(dtype))
    for step in range(2):
        g = host_grads(r, step, dtype)
        exact = {n: comm.allreduce(v.astype(np.float64)) / p for n, v in g.items()}
        e = kept_max(red)
        esum = sum(comm.allgather(e))
        d = {n: to_device(v, kind) for n, v in g.items()}
        red.reduce(d)
        for name, buf in d.items():
            got = to_host(buf)
            assert got.shape == SHAPES[name] and got.dtype == dtype
            if name.endswith(".bias"):
                assert np.allclose(got, exact[name], rtol=1e-6, atol=1e-12), name
            else:
                gsum = sum(comm.allgather(float(np.abs(g[name]).max()) + e))
                limit = max(bounds.allreduce_bound(alg, p, c, a, gsum, np.dtype(dtype))
                            for alg in ("ring", "recursive_doubling", "allgather")) / p
                err = float(np.abs(got - exact[name]).max())
                assert err <= (limit + esum / p) * 1.01 + 1e-6 * gsum, (name, err, limit)
            every = comm.allgather(hashlib.sha256(got.tobytes()).hexdigest())
            assert len(set(every)) == 1, f"{name}: not the same bits on every rank"
    assert all(s["settings"].get("place") == "device" for s in red.describe())
    if feedback != "none" and p > 1:
        assert red.feedback.nbytes() > 0 and kept_max(red) > 0


def test_device_first_step_matches_host_bitwise(comm):
    """Where the CPU codecs run (a GPU machine), the device reducer's first step is the
    host reducer's, bit for bit (the codecs write the same streams, the mean is a true
    division on both)."""
    if SIMULATOR:
        pytest.skip("the CPU codecs do not run under the CUDA simulator")
    r = comm.Get_rank()
    host = host_grads(r)
    dev = {n: to_device(v, "numba") for n, v in host.items()}
    for g in (host, dev):
        GradientReducer(comm, codec="bitplane", rate=4.25, threshold=0,
                        error_feedback="classic").reduce(g)
    for n in host:
        assert to_host(dev[n]).tobytes() == host[n].tobytes(), n


@pytest.mark.parametrize("store", [None, "float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["classic", "loco"])
def test_device_feedback_is_the_host_feedback(mode, store):
    """ErrorFeedback on device buckets keeps what it keeps on host buckets: the same
    residual (bitwise under the simulator; within a rounding on a GPU, where the compiler
    may fuse a multiply-add), clipped to the storage format, resets included."""
    from numba import cuda

    rng = np.random.default_rng(5)
    fbs = {ops.place: ErrorFeedback(mode, beta=0.5, reset_every=3, residual_dtype=store)
           for ops in (HOST, DEVICE)}
    for step in range(5):
        g = rng.standard_normal(300).astype(np.float32) * 10
        rt = np.round(g * 4) / 4
        g[7] = 1e6  # beyond float16: the residual is clipped, never Inf
        got = {}
        for ops in (HOST, DEVICE):
            fb = fbs[ops.place]
            x = g.copy() if ops is HOST else cuda.to_device(g)
            x = fb.compensate("k", x, ops)
            r = rt if ops is HOST else cuda.to_device(rt)
            fb.update("k", x, r, ops)
            fb.end_step()
            got[ops.place] = np.asarray(x if ops is HOST else x.copy_to_host())
        if SIMULATOR:
            assert got["host"].tobytes() == got["device"].tobytes(), step
        else:
            assert np.allclose(got["host"], got["device"], rtol=1e-3, atol=1e-3), step
    kept = fbs["device"]._load("k", DEVICE)
    vals = kept.copy_to_host()
    assert np.all(np.isfinite(vals))
    if store == "float16":
        assert np.abs(vals).max() <= 65504
    assert fbs["device"].nbytes() == 300 * (2 if store else 4)


@pytest.mark.parametrize("store", [None, "bfloat16"])
def test_device_feedback_moves_loaded_residuals_to_the_device(store):
    """Residuals restored from a checkpoint (host arrays) move to the device at their first
    use on device buckets, once: the step after the load adds them as the saved feedback
    would have, and what is kept from then on is device memory."""
    from numba import cuda

    from mpicomp import cuda_runtime

    rng = np.random.default_rng(6)
    g = rng.standard_normal(300).astype(np.float32)
    saved = ErrorFeedback("classic", residual_dtype=store)
    x = saved.compensate("k", cuda.to_device(g), DEVICE)
    saved.update("k", x, cuda.to_device(np.round(g * 4) / 4), DEVICE)
    saved.end_step()
    want = saved.compensate("k", cuda.to_device(g), DEVICE).copy_to_host()
    fb = ErrorFeedback("classic", residual_dtype=store)
    fb.load_state_dict(saved.state_dict())
    assert isinstance(fb._state["k"].data, np.ndarray)  # (as a checkpoint holds it)
    got = fb.compensate("k", cuda.to_device(g), DEVICE).copy_to_host()
    assert got.tobytes() == want.tobytes()
    assert cuda_runtime.is_device_array(fb._state["k"].data)


def test_device_nonfinite_is_sent_plain_and_keeps_no_residual(comm):
    """A NaN in one rank's device gradient: the bucket goes plain on every rank (NaN in the
    mean, as plain MPI gives), so no rank lost anything to compression: every rank's classic
    residual of that step is zero."""
    p, r = comm.Get_size(), comm.Get_rank()
    red = GradientReducer(comm, codec="bitplane", rate=4.25, threshold=0,
                          error_feedback="classic")
    g = host_grads(r)["a.weight"]
    if r == 0:
        g[3, 5] = np.nan
    d = {"w": to_device(g, "numba")}
    red.reduce(d)
    got = to_host(d["w"])
    if p > 1:
        assert np.isnan(got[3, 5]) and np.isfinite(np.delete(got, 3 * 40 + 5)).all()
        exact = comm.allreduce(g.astype(np.float64)) / p
        mask = np.isfinite(exact)
        assert np.allclose(got[mask], exact[mask], rtol=1e-6, atol=1e-6)  # plain: exact
    assert red.feedback._state, "a residual is kept (zero: nothing was lost)"
    assert kept_max(red) == 0.0  # on every rank: the call went plain everywhere


def test_layout_disagreement_on_device_is_an_error_on_every_rank(comm):
    """Rank 1 places its gradients otherwise (host against device), then gives one in
    another dtype: each time every rank raises the same ValueError, none hangs."""
    if comm.Get_size() == 1:
        pytest.skip("needs 2 ranks")
    red = GradientReducer(comm, codec="bitplane", rate=8.25)
    odd = comm.Get_rank() == 1
    for change in ("placement", "dtype"):
        g = host_grads(0)
        on_device = change == "dtype" or not odd
        if odd and change == "dtype":
            g["a.bias"] = g["a.bias"].astype(np.float64)
        with pytest.raises(ValueError, match="different gradient names, shapes, dtypes"):
            red.reduce({n: to_device(v, "numba") if on_device else v for n, v in g.items()})
    comm.Barrier()


def test_device_bad_inputs(comm):
    from numba import cuda

    red = GradientReducer(MPI.COMM_SELF, codec="bitplane", rate=8.25)
    with pytest.raises(TypeError, match="float array"):
        red.reduce({"i": cuda.to_device(np.zeros(4, np.int32))})
    strided = cuda.to_device(np.zeros((4, 4), np.float32))[:, 1]
    with pytest.raises(ValueError, match="C-contiguous"):
        red.reduce({"s": strided})
