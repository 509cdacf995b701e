"""The torch training layers on CUDA tensors: tensor-parallel layers, a pipeline and the
sharded optimizer with their modules on the GPU (skipped without torch or a CUDA device;
``make test-gpu`` runs them on 2 and 4 ranks sharing one GPU). Under Numba's CUDA
simulator (the simulator stages of ``make test``) the sharded optimizer's device path runs
over CPU tensors offered to mpicomp as device memory."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import mpicomp  # noqa: E402
import mpicomp.torch as mt  # noqa: E402
from mpicomp.backend.mpi_buffers import HostMemoryAsDevice  # noqa: E402
from mpicomp.kernels.jit import SIMULATOR  # noqa: E402
from mpicomp.torch import sharded  # noqa: E402
from mpicomp.torch.tensors import TensorMemory  # noqa: E402

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.device]


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")


def _mlp(seed: int, dev):
    torch.manual_seed(seed)
    return (torch.nn.Linear(32, 64).to(dev), torch.nn.Linear(64, 32).to(dev))


@pytest.mark.parametrize("settings", [{"codec": "none"},
                                      {"codec": "bitplane", "rate": 16.25, "threshold": 0,
                                       "algorithm": "ring"}],
                         ids=["none", "bitplane16"])
def test_tensor_parallel_mlp_on_cuda(comm, settings):
    """Column- then row-parallel on CUDA float32: codec none gives the unsplit output and
    gradients (to float32 rounding); bitplane 16.25 sends compressed and stays within
    1e-3 of the output's largest magnitude (16 bits per value, summed over <= 4 ranks)."""
    dev = _cuda()
    p, r = comm.Get_size(), comm.Get_rank()
    if 64 % p:
        pytest.skip("64 features split over 2 or 4 ranks")
    tp = mpicomp.Comm(comm, **settings)
    fc1, fc2 = _mlp(0, dev)
    x = torch.randn(8, 5, 32, generator=torch.Generator().manual_seed(1)).to(dev)
    xf = x.clone().requires_grad_(True)
    yf = fc2(torch.nn.functional.gelu(fc1(xf)))
    yf.square().sum().backward()
    col = mt.ColumnParallelLinear.from_linear(fc1, tp)
    row = mt.RowParallelLinear.from_linear(fc2, tp)
    assert col.weight.device.type == "cuda" and row.weight.device.type == "cuda"
    xs = x.clone().requires_grad_(True)
    y = row(torch.nn.functional.gelu(col(xs)))
    assert y.device.type == "cuda"
    y.square().sum().backward()
    if settings["codec"] == "none":
        torch.testing.assert_close(y, yf.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xs.grad, xf.grad, rtol=1e-4, atol=1e-4)
        rows = slice(r * 64 // p, (r + 1) * 64 // p)
        torch.testing.assert_close(col.weight.grad, fc1.weight.grad[rows], rtol=1e-4,
                                   atol=1e-4)
    else:
        scale = yf.detach().abs().max().item()
        assert (y.detach() - yf.detach()).abs().max().item() <= 1e-3 * scale
        stats = tp.stats()
        assert sum(v.get("compressed", 0) for v in stats.values()
                   if isinstance(v, dict)) > 0, stats


def test_pipeline_on_cuda(comm):
    """As many stages as ranks, 4 micro-batches, 1F1B, codec none, modules on the GPU:
    the loss and each stage's gradients are the unsplit model's (float32 rounding)."""
    dev = _cuda()
    n, s = comm.Get_size(), comm.Get_rank()
    pp = mpicomp.Comm(comm, codec="none")

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[m for _ in range(4)
                                     for m in (torch.nn.Linear(16, 16), torch.nn.Tanh())]).to(dev)

    def stage_of(m):
        first, last = s * 4 // n, (s + 1) * 4 // n
        return torch.nn.Sequential(*list(m)[2 * first:2 * last])

    g = torch.Generator().manual_seed(3)
    x, t = torch.randn(24, 16, generator=g).to(dev), torch.randn(24, 16, generator=g).to(dev)
    whole = model()
    want = torch.nn.functional.mse_loss(whole(x), t)
    want.backward()
    stage = mt.PipelineStage(stage_of(model()), pp)
    assert stage.device.type == "cuda"
    loss = stage.step(x if s == 0 else None, t if s == n - 1 else None,
                      torch.nn.functional.mse_loss, micro_batches=4, schedule="1f1b")
    assert loss == pytest.approx(want.item(), rel=1e-5)
    for a, b in zip(stage.module.parameters(), stage_of(whole).parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("side_stream", [False, True], ids=["default-stream", "side-stream"])
def test_sharded_optimizer_on_cuda(comm, side_stream):
    """ShardedOptimizer over a CUDA model, gradients bitplane 8.25 with LoCo error
    feedback: the replicas hold the same bits after every step, the parameters stay on
    the GPU as views of the flat vector, which lives there with the gradient shard and
    the optimizer state (no host copy), and the loss falls; also with the whole run on a
    stream of its own (mpicomp's kernels follow PyTorch's current stream)."""
    dev = _cuda()
    if side_stream:
        with torch.cuda.stream(torch.cuda.Stream(dev)):
            _sharded_on_cuda(comm, dev)
    else:
        _sharded_on_cuda(comm, dev)


def _sharded_on_cuda(comm, dev):
    r = comm.Get_rank()
    dp = mpicomp.Comm(comm)
    torch.manual_seed(r)  # different on every rank: the optimizer copies rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 3)).to(dev)
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.SGD, comm=dp, lr=0.05,
                              momentum=0.9, codec="bitplane", rate=8.25, threshold=0,
                              error_feedback="loco")
    assert opt.flat.device.type == "cuda" and opt.grads.shard.device.type == "cuda"
    flat = opt.flat.untyped_storage().data_ptr()
    assert all(w.untyped_storage().data_ptr() == flat for w in model.parameters())
    g = torch.Generator().manual_seed(r)
    x, t = torch.randn(16, 5, generator=g).to(dev), torch.randn(16, 3, generator=g).to(dev)
    first = None
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), t)
        first = loss.item() if first is None else first
        loss.backward()
        # (the GPU kept busy on PyTorch's current stream: mpicomp's work on another stream
        # would run ahead of the gradients and parameters it reads)
        torch.cuda._sleep(2_000_000)
        opt.step()
        assert all(w.device.type == "cuda" for w in model.parameters())
        blob = b"".join(w.detach().cpu().numpy().tobytes() for w in model.parameters())
        assert len(set(comm.allgather(blob))) == 1
    state = [v for s in opt.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    assert state and all(v.device.type == "cuda" for v in state)
    assert dp.stats()["Ireduce_scatter_block"]["compressed"] > 0
    assert torch.nn.functional.mse_loss(model(x), t).item() < first


class _SimulatedDeviceTensors(TensorMemory):
    """CPU tensors offered to mpicomp as device memory (host memory behind the CUDA array
    interface, which the simulator's device arrays view): the optimizer's device path,
    its buffers' codecs and error feedback run by the simulator's kernels."""

    def __init__(self, device):
        super().__init__(device)
        from mpicomp.backend.device import DEVICE

        self.on_device, self.ops = True, DEVICE

    def wire(self, t):
        return HostMemoryAsDevice(super().wire(t))


def _sharded(comm, gathers, dtype):
    """ShardedOptimizer over a small MLP (every rank from rank 0's weights): gradients
    bitplane 8.25 (direct reduce-scatter) with LoCo feedback; ``gathers`` "deltas": the
    parameter changes gathered at bitplane 8.25 during the next forward, "plain": the
    parameters gathered as they are; returns (model, optimizer, communicator)."""
    dp = mpicomp.Comm(comm)
    torch.manual_seed(comm.Get_rank())  # different on every rank: the optimizer copies rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 3)).to(dtype)
    params = ({"param_settings": {"codec": "bitplane", "rate": 8.25, "threshold": 0},
               "gather_deltas": True} if gathers == "deltas" else {})
    opt = mt.ShardedOptimizer(model.named_parameters(), torch.optim.Adam, comm=dp, lr=0.01,
                              codec="bitplane", rate=8.25, threshold=0,
                              error_feedback="loco", bucket_mib=1e-4, **params)
    if gathers == "deltas":
        opt.gather_during_forward(model)
    return model, opt, dp


def _steps(comm, model, opt, first, last):
    """Adam steps ``first`` to ``last - 1`` (each its own batch); the parameters' bytes after
    each."""
    r, seen = comm.Get_rank(), []
    dtype = next(model.parameters()).dtype
    for step in range(first, last):
        g = torch.Generator().manual_seed(100 * step + r)
        x, t = torch.randn(16, 5, generator=g).to(dtype), torch.randn(16, 3, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x).float(), t).backward()
        opt.step()
        opt.finish_param_gather()
        seen.append(b"".join(w.detach().view(torch.int16).numpy().tobytes()
                             if w.dtype == torch.bfloat16 else w.detach().numpy().tobytes()
                             for w in model.parameters()))
    return seen


@pytest.mark.parametrize(("gathers", "dtype"), [("deltas", torch.float32),
                                                ("plain", torch.bfloat16)],
                         ids=["compressed-deltas-f32", "plain-bf16"])
def test_sharded_optimizer_device_path_in_simulator(comm, monkeypatch, gathers, dtype):
    """Under the simulator, the sharded optimizer's buffers as device memory: every
    reduce-scatter and parameter gather went through the device path (the reduce-scatters
    and the delta gathers compressed), the replicas hold the same bits after every step,
    and the parameters are bitwise those of the same run on the host path (the device
    kernels code the same bytes, the feedback's arithmetic gives the same values), also
    when the run is saved after 2 steps and resumed in a new optimizer (the residuals
    loaded from host memory)."""
    if not SIMULATOR:
        pytest.skip("the simulator's device path (on a GPU: test_sharded_optimizer_on_cuda)")
    model, opt, _ = _sharded(comm, gathers, dtype)
    host = _steps(comm, model, opt, 0, 4)
    monkeypatch.setattr(sharded, "TensorMemory", _SimulatedDeviceTensors)
    model, opt, dp = _sharded(comm, gathers, dtype)
    device = _steps(comm, model, opt, 0, 4)
    assert opt.tensors.on_device
    stats = dp.stats()
    for call in ("Ireduce_scatter_block", "Iallgather"):
        assert stats[call]["calls"] > 0
        assert all(m.startswith("device") for m in stats[call]["memory"]), stats[call]
    assert stats["Ireduce_scatter_block"]["compressed"] == \
        stats["Ireduce_scatter_block"]["calls"], stats["Ireduce_scatter_block"]["fallbacks"]
    assert stats["Iallgather"]["compressed"] == \
        (stats["Iallgather"]["calls"] if gathers == "deltas" else 0)
    for step in device:
        assert len(set(comm.allgather(step))) == 1  # identical replicas
    assert device == host
    model, opt, _ = _sharded(comm, gathers, dtype)
    resumed = _steps(comm, model, opt, 0, 2)
    saved = opt.state_dict()
    model, opt, _ = _sharded(comm, gathers, dtype)
    opt.load_state_dict(saved)
    resumed += _steps(comm, model, opt, 2, 4)
    assert resumed == host
