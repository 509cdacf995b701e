"""GPU test cases of the ``bitplane`` codec: simulator cases and kernels to compile to PTX.

``CASES``: dicts with codec (config), dtype, n, seed, kind (see cudasim_run.case_data),
run by tests/test_cuda_sim.py. ``KERNELS``: (module, kernel name, signature) for
tests/test_cuda_compile.py.
"""
from __future__ import annotations


def _cases() -> list[dict]:
    out = []
    # (rate, block_size, dtypes, sizes): partial last blocks, P <= 8, one and two
    # 8-plane chunks, the widest codes (P = 24 for float32, 53 for float64), other block sizes
    plan = [
        (4.25, 32, ("float32", "float64"), (1, 7, 100, 1000)),
        (8.25, 32, ("float32", "float64"), (7, 100, 2053)),
        (16.25, 32, ("float32", "float64"), (1, 100, 1000)),
        (24.25, 32, ("float32",), (100,)),
        (24.5, 32, ("float64",), (100, 1000)),
        (53.5, 32, ("float64",), (100,)),
        (8.25, 8, ("float32", "float64"), (9, 300, 1001)),
        (12.25, 64, ("float32", "float64"), (1, 100, 1000)),
        (2.5, 16, ("float32",), (100,)),
    ]
    for rate, bs, dtypes, sizes in plan:
        for dtype in dtypes:
            for n in sizes:
                out.append({
                    "codec": {"id": "bitplane", "rate": rate, "block_size": bs},
                    "dtype": dtype,
                    "n": n,
                    "seed": n + bs,
                    "kind": "special" if n >= 1000 else "gradient",
                })
    # thread blocks of 4 warps, as on a GPU (the simulator launches one): several blocks, the
    # last one's warps partly idle
    for rate, bs, dtype, n in [(8.25, 32, "float32", 9000), (9, 8, "float64", 5000),
                               (12.25, 64, "float32", 9000)]:
        out.append({"codec": {"id": "bitplane", "rate": rate, "block_size": bs}, "dtype": dtype,
                    "n": n, "seed": n, "kind": "gradient", "warps": 4})
    return out


CASES: list[dict] = _cases()

KERNELS: list[tuple[str, str, str]] = [
    ("bitplane_cuda", "encode", "void(uint32[:], int64, int64, uint8[:], int32[:])"),
    ("bitplane_cuda", "encode", "void(uint64[:], int64, int64, uint8[:], int32[:])"),
    ("bitplane_cuda", "decode", "void(uint8[:], int64, int64, float32[:])"),
    ("bitplane_cuda", "decode", "void(uint8[:], int64, int64, float64[:])"),
]
