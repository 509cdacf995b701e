"""Count the global-memory sectors of the GPU kernels' accesses under Numba's CUDA simulator.

Started by ``tests/test_coalescing.py`` as
``NUMBA_ENABLE_CUDASIM=1 python tests/coalescing_run.py OUT.json [CASE ...]``:
for every case (a codec on device data, as the codec launches its kernels)
it encodes and decodes a small buffer inside :class:`sector_count.SectorCount`
and writes ``{case: {"ratio": sectors / fewest, "lines": report}}``.
Cases are named ``codec-config-dtype`` (see :data:`CASES`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

#: name -> (codec config, dtype, values): sizes that fill several warps and end mid-block
CASES: dict[str, tuple[dict, str, int]] = {
    "bitplane-8.25-float32": ({"id": "bitplane", "rate": 8.25}, "float32", 2080),
    "bitplane-8.25-float64": ({"id": "bitplane", "rate": 8.25}, "float64", 1056),
    "bitplane-4.25-float32": ({"id": "bitplane", "rate": 4.25}, "float32", 2080),
    "bitplane-16.25-float32": ({"id": "bitplane", "rate": 16.25}, "float32", 1056),
    "bitplane-8.25-bs8-float32": ({"id": "bitplane", "rate": 9, "block_size": 8}, "float32", 1056),
    "bitplane-12.25-bs64-float64": ({"id": "bitplane", "rate": 12.25, "block_size": 64},
                                    "float64", 1056),
    "cast-bfloat16-float32": ({"id": "cast", "dtype": "bfloat16"}, "float32", 4096),
    "cast-bfloat16-float64": ({"id": "cast", "dtype": "bfloat16"}, "float64", 4096),
    "cast-float16-float32": ({"id": "cast", "dtype": "float16"}, "float32", 4096),
    "cast-float16-float64": ({"id": "cast", "dtype": "float16"}, "float64", 4096),
    "zfp-8-1d-float32": ({"id": "zfp", "rate": 8, "dims": 1}, "float32", 4096),
    "zfp-7.25-1d-float64": ({"id": "zfp", "rate": 7.25, "dims": 1}, "float64", 4096),
    "errbound-1e-3-float32": ({"id": "errbound", "tolerance": 1e-3}, "float32", 4096),
    "errbound-1e-5-rel-float64": ({"id": "errbound", "tolerance": 1e-5, "relative": True},
                                  "float64", 4096),
}


def run(name: str) -> dict:
    from numba import cuda
    from sector_count import SectorCount

    from mpicomp.codecs import get_codec

    config, dtype, n = CASES[name]
    codec = get_codec(config)
    x = (np.random.default_rng(0).standard_normal(n)).astype(dtype)
    d = cuda.to_device(x)
    out = cuda.device_array_like(x)
    with SectorCount() as count:
        stream = codec.encode(d)
        codec.decode(stream, out=out)
    assert np.array_equal(out.copy_to_host(), codec.decode(codec.encode(x), out=np.empty_like(x)))
    return {"ratio": count.ratio(), "lines": count.report()}


def main(out_path: str, names: list[str]) -> int:
    from mpicomp.kernels.jit import SIMULATOR

    if not SIMULATOR:
        print("run me with NUMBA_ENABLE_CUDASIM=1", file=sys.stderr)
        return 2
    # the simulator's barriers hand the GIL between its threads (0.3 ms: this script on
    # every case 66 s alone, at 0.1 ms 86 s)
    sys.setswitchinterval(3e-4)
    results = {name: run(name) for name in (names or list(CASES))}
    Path(out_path).write_text(json.dumps(results, indent=1))
    for name, r in results.items():
        print(f"{name}: {r['ratio']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
