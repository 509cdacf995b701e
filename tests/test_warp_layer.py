"""kernels/warp.py under Numba's CUDA simulator: ballots and maxima as a GPU's warp computes them.

The simulator has no warp operations; the layer's stand-ins exchange through
shared memory at a barrier. This runs a kernel of them in a simulator
subprocess, many launches of thread blocks of 1 and 4 warps (its shared
arrays must be one per block: the simulator's own ``cuda.shared.array``
could hand threads that reach it at once arrays of their own), and checks
every lane's result against NumPy.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

from mpicomp.kernels import warp

pytestmark = pytest.mark.slow  # left out of make test-quick

LAUNCHES = 40


_SCRATCH_SHAPE = warp.SCRATCH_SHAPE


@cuda.jit
def _kernel(values, width, ballots, maxima):
    scratch_all = cuda.shared.array(_SCRATCH_SHAPE, np.int64)
    scratch = scratch_all[warp.warp_id()]
    i = cuda.grid(1)
    v = values[i]
    ballots[i] = warp.ballot(v % 3 == 0, scratch)
    maxima[i] = warp.max_over(v, width, scratch)


def _simulated() -> int:
    rng = np.random.default_rng(0)
    wrong = 0
    for launch in range(LAUNCHES):
        warps = 1 + 3 * (launch % 2)
        width = 1 << (launch % 6)
        n = 32 * warps * 2
        values = rng.integers(-2**40, 2**40, n, dtype=np.int64)
        ballots = np.zeros(n, np.uint32)
        maxima = np.zeros(n, np.int64)
        _kernel[2, 32 * warps](values, width, ballots, maxima)
        for w in range(n // 32):
            lanes = values[32 * w:32 * w + 32]
            want_ballot = sum(1 << k for k in range(32) if lanes[k] % 3 == 0)
            want_max = np.repeat(lanes.reshape(-1, width).max(axis=1), width)
            wrong += int((ballots[32 * w:32 * w + 32] != want_ballot).sum())
            wrong += int((maxima[32 * w:32 * w + 32] != want_max).sum())
    print(f"wrong lanes: {wrong}")
    return 1 if wrong else 0


def test_warp_primitives_in_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "wrong lanes: 0" in proc.stdout


if __name__ == "__main__":
    sys.setswitchinterval(3e-4)  # as the test suite runs the simulator
    sys.exit(_simulated())
