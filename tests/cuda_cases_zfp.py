"""GPU test cases of the ``zfp`` codec: simulator cases and kernels to compile to PTX.

``CASES``: dicts with codec (config), dtype, n, seed, kind (see cudasim_run.case_data),
run by tests/test_cuda_sim.py. ``KERNELS``: (module, kernel name, signature) for
tests/test_cuda_compile.py.
"""
from __future__ import annotations

CASES: list[dict] = []

KERNELS: list[tuple[str, str, str]] = []
