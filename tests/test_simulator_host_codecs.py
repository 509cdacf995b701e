"""The host codecs work in a CUDA-simulator process whose kernel cache is empty.

Under ``NUMBA_ENABLE_CUDASIM=1`` the per-block functions are plain Python
(the simulated kernels run them); the CPU drivers, compiled code, reach
them through ``numba.extending.overload`` (``kernels/jit.py``). A process
with an empty ``NUMBA_CACHE_DIR`` therefore has to compile every CPU kernel
against those overloads: this test runs one and compares its streams and
decoded values byte for byte with this (normal) process's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mpicomp.codecs import get_codec

CONFIGS = [
    {"id": "bitplane", "rate": 8.25},
    {"id": "zfp", "rate": 8, "dims": 1},
    {"id": "cast", "dtype": "float16"},
    {"id": "cast", "dtype": "bfloat16"},
]
DTYPES = ["float32", "float64"]

CHILD = r"""
import json, sys
import numpy as np
from numba import config
assert config.ENABLE_CUDASIM, "the child must run under the simulator"
from mpicomp.codecs import get_codec
configs, dtypes, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
saved = {}
for i, spec in enumerate(configs):
    for dt in dtypes:
        x = np.linspace(-3.0, 3.0, 5003).astype(dt)
        c = get_codec(dict(spec))
        buf = c.encode(x)
        saved[f"{i}-{dt}-stream"] = buf
        saved[f"{i}-{dt}-values"] = c.decode(buf, out=np.empty_like(x))
np.savez(out, **saved)
"""


pytestmark = pytest.mark.slow  # left out of make test-quick


def test_host_codecs_encode_under_the_simulator_with_an_empty_cache(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "sim.npz"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(CONFIGS), json.dumps(DTYPES), str(out)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Warning" not in proc.stderr, proc.stderr[-3000:]
    got = np.load(out)
    for i, spec in enumerate(CONFIGS):
        for dt in DTYPES:
            x = np.linspace(-3.0, 3.0, 5003).astype(dt)
            c = get_codec(dict(spec))
            buf = c.encode(x)
            np.testing.assert_array_equal(got[f"{i}-{dt}-stream"], buf, err_msg=f"{spec} {dt}")
            np.testing.assert_array_equal(got[f"{i}-{dt}-values"],
                                          c.decode(buf, out=np.empty_like(x)),
                                          err_msg=f"{spec} {dt}")
