"""How coalesced a CUDA kernel's global-memory accesses are, counted under Numba's CUDA simulator.

Every element read or written through a kernel's array arguments is
recorded with the source line doing it, the thread's warp and the byte
range. The lanes of one warp running a line for the ``k``-th time make one
request (lockstep, as a GPU runs code without divergence). A request
touches some 32-byte sectors; the fewest that could hold its bytes is
``ceil(bytes / 32)`` (allocations start 256-byte aligned on a GPU, and do
here: offsets are counted from the start of each array's allocation). A
kernel's *excess* is the sectors touched over that minimum, summed over its
requests: 1.0 is perfectly coalesced, a thread walking its own block of 32
float32 values shows 8x.

Shared and local memory are plain NumPy arrays in the simulator and are not
counted. Use in a process started with ``NUMBA_ENABLE_CUDASIM=1``::

    with SectorCount() as count:
        kernel[blocks, threads](...)
    count.ratio()          # sectors / minimum, all lines
    count.by_line()        # {(file, line): (sectors, minimum)}
"""
from __future__ import annotations

import collections
import os
import sys
import threading
from typing import Any

import numpy as np

SECTOR = 32


def _fake_array_class() -> Any:
    from numba.cuda.simulator.cudadrv import devicearray

    return devicearray.FakeWithinKernelCUDAArray


def _allocation_start(a: np.ndarray) -> int:
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root.__array_interface__["data"][0]


def _byte_range(a: np.ndarray, idx: Any) -> tuple[int, int] | None:
    """Offsets (from the allocation's start) of the bytes ``a[idx]`` covers; None if none."""
    try:
        view = a[idx]
    except Exception:  # noqa: BLE001 - the real access raises the error
        return None
    start = _allocation_start(a)
    if isinstance(view, np.ndarray):
        if view.size == 0:
            return None
        lo = view.__array_interface__["data"][0] - start
        return lo, lo + view.nbytes
    flat = np.ravel_multi_index(idx if isinstance(idx, tuple) else (idx,), a.shape) if a.ndim else 0
    lo = a.__array_interface__["data"][0] - start + int(flat) * a.itemsize
    return lo, lo + a.itemsize


class SectorCount:
    """Context manager counting the sectors of a simulated kernel's global accesses."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (file, line, kind) -> {(block, warp, k): set of byte ranges}
        self._requests: dict[tuple[str, int, str], dict[tuple, set]] = collections.defaultdict(
            lambda: collections.defaultdict(set))
        self._runs: collections.Counter = collections.Counter()
        self._saved: tuple[Any, Any] | None = None

    def _record(self, arr: Any, idx: Any, kind: str) -> None:
        th = threading.current_thread()
        tid = getattr(th, "thread_id", None)
        if tid is None:
            return  # host code, not a simulated thread
        rng = _byte_range(arr._item._ary, idx)
        if rng is None:
            return
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename == __file__:
            frame = frame.f_back
        site = (os.path.basename(frame.f_code.co_filename), frame.f_lineno, kind) if frame \
            else ("?", 0, kind)
        b = th.blockIdx
        block = (b.x, b.y, b.z)
        with self._lock:
            key = (block, tid, site)
            k = self._runs[key]
            self._runs[key] = k + 1
            self._requests[site][(block, tid // 32, k)].add(rng)

    def __enter__(self) -> SectorCount:
        cls = _fake_array_class()
        get, set_ = cls.__getitem__, cls.__setitem__
        self._saved = (get, set_)
        count = self

        def traced_get(arr, idx):
            count._record(arr, idx, "load")
            return get(arr, idx)

        def traced_set(arr, idx, val):
            count._record(arr, idx, "store")
            return set_(arr, idx, val)

        cls.__getitem__, cls.__setitem__ = traced_get, traced_set
        return self

    def __exit__(self, *exc: object) -> None:
        cls = _fake_array_class()
        assert self._saved is not None
        cls.__getitem__, cls.__setitem__ = self._saved

    def by_line(self) -> dict[tuple[str, int, str], tuple[int, int]]:
        """(sectors touched, fewest possible) of each source line's requests."""
        out = {}
        for site, requests in self._requests.items():
            sectors = fewest = 0
            for ranges in requests.values():
                touched = set()
                nbytes = 0
                for lo, hi in ranges:
                    touched.update(range(lo // SECTOR, (hi - 1) // SECTOR + 1))
                    nbytes += hi - lo
                sectors += len(touched)
                fewest += -(-nbytes // SECTOR)
            out[site] = (sectors, fewest)
        return out

    def ratio(self) -> float:
        """Sectors touched over the fewest possible, all lines together."""
        lines = self.by_line().values()
        return sum(s for s, _ in lines) / max(1, sum(f for _, f in lines))

    def report(self) -> str:
        rows = sorted(self.by_line().items(), key=lambda kv: -kv[1][0])
        out = [f"{s:8d} sectors {f:8d} fewest {s / max(f, 1):5.2f}x  {kind:5s} {fn}:{ln}"
               for (fn, ln, kind), (s, f) in rows]
        out.append(f"all: {self.ratio():.2f}x the coalesced minimum")
        return "\n".join(out)
