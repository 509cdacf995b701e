"""On a real GPU: the GPU codecs match the CPU codecs byte for byte, at full size.

Marked ``gpu``: skipped without a CUDA device; ``make test-gpu`` runs them
(and the ``device`` communicator tests under mpiexec). The arrays have
``MPICOMP_GPU_TEST_N`` values (default 2**27, i.e. 512 MiB of float32);
every CUDA buffer kind the codecs take is fed in: CuPy arrays, Numba device
arrays, PyTorch CUDA tensors (when PyTorch is installed) and DLPack
capsules' producers.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from mpicomp.codecs import get_codec
from mpicomp.errors import UncompressibleError

pytestmark = pytest.mark.gpu

N = int(os.environ.get("MPICOMP_GPU_TEST_N", str(1 << 27)))

CODECS = [
    {"id": "bitplane", "rate": 4.25},
    {"id": "bitplane", "rate": 8.25},
    {"id": "bitplane", "rate": 16.25},
    {"id": "zfp", "rate": 8, "dims": 1},
    {"id": "zfp", "rate": 16, "dims": 1},
    {"id": "zfp", "rate": 8, "dims": 3},
    {"id": "cast", "dtype": "float16"},
    {"id": "cast", "dtype": "bfloat16"},
    {"id": "errbound", "tolerance": 2.5e-4},
    {"id": "errbound", "tolerance": 1e-3, "relative": True},
    {"id": "errbound", "tolerance": 1e-5, "relative": True},
]


def _cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(N, dtype=np.float32) * 0.05).astype(np.float32)
    x[::1001] *= 50.0  # a spread of block exponents
    return x


@pytest.mark.parametrize("config", CODECS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_large_array_byte_equal(data, config):
    cp = _cupy()
    codec = get_codec(config)
    x = data
    if config["id"] == "cast" and config["dtype"] == "float16":
        x = np.clip(x, -6e4, 6e4)
    cpu_stream = codec.encode(x)
    gpu_stream = codec.encode(cp.asarray(x))
    cp.cuda.get_current_stream().synchronize()
    assert gpu_stream.size == cpu_stream.size
    mismatches = int(cp.count_nonzero(gpu_stream != cp.asarray(cpu_stream)))
    assert mismatches == 0, f"{mismatches} stream bytes differ from the CPU codec"
    cpu_out = codec.decode(cpu_stream, count=x.size, dtype=x.dtype)
    gpu_out = codec.decode(gpu_stream, count=x.size, dtype=x.dtype)
    same = cp.asarray(cpu_out).view(cp.uint32) == gpu_out.view(cp.uint32)
    assert bool(same.all()), "decoded values differ from the CPU codec"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float64_and_partial_blocks(dtype):
    cp = _cupy()
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((1 << 20) + 13) * 3).astype(dtype)
    for config in CODECS:
        codec = get_codec(config)
        if dtype == np.float64 and config["id"] == "cast" and config["dtype"] == "float16":
            continue
        want = codec.encode(x)
        got = codec.encode(cp.asarray(x))
        assert np.array_equal(cp.asnumpy(got), want), config


def test_buffer_kinds():
    """CuPy, Numba, PyTorch and DLPack producers all encode to the same bytes."""
    cp = _cupy()
    from numba import cuda

    codec = get_codec({"id": "bitplane", "rate": 8.25})
    x = np.random.default_rng(2).standard_normal(100_003).astype(np.float32)
    want = codec.encode(x)
    inputs = {"cupy": cp.asarray(x), "numba": cuda.to_device(x)}
    try:
        import torch

        inputs["torch"] = torch.from_numpy(x).cuda()
    except ImportError:
        pass

    class DLPackOnly:
        def __init__(self, a):
            self._a = a

        def __dlpack__(self, **kwargs):
            return self._a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self._a.__dlpack_device__()

    inputs["dlpack"] = DLPackOnly(cp.asarray(x))
    for name, buf in inputs.items():
        got = codec.encode(buf)
        host = got.copy_to_host() if hasattr(got, "copy_to_host") else cp.asnumpy(got)
        assert np.array_equal(host, want), name


def test_nonfinite_refused_on_gpu():
    cp = _cupy()
    x = np.ones(4096, np.float32)
    x[100] = np.nan
    for config in CODECS[:4]:
        with pytest.raises(UncompressibleError):
            get_codec(config).encode(cp.asarray(x))
