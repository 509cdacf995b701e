"""GPU test cases of the ``errbound`` codec: simulator cases and kernels to compile to PTX.

``CASES``: dicts with codec (config), dtype, n, seed, kind (see cudasim_run.case_data),
run by tests/test_cuda_sim.py: absolute and relative bounds, bounds below the dtype's
rounding (raw blocks), partial last blocks, every block coding (mixed data), NaN/Inf
refused, hostile bytes. ``KERNELS``: (module, kernel name, signature) for
tests/test_cuda_compile.py.
"""
from __future__ import annotations


def _cases() -> list[dict]:
    out = []
    for codec in ({"id": "errbound", "tolerance": 1e-2},
                  {"id": "errbound", "tolerance": 1e-4, "relative": True},
                  {"id": "errbound", "tolerance": 1e-12}):
        for dtype in ("float32", "float64"):
            for n in (1, 33, 1000):
                out.append({"codec": codec, "dtype": dtype, "n": n, "seed": n + 3,
                            "kind": "special" if n >= 1000 else "gradient"})
            for kind in ("nonfinite", "tiny"):
                out.append({"codec": codec, "dtype": dtype, "n": 333, "seed": 5, "kind": kind})
    for dtype in ("float32", "float64"):
        out.append({"codec": {"id": "errbound", "tolerance": 1e-2}, "dtype": dtype, "n": 2000,
                    "seed": 13, "kind": "mixed"})
        out.append({"codec": {"id": "errbound", "tolerance": 1e-2}, "dtype": dtype, "n": 517,
                    "seed": 11, "kind": "random_stream"})
        # what the decoder refuses besides a bad code byte (the device reports it, the codec
        # raises the CPU decoder's error)
        for kind in ("bad_step", "too_long", "past_bytes"):
            out.append({"codec": {"id": "errbound", "tolerance": 1e-2}, "dtype": dtype,
                        "n": 2000, "seed": 17, "kind": kind})
    return out


CASES: list[dict] = _cases()

_ENCODE = "void({x}[:], uint8[:], float64, float64, float64, uint8[:], int64[:])"
_DECODE = "void(uint8[:], {x}[:], uint8[:], int64[:])"
_RECONSTRUCT = "void({x}[:], uint8[:], {x}[:])"

KERNELS: list[tuple[str, str, str]] = [
    (module, name, sig.format(x=x))
    for x in ("float32", "float64")
    for module, name, sig in (("errbound_cuda", "encode", _ENCODE),
                              ("errbound_cuda", "decode", _DECODE),
                              ("errbound_cuda", "reconstruct", _RECONSTRUCT))
] + [("errbound_cuda", "zero", "void(int64[:])")]
