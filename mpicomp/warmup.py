"""``python -m mpicomp warmup``: compile every CPU kernel once, into Numba's on-disk cache.

A kernel that is not in the cache compiles at its first call, while the
other ranks wait in the collective (tens of seconds for some codecs). The
README's set-up (``make venv``) runs this, so the first compressed call of
a job only loads machine code. Run it again after changing a kernel, on a
cluster's node image (with ``NUMBA_CACHE_DIR`` where the image keeps it), or
after installing into a read-only site-packages (Numba then caches in a
user-wide folder, or in ``NUMBA_CACHE_DIR``).

It calls every CPU kernel with the argument types the communicator passes
(float32 and float64; read-only inputs; every codec path: bitplane's vector
and general paths and its guarded encode, zfp in 1, 2 and 3 dimensions and
its table decoder, both casts, errbound, the scans, the homomorphic allreduce's
kernels, error feedback's passes), and prints how long each took: the compile time on a cold cache,
the load time on a warm one.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["STEPS", "main", "warm"]

DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _codec_round_trip(spec: dict, guarded: bool = False) -> Callable[[np.dtype], None]:
    def run(dtype: np.dtype) -> None:
        from .codecs import get_codec

        codec = get_codec(dict(spec))
        x = np.linspace(-2.0, 2.0, 1 << 12).astype(dtype)
        x.flags.writeable = False
        if guarded:
            out = np.empty(codec.encoded_nbytes(x.size, dtype), np.uint8)
            codec.encode_into_guarded(x, out)
            buf = out
        else:
            buf = codec.encode(x)
        codec.decode(buf, out=np.empty_like(x))

    return run


def _scans(dtype: np.dtype) -> None:
    from .kernels.scan_cpu import add_into, max_abs

    x = np.linspace(-1.0, 1.0, 1 << 12).astype(dtype)
    max_abs(x)
    add_into(np.zeros_like(x), x)


def _homomorphic(dtype: np.dtype) -> None:
    from .algorithms import homomorphic
    from .kernels import fixedpoint_cpu as fx
    from .kernels.launch import run_kernel

    fmt = homomorphic.choose_format(16.25, 2)
    x = np.linspace(-1.0, 1.0, 1 << 12).astype(dtype)
    nblocks = -(-x.size // homomorphic.BLOCK)
    exps = np.empty(nblocks, np.int16)
    run_kernel(fx.block_exponents, x, homomorphic.BLOCK, exps)
    words = np.empty(-(-x.size // fmt.per_word), np.uint64)
    run_kernel(fx.quantize_pack, x, exps, homomorphic.BLOCK, fmt.k, fmt.q_max, words)
    run_kernel(fx.unpack_dequantize, words, exps, homomorphic.BLOCK, fmt.k, fmt.q_max,
         np.empty_like(x))
    if dtype == DTYPES[0]:
        run_kernel(fx.swar_add, words.copy(), words, np.uint64(1 << 63), np.uint64((1 << 63) - 1))


def _feedback(dtype: np.dtype) -> None:
    from .codecs import get_codec
    from .training.feedback import ErrorFeedback

    for spec in ({"id": "bitplane", "rate": 4.25}, {"id": "cast"}):  # (fused; two passes)
        fb = ErrorFeedback("loco")
        for _ in range(2):  # (the second with a residual)
            x = fb.compensate("k", np.linspace(-1.0, 1.0, 1 << 12).astype(dtype))
            fb.ahead("k", x, get_codec(spec))
            fb.settle("k")
            fb.end_step()


#: (name, what it runs for one dtype)
STEPS: list[tuple[str, Callable[[np.dtype], None]]] = [
    ("bitplane (vector path)", _codec_round_trip({"id": "bitplane", "rate": 16.25})),
    ("bitplane guarded encode", _codec_round_trip({"id": "bitplane", "rate": 16.25}, True)),
    ("bitplane (general path)", _codec_round_trip({"id": "bitplane", "rate": 16.5,
                                                   "block_size": 16})),
    ("zfp 1D", _codec_round_trip({"id": "zfp", "rate": 16, "dims": 1})),
    ("zfp 1D rate 4 (table)", _codec_round_trip({"id": "zfp", "rate": 4, "dims": 1})),
    ("zfp 2D", _codec_round_trip({"id": "zfp", "rate": 16, "dims": 2})),
    ("zfp 3D", _codec_round_trip({"id": "zfp", "rate": 16, "dims": 3})),
    ("cast float16", _codec_round_trip({"id": "cast", "dtype": "float16"})),
    ("cast bfloat16", _codec_round_trip({"id": "cast", "dtype": "bfloat16"})),
    ("errbound", _codec_round_trip({"id": "errbound", "tolerance": 1e-3})),
    ("scans (max |x|, add)", _scans),
    ("homomorphic kernels", _homomorphic),
    ("error feedback", _feedback),
]


def warm(dtypes: Sequence[np.dtype] = DTYPES,
         report: Callable[[str], None] | None = None) -> float:
    """Run every step for every dtype; returns the total seconds."""
    total = 0.0
    for name, step in STEPS:
        for dtype in dtypes:
            t = time.perf_counter()
            step(np.dtype(dtype))
            dt = time.perf_counter() - t
            total += dt
            if report is not None:
                report(f"{name:<28}{np.dtype(dtype).name:<10}{dt:>9.2f} s")
    return total


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m mpicomp warmup",
        description="Compile every CPU kernel into Numba's on-disk cache (see docs/usage.md).")
    ap.add_argument("--dtypes", default="float32,float64",
                    help="comma-separated float dtypes (default float32,float64)")
    ap.add_argument("--quiet", action="store_true", help="print only the total")
    args = ap.parse_args(argv)
    dtypes = []
    for name in args.dtypes.split(","):
        dt = np.dtype(name.strip())
        if dt not in DTYPES:
            ap.error(f"--dtypes takes float32 and float64, got {name!r}")
        dtypes.append(dt)
    import numba

    print(f"# mpicomp warmup: Numba {numba.__version__}, cache in "
          f"{numba.config.CACHE_DIR or 'each kernel folder __pycache__ (or a user-wide one)'}",
          flush=True)
    total = warm(dtypes, None if args.quiet else lambda line: print(line, flush=True))
    print(f"total {total:.2f} s", flush=True)
