"""The CUDA kernels compile to PTX for a real GPU (sm_90), even on a machine without one.

The simulator (``test_cuda_sim.py``) runs the kernels' Python; this test
runs Numba's real CUDA compiler on them (NVVM, no driver needed), so code
that only the GPU compiler rejects fails CI too. Numba asks the current
device's compute capability when it compiles a called ``@njit`` function
that is not inlined; with no device, the test answers sm_90 for it.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import cuda_cases_bitplane  # noqa: E402
import cuda_cases_errbound  # noqa: E402
import cuda_cases_zfp  # noqa: E402

pytestmark = pytest.mark.slow  # left out of make test-quick

numba_cuda = pytest.importorskip("numba.cuda")

CC = (9, 0)

KERNELS = [
    ("cast_cuda", "encode_f16", "void(uint32[:], int64, int64, uint16[:], int32[:])"),
    ("cast_cuda", "encode_f16", "void(uint64[:], int64, int64, uint16[:], int32[:])"),
    ("cast_cuda", "decode_f16", "void(uint16[:], float32[:])"),
    ("cast_cuda", "decode_f16", "void(uint16[:], float64[:])"),
    ("cast_cuda", "encode_bf16", "void(uint32[:], uint16[:], int32[:])"),
    ("cast_cuda", "encode_bf16", "void(uint64[:], uint16[:], int32[:])"),
    ("cast_cuda", "decode_bf16", "void(uint16[:], float32[:])"),
    ("cast_cuda", "decode_bf16", "void(uint16[:], float64[:])"),
    ("scan_cuda", "max_abs_bits", "void(uint32[:], uint32, uint32[:])"),
    ("scan_cuda", "max_abs_bits", "void(uint64[:], uint64, uint64[:])"),
    ("scan_cuda", "add_into", "void(float32[:], float32[:])"),
    ("scan_cuda", "add_into", "void(float64[:], float64[:])"),
    ("scan_cuda", "order_keys", "void(int16[:])"),
    ("feedback_cuda", "divide", "void(float32[:], float32)"),
    ("feedback_cuda", "nonfinite", "void(float32[:], int32[:])"),
    ("feedback_cuda", "nonfinite_difference", "void(float32[:], float32[:], int32[:])"),
    ("feedback_cuda", "residual", "void(float32[:], float32[:], float32[:], float32, float32, float32, float32[:])"),
    ("feedback_cuda", "divide", "void(float64[:], float64)"),
    ("feedback_cuda", "nonfinite", "void(float64[:], int32[:])"),
    ("feedback_cuda", "nonfinite_difference", "void(float64[:], float64[:], int32[:])"),
    ("feedback_cuda", "residual", "void(float64[:], float64[:], float64[:], float64, float64, float64, float64[:])"),
    ("fixedpoint_cuda", "block_exponents", "void(float32[:], int64, int16[:])"),
    ("fixedpoint_cuda", "block_exponents", "void(float64[:], int64, int16[:])"),
    ("fixedpoint_cuda", "quantize_pack",
     "void(float32[:], int16[:], int64, int64, int64, uint64[:])"),
    ("fixedpoint_cuda", "quantize_pack",
     "void(float64[:], int16[:], int64, int64, int64, uint64[:])"),
    ("fixedpoint_cuda", "unpack_dequantize",
     "void(uint64[:], int16[:], int64, int64, int64, float32[:])"),
    ("fixedpoint_cuda", "unpack_dequantize",
     "void(uint64[:], int16[:], int64, int64, int64, float64[:])"),
] + cuda_cases_bitplane.KERNELS + cuda_cases_zfp.KERNELS + cuda_cases_errbound.KERNELS


@pytest.fixture(autouse=True)
def no_device_needed(monkeypatch):
    import numba.cuda.dispatcher as dispatcher

    fake = types.SimpleNamespace(compute_capability=CC)
    monkeypatch.setattr(dispatcher, "get_current_device", lambda: fake)


#: PTX already compiled in this session, by (module, kernel, signature): the errbound kernels'
#: FMA test reads the PTX the compile test made (each compile takes seconds to a minute)
_PTX: dict[tuple[str, str, str], str] = {}


def _ptx(module: str, name: str, signature: str) -> str:
    """The PTX of kernel ``name`` of ``mpicomp.kernels.<module>`` for ``signature`` (once)."""
    import importlib

    from numba import cuda

    key = (module, name, signature)
    if key not in _PTX:
        kernel = getattr(importlib.import_module(f"mpicomp.kernels.{module}"), name)
        _PTX[key], _ = cuda.compile_ptx(kernel.py_func, signature, cc=CC)
    return _PTX[key]


@pytest.mark.parametrize(("module", "name", "signature"), KERNELS,
                         ids=[f"{m}.{n}:{s}" for m, n, s in KERNELS])
def test_kernel_compiles_to_ptx(module, name, signature):
    assert ".visible .entry" in _ptx(module, name, signature)


@pytest.mark.parametrize(("module", "name", "signature"), cuda_cases_errbound.KERNELS,
                         ids=[f"{m}.{n}:{s}" for m, n, s in cuda_cases_errbound.KERNELS])
def test_errbound_quantizes_without_fused_multiply_adds(module, name, signature):
    """``floor(x * inv_step + 1/2)`` and the check's ``q * step`` round twice on the GPU as
    on the CPU (kernels/rounding.py): NVVM contracts a multiply and an add into one FMA by
    default, which can move a value across a rounding boundary, so a stream one device
    encodes would decode with another history on the other."""
    assert "fma.rn.f64" not in _ptx(module, name, signature)


#: (module, kernel, signature, instructions its PTX must hold): the warp-cooperative kernels
#: (kernels/warp.py) compile to the warp intrinsics and shared-memory staging they are built on
WARP_COOPERATIVE = [
    ("bitplane_cuda", "encode", "void(uint32[:], int64, int64, uint8[:], int32[:])",
     ("vote.sync.ballot.b32", "shfl.sync.bfly.b32", "bar.warp.sync", "st.shared.u32")),
    ("bitplane_cuda", "encode", "void(uint64[:], int64, int64, uint8[:], int32[:])",
     ("vote.sync.ballot.b32", "shfl.sync.bfly.b32", "bar.warp.sync", "ld.global.u64")),
    ("bitplane_cuda", "decode", "void(uint8[:], int64, int64, float32[:])",
     ("bar.warp.sync", "ld.shared.u8", "st.global.f32")),
    ("bitplane_cuda", "decode", "void(uint8[:], int64, int64, float64[:])",
     ("bar.warp.sync", "ld.shared.u8", "st.global.f64")),
    ("zfp_cuda", "encode_1d", "void(uint32[:], uint64[:], int64, int32[:])",
     ("bar.warp.sync", "st.shared.u64", "ld.shared.u64")),
    ("zfp_cuda", "decode_1d", "void(uint64[:], float64[:], int64)",
     ("bar.warp.sync", "st.shared.f64", "ld.shared.f64")),
    # errbound: ballots, maxima, broadcasts; the look-back's atomics
    ("errbound_cuda", "encode", cuda_cases_errbound.KERNELS[0][2],
     ("vote.sync.ballot.b32", "shfl.sync.bfly.b32", "shfl.sync.idx.b32", "atom.global.add.u64")),
    # and prefix sums (delta blocks)
    ("errbound_cuda", "decode", cuda_cases_errbound.KERNELS[4][2],
     ("shfl.sync.up.b32", "shfl.sync.idx.b32", "atom.global.add.u64", "st.global.f64")),
]


@pytest.mark.parametrize(("module", "name", "signature", "wanted"), WARP_COOPERATIVE,
                         ids=[f"{m}.{n}:{s}" for m, n, s, _ in WARP_COOPERATIVE])
def test_warp_cooperative_kernels_use_warp_intrinsics(module, name, signature, wanted):
    """Ballots, butterfly shuffles and warp barriers on a GPU (the simulator's stand-ins are
    shared memory and syncthreads), and no thread-local arrays: a per-thread scratch block
    lives in local memory, which is global memory's bandwidth again."""
    ptx = _ptx(module, name, signature)
    missing = [op for op in wanted if op not in ptx]
    assert not missing, f"{module}.{name}: no {missing} in its PTX"
    assert ".local" not in ptx, f"{module}.{name} keeps a thread-local array"


@pytest.mark.parametrize(("module", "name", "signature"),
                         [k for k in KERNELS if k[0] == "cast_cuda"],
                         ids=[f"{m}.{n}:{s}" for m, n, s in KERNELS if m == "cast_cuda"])
def test_cast_kernels_load_every_value_before_converting(module, name, signature):
    """A cast thread's ITEMS values are loaded by as many loads, all in flight before the
    first store, and kept in registers (no local memory)."""
    import re

    from mpicomp.kernels.cast_cuda import ITEMS

    ptx = _ptx(module, name, signature)
    ops = re.findall(r"^\s+(?:@%p\d+\s+)?((?:ld|st)\.global)", ptx, re.M)
    assert ops.count("ld.global") == ITEMS, ops
    assert ops.index("st.global") > max(i for i, op in enumerate(ops) if op == "ld.global")
    assert ".local" not in ptx
