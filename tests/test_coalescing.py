"""The GPU kernels' global-memory accesses are coalesced: measured under the CUDA simulator.

``tests/coalescing_run.py`` encodes and decodes a small device buffer per
case and counts the 32-byte sectors each warp-wide request touches against
the fewest that could hold its bytes (``tests/sector_count.py``). A kernel
where each thread walks its own block of values touches 4x-32x the minimum
and cannot reach the memory roofline on a GPU; the warp-cooperative kernels
(``kernels/warp.py``) must stay within :data:`LIMIT`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from coalescing_run import CASES  # noqa: E402

pytestmark = pytest.mark.slow  # left out of make test-quick

HERE = Path(__file__).parent
#: sectors touched over the coalesced minimum, every hot kernel (issue: GPU kernels at the roofline)
LIMIT = 1.25


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    out = tmp_path_factory.mktemp("coalescing") / "sectors.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, str(HERE / "coalescing_run.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_accesses_are_coalesced(counted, case):
    result = counted[case]
    assert result["ratio"] <= LIMIT, f"{case}: {result['ratio']:.2f}x\n{result['lines']}"
