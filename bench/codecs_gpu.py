"""``python -m mpicomp.bench codecs --buffer cupy``: GPU codec throughput on a device buffer.

In one run, on one CuPy buffer of synthetic data:

* a device-to-device copy of the buffer (``cupy.copyto`` into a
  preallocated array): the memory-bound ceiling, measured in the same run;
* for each case: encode and decode throughput in GB/s of *input values*
  (1e9 bytes of floats per second; best of ``repeat`` timed calls after a
  warm-up that also compiles the kernels), timed with CUDA events on the
  current stream around the codec call (which includes the one 4-byte flag
  read with which an encoder refuses NaN/Inf), the fraction of the copy,
  and whether the stream is byte-identical to the CPU codec's (``--check``,
  on by default: the CPU encodes the same values once, untimed).

Targets (issue: GPU path), on an H100, scaled by the measured copy bandwidth
elsewhere: bitplane at 8 bits/value (``bitplane:8.25``) encode and decode
>= 1.5 TB/s; zfp 1-D at rate 8 encode and decode >= 400 GB/s. The H100's
copy, counted as input bytes, is taken as 1.5 TB/s (about 3.0 TB/s of
read + write traffic).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from mpicomp.codecs import Codec, UncompressibleError

from . import data as bench_data
from .report import command_line, machine_lines, progress

__all__ = ["GPU_TARGETS", "run"]

#: (case, target GB/s of input on an H100)
GPU_TARGETS = {"bitplane:8.25": 1500.0, "zfp:8": 400.0}
#: the H100's device copy in input bytes/s that the targets assume (3.0 TB/s read + write)
H100_COPY_GBPS = 1500.0


def _cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise SystemExit("--buffer cupy needs CuPy (pip install 'mpicomp[gpu]')") from exc
    if not cupy.cuda.is_available():
        raise SystemExit("--buffer cupy needs a CUDA device; none is visible")
    return cupy


def best_gpu_time(cp: Any, fn: Callable[[], Any], repeat: int) -> float:
    """Best seconds of ``fn`` over ``repeat`` calls, by CUDA events on the current stream."""
    fn()  # warm-up (compilation, pool growth)
    cp.cuda.get_current_stream().synchronize()
    best = float("inf")
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def measure(cp: Any, label: str, codec: Codec, x_host: np.ndarray, x: Any, repeat: int,
            copy_gbps: float, check: bool) -> dict[str, Any]:
    nbytes = x.nbytes
    # room for the longest stream: a variable-size codec (errbound) writes the head of it
    room = cp.empty(codec.stream_nbytes(x.size, np.dtype(x.dtype)), cp.uint8)
    try:
        stream = codec.encode(x, out=room)
    except UncompressibleError as exc:
        return {"case": label, "note": f"not encodable: {exc.reason}"}
    out = cp.empty_like(x)
    enc = best_gpu_time(cp, lambda: codec.encode(x, out=room), repeat)
    dec = best_gpu_time(cp, lambda: codec.decode(stream, out=out), repeat)
    row: dict[str, Any] = {
        "case": label,
        "bits_per_value": 8.0 * stream.size / x.size,
        "enc_gbps": nbytes / enc / 1e9,
        "dec_gbps": nbytes / dec / 1e9,
    }
    row["max_err"] = float(cp.abs(out.astype(cp.float64) - x.astype(cp.float64)).max())
    row["enc_copy"] = row["enc_gbps"] / copy_gbps
    row["dec_copy"] = row["dec_gbps"] / copy_gbps
    if check:
        cpu = codec.encode(x_host)
        row["identical"] = bool(np.array_equal(cp.asnumpy(stream), cpu))
    target = GPU_TARGETS.get(label)
    if target is not None:
        scaled = target * copy_gbps / H100_COPY_GBPS
        row["target_gbps"] = scaled
        row["met"] = row["enc_gbps"] >= scaled and row["dec_gbps"] >= scaled
    return row


def run(size_mib: float, dtype: str, data: str, repeat: int, cases: list[tuple[str, Codec]],
        seed: int, check: bool, markdown: str | None, argv: list[str] | None,
        out: TextIO, err: TextIO | None) -> list[dict[str, Any]]:
    cp = _cupy()
    dt = np.dtype(dtype)
    n = int(size_mib * 2**20) // dt.itemsize
    progress(f"codecs (cupy): generating {n} {dt.name} values of '{data}' data", err)
    x_host = bench_data.generate(data, n, dt, seed=seed)
    x = cp.asarray(x_host)
    y = cp.empty_like(x)
    copy_s = best_gpu_time(cp, lambda: cp.copyto(y, x), repeat)
    copy_gbps = x.nbytes / copy_s / 1e9
    progress(f"codecs (cupy): device copy {copy_gbps:.1f} GB/s of input "
             f"({2 * copy_gbps:.1f} GB/s read + write)", err)
    rows = []
    for i, (label, codec) in enumerate(cases, 1):
        row = measure(cp, label, codec, x_host, x, repeat, copy_gbps, check)
        rows.append(row)
        progress(f"[{i}/{len(cases)}] {label}: " + (
            row.get("note") or f"enc {row['enc_gbps']:.1f} GB/s, dec {row['dec_gbps']:.1f} GB/s"
        ), err)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    header = machine_lines() + [
        f"GPU: {name}",
        f"buffer: {x.nbytes / 2**20:g} MiB = {n} {dt.name} values (CuPy), data '{data}'",
        f"device copy: {copy_gbps:.1f} GB/s of input ({2 * copy_gbps:.1f} GB/s read + write), "
        f"best of {repeat}",
        "GB/s = 1e9 input bytes/s, best of the repeats after a warm-up, CUDA events",
        f"command: {command_line(argv)}",
    ]
    lines = ["| case | bits/value | max abs error | encode GB/s | decode GB/s | enc/copy | "
             "dec/copy | CPU-identical | target GB/s | met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "note" in r:
            lines.append(f"| {r['case']} | {r['note']} ||||||||")
            continue
        identical = "-" if "identical" not in r else "yes" if r["identical"] else "NO"
        target = (f"{r['target_gbps']:.0f} | {'yes' if r['met'] else 'NO'}"
                  if "target_gbps" in r else "- | -")
        lines.append(
            f"| {r['case']} | {r['bits_per_value']:.3f} | {r['max_err']:.3g} | "
            f"{r['enc_gbps']:.1f} | "
            f"{r['dec_gbps']:.1f} | {r['enc_copy']:.2f} | {r['dec_copy']:.2f} | "
            f"{identical} | {target} |"
        )
    text = "\n".join(f"# {h}" for h in header) + "\n" + "\n".join(lines) + "\n"
    print(text, end="", file=out)
    if markdown:
        with open(markdown, "w", encoding="utf-8") as f:
            f.write("## GPU codec benchmark\n\n" + "\n".join(f"- {h}" for h in header)
                    + "\n\n" + "\n".join(lines) + "\n")
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--buffer", choices=("numpy", "cupy"), default="numpy",
                        help="numpy: the CPU codecs (default); cupy: the GPU codecs on a "
                             "CuPy buffer, next to a device copy")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="(cupy) skip the byte comparison with the CPU codec")
