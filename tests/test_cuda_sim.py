"""The GPU kernels, run by Numba's CUDA simulator, match the CPU codecs byte for byte.

One subprocess with ``NUMBA_ENABLE_CUDASIM=1`` runs every case (the
simulator executes the kernels' Python, the same per-block code the CPU
drivers compile); this process encodes the same inputs with the CPU codecs
and compares streams and decoded values exactly.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpicomp.codecs import get_codec
from mpicomp.errors import UncompressibleError

sys.path.insert(0, str(Path(__file__).parent))
import cuda_cases_bitplane  # noqa: E402
import cuda_cases_errbound  # noqa: E402
import cuda_cases_zfp  # noqa: E402
from cudasim_run import HOSTILE, case_data, random_stream  # noqa: E402

pytestmark = pytest.mark.slow  # left out of make test-quick

HERE = Path(__file__).parent


def cases() -> list[dict]:
    out = []
    sizes = [1, 7, 100, 1000, 2053]
    codecs = [
        {"id": "cast", "dtype": "float16"},
        {"id": "cast", "dtype": "bfloat16"},
    ]
    for codec in codecs:
        for dtype in ("float32", "float64"):
            for n in sizes:
                kind = "special" if n >= 1000 else "gradient"
                if codec.get("dtype") == "float16" and n == 100:
                    kind = "narrow"  # within half's range: these must encode
                out.append({"codec": codec, "dtype": dtype, "n": n, "seed": n, "kind": kind})
    # refusals and tiny values, for every codec
    for codec in codecs + [{"id": "bitplane", "rate": 8.25}, {"id": "zfp", "rate": 8, "dims": 1},
                           {"id": "zfp", "rate": 4, "dims": 3}]:
        for dtype in ("float32", "float64"):
            for kind in ("nonfinite", "tiny"):
                out.append({"codec": codec, "dtype": dtype, "n": 333, "seed": 5, "kind": kind})
    # hostile input: arbitrary bytes decoded on the device as on the CPU
    for codec in [{"id": "bitplane", "rate": 4.25}, {"id": "bitplane", "rate": 16.25},
                  {"id": "zfp", "rate": 8, "dims": 1}, {"id": "zfp", "rate": 16, "dims": 3},
                  {"id": "cast", "dtype": "bfloat16"}]:
        for dtype in ("float32", "float64"):
            out.append({"codec": codec, "dtype": dtype, "n": 517, "seed": 11,
                        "kind": "random_stream"})
    return (out + cuda_cases_bitplane.CASES + cuda_cases_zfp.CASES
            + cuda_cases_errbound.CASES)


CASES = cases()


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cudasim")
    (tmp / "cases.json").write_text(json.dumps(CASES))
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run(
        [sys.executable, str(HERE / "cudasim_run.py"), str(tmp / "cases.json"),
         str(tmp / "out.npz")],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return np.load(tmp / "out.npz")


def case_id(c: dict) -> str:
    codec = c["codec"]
    warps = f"-{c['warps']}warps" if "warps" in c else ""
    return f"{codec['id']}-{codec.get('dtype', codec.get('rate'))}-{c['dtype']}-{c['n']}{warps}"


@pytest.mark.parametrize("i", range(len(CASES)), ids=[case_id(c) for c in CASES])
def test_gpu_kernels_match_cpu(simulated, i):
    case = CASES[i]
    codec = get_codec(case["codec"])
    x = case_data(case)
    if case.get("kind") in HOSTILE:  # hostile bytes: decoded, within the buffer
        try:
            decoded = codec.decode(random_stream(case, codec), out=np.empty_like(x))
        except ValueError as exc:  # refused on the CPU: refused on the device, alike
            assert str(simulated[f"refused{i}"]) == str(exc)
            return
        assert case["kind"] == "random_stream", f"the CPU decoded a {case['kind']} stream"
        assert simulated[f"decoded{i}"].shape == decoded.shape
        if not (codec.codec_id == "bitplane" and x.dtype == np.float64):
            # the same values from the same bytes; a float64 bitplane block exponent beyond
            # float64's range (no encoder writes one) decodes differently on CPU and GPU
            np.testing.assert_array_equal(simulated[f"decoded{i}"].view(np.uint8),
                                          decoded.view(np.uint8))
        return
    try:
        stream = codec.encode(x)
    except UncompressibleError as exc:  # the GPU must refuse the buffer for the same reason
        assert str(simulated[f"error{i}"]) == exc.reason
        return
    assert f"error{i}" not in simulated, str(simulated[f"error{i}"])
    decoded = codec.decode(stream, out=np.empty_like(x))
    np.testing.assert_array_equal(simulated[f"stream{i}"], stream)
    np.testing.assert_array_equal(simulated[f"decoded{i}"].view(np.uint8), decoded.view(np.uint8))
