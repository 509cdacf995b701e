"""``python -m mpicomp.bench aligned-speed``: how fast errbound's integers code and decode as
whole-byte fixed-width blocks with vector bit transpositions, against errbound itself.

``pfor-bits`` prices the ``aligned`` coding (each block of 32 integers, or
their residuals of order 1 to 3, in the width ``w`` of the largest zigzag
code, a whole number of bytes, or the zero mask) at 3% to 10% more bits
than errbound's Rice codes on gradients and weights. This command measures
what it could gain in speed before the format pays for it: a minimal
single-threaded encoder and decoder of that coding (orders 0 and 1),
built from errbound's own quantization (its ``_quantize_checked``: the
same integers and raw blocks) and the plane transposition of ``bitplane``
(``w`` plane words of 32 bits a block, one vector comparison and one mask
move a plane to write, a byte accumulator per lane to read:
``bitplane_vector.codes_from_planes``), timed against errbound's encode and
decode on one thread, in alternation.

Each block's code byte is its coding: order 0 or 1 (the narrower) and
``w``, or the zero mask (a 32-bit mask of the non-zeros, then their codes
minus one gathered to the first lanes, each plane's bits of those lanes
only) where it is smaller; a raw block (a value off its bound or past 31
bits) is copied whole. The decoder must make the values errbound's decoder
makes of the same data, bit for bit (the command raises otherwise). It
leaves out what a format would add (orders 2 and 3, float64, threads,
hostile bytes): it bounds the speed of such a format from above on the
gradients and weights it would serve. Columns: errbound's bits per value
and the coding's, then each one's encode and decode in input GB/s (one
thread, best of ``--repeat``) and the coding's speed over errbound's.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from . import data as bench_data

__all__ = ["add_arguments", "main", "run"]


def _kernels() -> tuple[Any, Any]:
    """The study's encoder and decoder, compiled on first use."""
    from llvmlite import ir
    from numba import njit
    from numba.core import types
    from numba.extending import intrinsic

    from mpicomp.kernels.bitplane_vector import codes_from_planes
    from mpicomp.kernels.errbound_block import (HISTORY, RAW, SCRATCH, _dequantized, _flush,
                                                _load8, _put, _quantize_checked, _quantized)
    from mpicomp.kernels.intbits import clz64
    from mpicomp.kernels.vector_ir import (I32, I64, call_intrinsic, element_pointer, load, splat,
                                           store, vector)

    lanes = 32
    lane_words = vector(I32, lanes)

    def plane_guard(b, width, j, emit):
        with b.if_then(b.icmp_signed(">", width, ir.Constant(I64, j)), likely=j < 8):
            emit()

    @intrinsic
    def put_planes(typingctx, codes, width, stream, pos):
        """``width`` plane words of the 32 uint32 ``codes`` at ``stream[pos]``: plane ``j``
        holds bit ``width - 1 - j`` of each code (bit ``i``: code ``i``)."""
        sig = types.void(codes, width, stream, pos)

        def codegen(context, b, signature, args):
            codesv, wv, streamv, posv = args
            u = load(b, element_pointer(context, b, signature.args[0], codesv,
                                        ir.Constant(I64, 0)), lane_words)
            w32 = b.trunc(wv, I32)

            def plane(j):  # bit w-1-j to the sign: shift left by 32 - w + j
                shift = b.add(b.sub(ir.Constant(I32, 32), w32), ir.Constant(I32, j))
                top = b.shl(u, splat(b, shift, lane_words))
                word = b.bitcast(b.icmp_signed("<", top, splat(b, 0, lane_words)), I32)
                off = b.add(posv, ir.Constant(I64, 4 * j))
                store(b, word, element_pointer(context, b, signature.args[2], streamv, off))

            for j in range(32):
                plane_guard(b, wv, j, lambda j=j: plane(j))
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def get_planes(typingctx, stream, pos, width, codes):
        """The 32 codes of ``width`` plane words at ``stream[pos]`` into ``codes`` (uint32),
        as bitplane's decoder reads its planes (``codes_from_planes``)."""
        sig = types.void(stream, pos, width, codes)

        def codegen(context, b, signature, args):
            streamv, posv, wv, codesv = args
            code = codes_from_planes(context, b, signature.args[0], streamv, posv, wv, 32, 32,
                                     present=0)
            store(b, code, element_pointer(context, b, signature.args[3], codesv,
                                           ir.Constant(I64, 0)))
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def popcount(typingctx, v):
        """The set bits of the int64 ``v`` (``llvm.ctpop``: one instruction where the host
        has it, a vector of them in a loop that vectorizes)."""
        sig = types.int64(types.int64)

        def codegen(context, b, signature, args):
            return call_intrinsic(b, "llvm.ctpop.i64", I64, args[0])

        return sig, codegen

    raw = np.int64(RAW)
    mask_code = np.int64(128)

    @njit(inline="always")
    def width_of(top):
        """The bit length of the non-negative int64 ``top`` (0 for 0)."""
        return np.int64(64) - clz64(np.uint64(top))

    @njit(nogil=True)
    def encode(x, inv_step, step, bound, code, stream):
        """Code every block of ``x`` (float32, whole blocks); returns the payload bytes."""
        q = np.empty(SCRATCH, np.int64)
        z0 = np.empty(lanes, np.uint32)
        z1 = np.empty(lanes, np.uint32)
        planes = np.empty(4 * lanes, np.uint8)
        xb = x.view(np.uint8)
        pos = np.int64(0)
        for blk in range(x.size // lanes):
            start = blk * lanes
            status = _quantize_checked(x, start, np.int64(lanes), inv_step, step, bound, q)
            if status != 0:
                for j in range(4 * lanes):
                    stream[pos + j] = xb[4 * start + j]
                code[blk] = np.uint8(raw)
                pos += 4 * lanes
                continue
            m0 = np.int64(0)
            m1 = np.int64(0)
            nonzero = np.int64(0)
            for i in range(lanes):
                v = q[HISTORY + i]
                d = v - q[HISTORY + i - 1]
                a = (v << 1) ^ (v >> 63)
                c = (d << 1) ^ (d >> 63)  # (below 2**33: order 1 only where it fits 32 bits)
                z0[i] = np.uint32(a)
                z1[i] = np.uint32(c & 0xFFFFFFFF)
                m0 = max(m0, a)
                m1 = max(m1, c)
                nonzero += np.int64(v != 0)
            w0 = width_of(m0)
            w1 = width_of(m1) if m1 <= 0xFFFFFFFF else np.int64(64)
            wm = width_of(m0 - 1) if nonzero > 0 else np.int64(0)
            mask_bytes = 4 + (nonzero * wm + 7) // 8
            if nonzero > 0 and nonzero < lanes and mask_bytes < 4 * min(w0, w1):
                # the zero mask, then the non-zeros' codes minus one in wm planes of nonzero
                # bits each (the planes of the codes gathered to the first lanes)
                m = np.int64(0)
                for i in range(lanes):
                    m |= np.int64(z0[i] != 0) << i
                    z1[i] = np.uint32(0)
                k = 0
                for i in range(lanes):  # (no branch: a zero's slot is the next one's)
                    z1[k] = z0[i] - np.uint32(z0[i] != 0)
                    k += np.int64(z0[i] != 0)
                put_planes(z1, wm, planes, np.int64(0))
                for j in range(4):
                    stream[pos + j] = np.uint8((m >> (8 * j)) & 0xFF)
                p = pos + 4
                acc = np.uint64(0)
                fill = np.int64(0)
                for j in range(wm):  # each plane's nonzero low bits (errbound's bit writer)
                    word = (np.uint64(planes[4 * j]) | (np.uint64(planes[4 * j + 1]) << 8)
                            | (np.uint64(planes[4 * j + 2]) << 16)
                            | (np.uint64(planes[4 * j + 3]) << 24))
                    p, acc, fill = _put(stream, p, stream.size, acc, fill, word, nonzero)
                _flush(stream, p, acc, fill)
                code[blk] = np.uint8(mask_code + wm)
                pos += mask_bytes
                continue
            order = 1 if w1 < w0 else 0
            w = w1 if order else w0
            code[blk] = np.uint8(64 * order + w)
            put_planes(z1 if order else z0, w, stream, pos)
            pos += 4 * w
        return pos

    @njit(nogil=True)
    def decode(stream, code, step, inv_step, y):
        """The values of every block of ``y`` (float32) from ``code`` and ``stream``."""
        z = np.empty(lanes, np.uint32)
        v = np.empty(lanes, np.int64)
        planes = np.empty(4 * lanes, np.uint8)
        yb = y.view(np.uint8)
        pos = np.int64(0)
        last = np.int64(0)
        for blk in range(y.size // lanes):
            start = blk * lanes
            if start % (8 * lanes) == 0:
                last = np.int64(0)  # (errbound's history: within a group of 8 blocks)
            c = np.int64(code[blk])
            if c == raw:
                for j in range(4 * lanes):
                    yb[4 * start + j] = stream[pos + j]
                pos += 4 * lanes
                # the next block's history, as errbound's encoder takes it
                last = _quantized(np.float64(y[start + lanes - 1]), inv_step)
                continue
            if c >= mask_code:
                wm = c - mask_code
                m = np.int64(0)
                for j in range(4):
                    m |= np.int64(stream[pos + j]) << (8 * j)
                nonzero = popcount(m)
                keep = (np.uint64(1) << np.uint64(nonzero)) - np.uint64(1)
                body = pos + 4
                for j in range(wm):  # each plane's nonzero bits, widened to a word
                    off = j * nonzero
                    at = body + (off >> 3)
                    if at + 8 <= stream.size:
                        word = (_load8(stream, at) >> np.uint64(off & 7)) & keep
                    else:
                        word = np.uint64(0)
                        for t in range(min(8, stream.size - at)):
                            word |= np.uint64(stream[at + t]) << np.uint64(8 * t)
                        word = (word >> np.uint64(off & 7)) & keep
                    for t in range(4):
                        planes[4 * j + t] = np.uint8((word >> np.uint64(8 * t)) & np.uint64(0xFF))
                get_planes(planes, np.int64(0), wm, z)
                for i in range(lanes):  # lane i: the code of the non-zeros before it, or 0
                    u = np.int64(z[popcount(m & ((np.int64(1) << i) - 1))]) + 1
                    val = ((u >> 1) ^ -(u & 1)) * ((m >> i) & 1)
                    v[i] = val
                    y[start + i] = _dequantized(val, step)
                last = v[lanes - 1]
                pos += 4 + (nonzero * wm + 7) // 8
                continue
            w = c & 63
            get_planes(stream, pos, w, z)
            pos += 4 * w
            for i in range(lanes):
                u = np.int64(z[i])
                v[i] = (u >> 1) ^ -(u & 1)
            if c >= 64:
                for i in range(lanes):
                    last += v[i]
                    v[i] = last
            else:
                last = v[lanes - 1]
            for i in range(lanes):
                y[start + i] = _dequantized(v[i], step)

    return encode, decode


def run(n: int = 1 << 22, data: str = "real,weights", tolerances: str = "1e-2,1e-3,1e-5",
        repeat: int = 7, out: Any = sys.stdout, argv: list[str] | None = None) -> list[dict]:
    """Print and return one row per data set and tolerance (see the module docstring)."""
    import numba

    from mpicomp.codecs.errbound import ErrboundCodec

    kinds = bench_data.kinds_and_size(data, n)
    tols = bench_data.relative_tolerances(tolerances, "aligned-speed")
    if repeat < 1:
        raise ValueError(f"aligned-speed: --repeat must be at least 1, got {repeat}")
    size = n - n % 256
    encode, decode = _kernels()
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    print(f"# command: python -m mpicomp.bench {' '.join(argv or ['aligned-speed'])}", file=out)
    print(f"# {size} float32 values a data set, tolerance relative to max|x|, one thread, "
          f"best of {repeat}; GB/s of input", file=out)
    print(f"{'data':8s} {'tolerance':>9s} {'bits eb':>8s} {'bits al':>8s} {'enc eb':>7s} "
          f"{'enc al':>7s} {'enc x':>6s} {'dec eb':>7s} {'dec al':>7s} {'dec x':>6s}", file=out)
    rows = []
    try:
        for kind in kinds:
            x = bench_data.generate(kind, size, "float32", 0)
            for tol in tols:
                # (the bound as an absolute tolerance: the same stream, without the pass over
                # x that a relative one takes to find its largest magnitude)
                bound = ErrboundCodec(tolerance=tol, relative=True).bound(x)
                codec = ErrboundCodec(tolerance=bound)
                eb_stream = np.empty(codec.stream_nbytes(size, x.dtype), np.uint8)
                eb_used = codec.encode_into(x, eb_stream)
                eb_out = np.empty_like(x)
                codec.decode_into(eb_stream, eb_out)
                step = 2.0 * bound
                inv_step = 1.0 / step
                code = np.empty(size // 32, np.uint8)
                stream = np.empty(4 * size, np.uint8)
                used = encode(x, inv_step, step, bound, code, stream)
                y = np.empty_like(x)
                decode(stream, code, step, inv_step, y)
                if not np.array_equal(y.view(np.uint32), eb_out.view(np.uint32)):
                    raise AssertionError("aligned-speed: the aligned decoder makes other values "
                                         f"than errbound's ({kind}, tolerance {tol:g})")
                runs = {
                    "enc_eb": lambda: codec.encode_into(x, eb_stream),
                    "enc_al": lambda: encode(x, inv_step, step, bound, code, stream),
                    "dec_eb": lambda: codec.decode_into(eb_stream, eb_out),
                    "dec_al": lambda: decode(stream, code, step, inv_step, y),
                }
                best = dict.fromkeys(runs, np.inf)
                for _ in range(repeat):
                    for name, call in runs.items():  # (in alternation: drift hits all alike)
                        t0 = time.perf_counter()
                        call()
                        best[name] = min(best[name], time.perf_counter() - t0)
                row = {"data": kind, "tolerance": tol, "eb_bits": 8.0 * eb_used / size,
                       "aligned_bits": 8.0 * (used + code.size + 8) / size,
                       **{k: 4.0 * size / v / 1e9 for k, v in best.items()}}
                rows.append(row)
                print(f"{kind:8s} {tol:9.0e} {row['eb_bits']:8.3f} {row['aligned_bits']:8.3f} "
                      f"{row['enc_eb']:7.2f} {row['enc_al']:7.2f} "
                      f"{row['enc_al'] / row['enc_eb']:6.2f} {row['dec_eb']:7.2f} "
                      f"{row['dec_al']:7.2f} {row['dec_al'] / row['dec_eb']:6.2f}", file=out,
                      flush=True)
    finally:
        numba.set_num_threads(threads)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``aligned-speed`` subcommand's options."""
    bench_data.add_data_arguments(parser, 1 << 22)
    parser.set_defaults(data="real,weights")
    parser.add_argument("--tolerances", default="1e-2,1e-3,1e-5",
                        help="error bounds relative to the data's largest magnitude, "
                             "comma-separated (1e-2,1e-3,1e-5)")
    parser.add_argument("--repeat", type=int, default=7, help="timed rounds (7)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    run(n=args.n, data=args.data, tolerances=args.tolerances, repeat=args.repeat, argv=argv)
    return 0
