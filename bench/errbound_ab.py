"""``python -m mpicomp.bench errbound-ab``: errbound's block code at another commit against
this tree's, in one process.

A shared 2-core VM's speed drifts by 20-40% from one minute to the next,
so two runs of ``codecs`` a minute apart cannot tell a 10-30% change in a
kernel. This command takes ``kernels/`` of ``--base`` (a git revision of
the repository this tree belongs to), imports it beside this tree's as a
package of its own, compiles the same single-threaded drivers over both
versions' block functions (the encode, in one pass or as the codes pass and
the packing, and the unpacking: what ``kernels/errbound_cpu.py`` runs per
group, with ``errbound_vector``'s planes where a version has them, without
its threads) and times them in alternation, ``--repeat`` rounds, the best of each. It first checks
that both write the same stream bytes and decode the same values (the
kernels may change speed, not the format) and says so.

Columns: ``bits`` per value of the stream; each version's encode (its one
pass, or codes + packing) and decode in input GB/s; ``enc x``/``dec x``:
this tree's speed over the base's. The bound is ``--tolerance`` times the data's largest
magnitude.
"""
from __future__ import annotations

import argparse
import importlib
import io
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import data as bench_data

__all__ = ["add_arguments", "main", "run"]

#: the repository root (``kernels/`` and ``.git`` beside ``bench/``)
_ROOT = Path(__file__).resolve().parent.parent


def _base_kernels(rev: str, into: Path) -> Any:
    """``kernels/`` of ``rev`` extracted into ``into`` as the package ``base_kernels``; returns
    its per-group code (:func:`_group_code`)."""
    done = subprocess.run(["git", "-C", str(_ROOT), "archive", "--format=tar", rev, "kernels"],
                          capture_output=True)
    if done.returncode:
        raise ValueError(f"--base must be a revision of the git checkout at {_ROOT} that has "
                         f"kernels/, got {rev!r}: {done.stderr.decode(errors='replace').strip()}")
    tar = done.stdout
    package = into / "base_kernels"
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.startswith("kernels/"):
                target = package / member.name[len("kernels/"):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.extractfile(member).read())
    for name in [m for m in sys.modules if m == "base_kernels" or m.startswith("base_kernels.")]:
        del sys.modules[name]  # (a base imported before in this process)
    sys.path.insert(0, str(into))
    try:
        return _group_code("base_kernels")
    finally:
        sys.path.remove(str(into))


def _group_code(package: str) -> tuple[Any, ...]:
    """``(errbound_block, block_code, pack_group, unpack_group, code_group)`` as
    ``package``'s CPU drivers run them: the vector planes of ``errbound_vector`` where it has
    them (their group functions then take a scratch row of plane words too); ``code_group``
    (a group's code bytes and bytes in one pass) is None where a version encodes in two."""
    block = importlib.import_module(f"{package}.errbound_block")
    try:
        vector = importlib.import_module(f"{package}.errbound_vector")
    except ModuleNotFoundError:
        return block, block.block_code, block.pack_group, block.unpack_group, None
    return (block, block.block_code, vector.pack_group_vec32, vector.unpack_group_vec32,
            getattr(vector, "code_group_vec32", None))


def _drivers(version: tuple[Any, ...]) -> tuple[Any, Any]:
    """One thread's encode (``(x, inv_step, step, bound, code, sizes, out)`` -> the group
    offsets) and unpack pass over a version's group code (float32): its one-pass encode
    where it has one (on one thread its groups land at their offsets: nothing to move),
    else the codes pass, the offsets and the pack pass."""
    from numba import njit

    from mpicomp.codecs.errbound import _head_nbytes, _offsets

    block, block_code, pack_group, unpack_group, code_group = version
    BLOCK, GROUP, SCRATCH = block.BLOCK, block.GROUP, block.SCRATCH

    if code_group is not None:
        @njit
        def one_pass(x, xb, inv_step, step, bound, code, sizes, out, head):
            q = np.empty(SCRATCH, np.int64)
            row = np.empty(128, np.uint8)
            p = head
            stop = head + 4 * x.size
            for g in range(sizes.size // 2):
                end, _ = code_group(x, xb, g, inv_step, step, bound, True, code, out, p, stop,
                                    4, q, row)
                sizes[2 * g] = np.uint8((end - p) & 0xFF)
                sizes[2 * g + 1] = np.uint8((end - p) >> 8)
                p = end

        def encode(x, inv_step, step, bound, code, sizes, out):
            one_pass(x, x.view(np.uint8), inv_step, step, bound, code, sizes, out,
                     _head_nbytes(x.size))
            return _offsets(sizes, x.size)

        return encode, _unpack_pass(version)

    @njit
    def codes(x, inv_step, step, bound, out, sizes):
        q = np.empty(SCRATCH, np.int64)
        for g in range(sizes.size // 2):
            bits = 0
            for b in range(g * GROUP, min(g * GROUP + GROUP, out.size)):
                start = b * BLOCK
                code, nbits = block_code(x, start, min(start + BLOCK, x.size), inv_step, step,
                                         bound, True, q)
                out[b] = np.uint8(code)
                bits += nbits
            nbytes = (bits + 7) // 8
            sizes[2 * g] = np.uint8(nbytes & 0xFF)
            sizes[2 * g + 1] = np.uint8(nbytes >> 8)

    if _words(pack_group):  # (a version with vector planes: a plane-word row too)
        @njit
        def pack(x, xb, inv_step, code, offsets, out):
            q = np.empty(SCRATCH, np.int64)
            row = np.empty(128, np.uint8)
            for g in range(offsets.size - 1):
                pack_group(x, xb, g, inv_step, code, out, offsets[g], offsets[g + 1], 4, q, row)
    else:
        @njit
        def pack(x, xb, inv_step, code, offsets, out):
            q = np.empty(SCRATCH, np.int64)
            for g in range(offsets.size - 1):
                pack_group(x, xb, g, inv_step, code, out, offsets[g], offsets[g + 1], 4, q)

    def encode(x, inv_step, step, bound, code, sizes, out):
        codes(x, inv_step, step, bound, code, sizes)
        offsets = _offsets(sizes, x.size)
        pack(x, x.view(np.uint8), inv_step, code, offsets, out)
        return offsets

    return encode, _unpack_pass(version)


def _unpack_pass(version: tuple[Any, ...]) -> Any:
    """One thread's unpack pass over a version's group code (float32)."""
    from numba import njit

    block, unpack_group = version[0], version[3]
    SCRATCH = block.SCRATCH
    if _words(unpack_group):
        @njit
        def unpack(buf, code, offsets, step, inv_step, out, outb):
            q = np.empty(SCRATCH, np.int64)
            row = np.empty(128, np.uint8)
            for g in range(offsets.size - 1):
                unpack_group(buf, offsets[g], offsets[g + 1], g, code, step, inv_step, out,
                             outb, 4, q, row)

        return unpack

    @njit
    def unpack(buf, code, offsets, step, inv_step, out, outb):
        q = np.empty(SCRATCH, np.int64)
        for g in range(offsets.size - 1):
            unpack_group(buf, offsets[g], offsets[g + 1], g, code, step, inv_step, out, outb, 4,
                         q)

    return unpack


def _words(pack_group: Any) -> bool:
    """Whether a version's group functions take a scratch row of plane words."""
    import inspect

    return "words" in inspect.signature(getattr(pack_group, "py_func", pack_group)).parameters


def _round(passes: Any, x: np.ndarray, bound: float, out: np.ndarray) -> tuple[float, float,
                                                                               np.ndarray]:
    """One encode and decode of ``x``: (encode s, decode s, the stream's bytes then the
    decoded values' bytes)."""
    from mpicomp.codecs.errbound import _sections, step_of

    encode, unpack_pass = passes
    step = step_of(bound)  # (the codec's step: this tree's rule, for both sides)
    inv_step = 1.0 / step
    out[:] = 0
    code, sizes = _sections(out, x.size)
    t0 = time.perf_counter()
    offsets = encode(x, inv_step, step, bound, code, sizes, out)
    t1 = time.perf_counter()
    y = np.empty_like(x)
    unpack_pass(out, code, offsets, step, inv_step, y, y.view(np.uint8))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, np.concatenate([out[:offsets[-1]], y.view(np.uint8)])


def run(base: str = "HEAD", n: int = 1 << 21, data: str = "real,weights,field",
        tolerance: float = 1e-4, repeat: int = 15, out: Any = sys.stdout,
        argv: list[str] | None = None) -> list[dict]:
    """Print and return one row per data set (see the module docstring)."""
    from mpicomp.codecs import get_codec
    with tempfile.TemporaryDirectory() as tmp:
        versions = {"base": _drivers(_base_kernels(base, Path(tmp))),
                    "tree": _drivers(_group_code("mpicomp.kernels"))}
        print(f"# command: python -m mpicomp.bench {' '.join(argv or ['errbound-ab'])}", file=out)
        print(f"# base: kernels/ of {base}; tree: this working tree's; one thread, float32, "
              f"{n} values, bound {tolerance:g} x max|x|, best of {repeat} alternating rounds",
              file=out)
        print(f"{'data':8s} {'bits':>6s} {'same':>5s} {'enc base':>9s} {'enc tree':>9s} "
              f"{'enc x':>6s} {'dec base':>9s} {'dec tree':>9s} {'dec x':>6s}", file=out)
        rows = []
        for kind in bench_data.kinds_and_size(data, n):
            x = bench_data.generate(kind, n, "float32", 0)
            bound = tolerance * float(np.abs(x).max())
            buf = np.empty(get_codec("errbound", tolerance=bound).encoded_nbytes(x.size, x.dtype),
                           np.uint8)
            results = {name: _round(p, x, bound, buf) for name, p in versions.items()}
            same = bool(np.array_equal(results["base"][2], results["tree"][2]))
            bits = 8.0 * (results["tree"][2].size - x.nbytes) / x.size
            best = {name: [np.inf, np.inf] for name in versions}
            for _ in range(repeat):
                for name, p in versions.items():
                    enc, dec, _ = _round(p, x, bound, buf)
                    best[name] = [min(best[name][0], enc), min(best[name][1], dec)]
            gb = x.nbytes / 1e9
            row = {"data": kind, "bits": bits, "same": same,
                   "enc_base": gb / best["base"][0], "enc_tree": gb / best["tree"][0],
                   "dec_base": gb / best["base"][1], "dec_tree": gb / best["tree"][1]}
            rows.append(row)
            print(f"{kind:8s} {bits:6.2f} {'yes' if same else 'NO':>5s} {row['enc_base']:9.2f} "
                  f"{row['enc_tree']:9.2f} {row['enc_tree'] / row['enc_base']:6.2f} "
                  f"{row['dec_base']:9.2f} {row['dec_tree']:9.2f} "
                  f"{row['dec_tree'] / row['dec_base']:6.2f}", file=out, flush=True)
        return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``errbound-ab`` subcommand's options."""
    parser.add_argument("--base", default="HEAD", help="git revision to compare with (HEAD)")
    bench_data.add_data_arguments(parser, 1 << 21)
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="error bound relative to the data's largest magnitude (1e-4)")
    parser.add_argument("--repeat", type=int, default=15, help="alternating rounds (15)")


def main(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    rows = run(base=args.base, n=args.n, data=args.data, tolerance=args.tolerance,
               repeat=args.repeat, argv=argv)
    return 0 if all(r["same"] for r in rows) else 1
