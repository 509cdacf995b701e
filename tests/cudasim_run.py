"""Run codecs' GPU kernels under Numba's CUDA simulator; save what they produce.

Started by ``tests/test_cuda_sim.py`` as
``NUMBA_ENABLE_CUDASIM=1 python tests/cudasim_run.py CASES.json OUT.npz``:
for every case (codec config, dtype, count, seed) it encodes device data
with the GPU kernels and decodes the stream again on the device, and
stores the stream and the decoded values; the test compares them, byte for
byte, with the CPU codec in its own (normal) process.
"""
from __future__ import annotations

import json
import sys

import numpy as np


def case_data(case: dict) -> np.ndarray:
    """The input of a case (the same function in both processes)."""
    rng = np.random.default_rng(case["seed"])
    n, dt = case["n"], np.dtype(case["dtype"])
    x = rng.standard_normal(n) * np.exp(2 * rng.standard_normal(n))
    if case.get("kind") == "narrow":
        x = np.clip(x, -6e4, 6e4)
    kind = case.get("kind")
    if kind == "special" and n >= 8:
        x[:8] = [0.0, -0.0, 1e-30, -1e30, 5e-39, 3e-310, 1.5, -2.0]
    if kind == "mixed" and n >= 1024:  # every errbound block coding, a raw block between
        third = n // 3
        x[:third] = np.sin(np.arange(third) / 40.0) * 3  # smooth: delta, order 2
        x[third // 2:third] = np.sin(np.arange(third - third // 2) / 8.0) * 30  # order 3
        x[third:2 * third] *= rng.random(third) < 0.2  # sparse: zero masks
        x[2 * third:2 * third + 256] = np.cumsum(rng.integers(-3, 4, 256)) * 2e-3  # order 1
        x[69] = 1e30  # a raw block (values 64-95) before a smooth block's history
    if kind == "tiny":  # subnormals and blocks below zfp's 2**-97 (float32) / 2**-961 scale
        x = x * (1e-40 if dt == np.float32 else 1e-300) * 1e-10
    if kind == "nonfinite" and n >= 3:  # must be refused by the block codecs, as on the CPU
        x[n // 2], x[-1] = np.nan, -np.inf
    return x.astype(dt)


#: kinds of hostile input: bytes a decoder must refuse or decode within the buffer
HOSTILE = ("random_stream", "bad_step", "too_long", "past_bytes")


def random_stream(case: dict, codec) -> np.ndarray:
    """The hostile bytes of a case (its ``kind`` one of :data:`HOSTILE`): arbitrary bytes of
    a stream's length, or an errbound stream of gradients (the host codec's) with a negative
    step, its first group's size 4096 bytes longer (past the stream's end) or 4 shorter
    (its blocks run past its bytes)."""
    n = codec.encoded_nbytes(case["n"], np.dtype(case["dtype"]))
    kind = case["kind"]
    if kind == "random_stream":
        return np.random.default_rng(case["seed"]).integers(0, 256, n, dtype=np.uint8)
    x = case_data({**case, "kind": "gradient"})
    stream = codec.encode(x).copy()
    nblocks = -(-x.size // 32)
    at = 8 + nblocks  # the first group's size (errbound's layout: docs/format.md)
    size = int(stream[at]) | int(stream[at + 1]) << 8
    if kind == "bad_step":
        stream[:8] = np.frombuffer(np.float64(-0.5).tobytes(), np.uint8)
    else:
        size += 4096 if kind == "too_long" else -4
        stream[at:at + 2] = [size & 0xFF, size >> 8]
    return stream


def main(cases_path: str, out_path: str) -> int:
    from numba import cuda

    from mpicomp.codecs import get_codec
    from mpicomp.errors import UncompressibleError
    from mpicomp.kernels import warp
    from mpicomp.kernels.jit import SIMULATOR

    if not SIMULATOR:
        print("run me with NUMBA_ENABLE_CUDASIM=1", file=sys.stderr)
        return 2
    # the warp-cooperative kernels meet at a barrier of the simulator's Python threads per
    # warp operation: handing the GIL on sooner than every 5 ms makes each one 10x cheaper
    # (0.3 ms: pytest tests/test_cuda_sim.py 106 s alone, at 0.1 ms 158 s)
    sys.setswitchinterval(3e-4)
    with open(cases_path) as fh:
        cases = json.load(fh)
    results = {}
    warps = warp.WARPS
    for i, case in enumerate(cases):
        # the simulator launches thread blocks of one warp; "warps": 4 launches the GPU's shape
        warp.WARPS = case.get("warps", warps)
        codec = get_codec(case["codec"])
        x = case_data(case)
        if case.get("kind") in HOSTILE:  # decode hostile bytes on the device
            try:
                decoded = codec.decode(cuda.to_device(random_stream(case, codec)),
                                       count=x.size, dtype=x.dtype)
            except ValueError as exc:  # refused (errbound reads a layout from the bytes)
                results[f"refused{i}"] = np.array(str(exc))
                continue
            results[f"decoded{i}"] = decoded.copy_to_host()
            continue
        try:
            stream = codec.encode(cuda.to_device(x))
        except UncompressibleError as exc:
            results[f"error{i}"] = np.array(exc.reason)
            continue
        decoded = codec.decode(stream, count=x.size, dtype=x.dtype)
        results[f"stream{i}"] = stream.copy_to_host()
        results[f"decoded{i}"] = decoded.copy_to_host()
    np.savez(out_path, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
