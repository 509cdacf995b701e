"""GPU test cases of the ``zfp`` codec: simulator cases and kernels to compile to PTX.

``CASES``: dicts with codec (config), dtype, n, seed, kind (see cudasim_run.case_data),
run by tests/test_cuda_sim.py. ``KERNELS``: (module, kernel name, signature) for
tests/test_cuda_compile.py.
"""
from __future__ import annotations


def _cases() -> list[dict]:
    out = []
    # dims=1: budgets <= 64 bits take the register kernels (encode_1d/decode_1d),
    # larger ones the general chunk/block kernels; odd budgets straddle words.
    plan = [
        (1, 4, (1, 5, 100, 2053)),
        (1, 8, (7, 1000)),
        (1, 16, (100, 2053)),
        (1, 32, (5, 1000)),
        (1, 7.25, (5, 1000)),  # maxbits 29: blocks straddle words
        (1, 20.75, (1000,)),  # maxbits 83: general kernels, chunks of 64 blocks
        (2, 4, (1, 100, 1000)),
        (2, 9.5625, (37, 1000)),  # maxbits 153
        (3, 2, (5, 100, 1000)),
        (3, 8, (1000, 2053)),
    ]
    for dims, rate, sizes in plan:
        for dtype in ("float32", "float64"):
            for n in sizes:
                kind = "special" if n >= 1000 else "gradient"
                out.append({"codec": {"id": "zfp", "rate": rate, "dims": dims},
                            "dtype": dtype, "n": n, "seed": n + dims, "kind": kind})
    # thread blocks of 4 warps, as on a GPU (the simulator launches one); maxbits 29: chunks
    # of 64 blocks
    for rate, dtype in [(8, "float32"), (7.25, "float64")]:
        out.append({"codec": {"id": "zfp", "rate": rate, "dims": 1}, "dtype": dtype,
                    "n": 9000, "seed": 9, "kind": "gradient", "warps": 4})
    return out


CASES: list[dict] = _cases()

_ENC1 = "void({bits}[:], uint64[:], int64, int32[:])"
_DEC1 = "void(uint64[:], {float}[:], int64)"
_ENC = "void({float}[:], {bits}[:], uint64[:], int64, int64, int64, int32[:])"
_DEC = "void(uint64[:], {float}[:], int64, int64)"

KERNELS: list[tuple[str, str, str]] = [
    ("zfp_cuda", name, sig.format(bits=bits, float=flt))
    for bits, flt in (("uint32", "float32"), ("uint64", "float64"))
    for name, sig in (("encode_1d", _ENC1), ("decode_1d", _DEC1), ("encode_chunks", _ENC),
                      ("decode_blocks", _DEC))
]
