"""A small decoder-only transformer (GPT-style, byte level) that splits as Megatron-LM's does.

``GPT(config)`` is the whole model on one rank: token and position embeddings,
``layers`` pre-norm blocks (causal self-attention, then a GELU MLP, each with
a residual), a final LayerNorm and a head to the 256 byte values. Its
weights follow from ``torch.manual_seed`` alone, so every rank builds the
same model and then keeps its part:

* :func:`split_tensors` (tensor parallelism over a communicator of ``t``
  ranks): in every block the fused query-key-value projection and the MLP's
  first layer become :class:`mpicomp.torch.ColumnParallelLinear` (each rank
  ``heads / t`` heads, its queries, keys and values in one slice, and
  ``4 d / t`` hidden units), the attention output
  and the MLP's second layer :class:`mpicomp.torch.RowParallelLinear`: one
  allreduce per block and direction for each of the two, as Megatron-LM.
  Embeddings, norms and the head stay whole on every rank.
* :func:`stage_of` (pipeline parallelism over ``s`` stages): stage ``i``
  takes a contiguous share of the blocks; the first also the embeddings,
  the last the final norm and the head. Stages pass activations of shape
  (batch, context, d).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

__all__ = ["GPT", "GPTConfig", "count_parameters", "split_tensors", "stage_of"]


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    context: int = 64  #: tokens per sequence
    d: int = 128  #: model width
    heads: int = 4
    layers: int = 4
    vocab: int = 256  #: bytes


class Attention(torch.nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.heads = c.heads  # on this rank (divided by split_tensors)
        self.qkv = torch.nn.Linear(c.d, 3 * c.d)  # rows: queries, keys, values
        self.out = torch.nn.Linear(c.d, c.d)

    def forward(self, x: Any) -> Any:
        b, n, _ = x.shape
        q, k, v = (y.view(b, n, self.heads, -1).transpose(1, 2)
                   for y in self.qkv(x).chunk(3, dim=-1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, n, -1))


class MLP(torch.nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.up = torch.nn.Linear(c.d, 4 * c.d)
        self.down = torch.nn.Linear(4 * c.d, c.d)

    def forward(self, x: Any) -> Any:
        return self.down(torch.nn.functional.gelu(self.up(x)))


class Block(torch.nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(c.d)
        self.attn = Attention(c)
        self.norm2 = torch.nn.LayerNorm(c.d)
        self.mlp = MLP(c)

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Embedding(torch.nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.token = torch.nn.Embedding(c.vocab, c.d)
        self.position = torch.nn.Embedding(c.context, c.d)

    def forward(self, ids: Any) -> Any:
        return self.token(ids) + self.position(torch.arange(ids.shape[1], device=ids.device))


class Head(torch.nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(c.d)
        self.proj = torch.nn.Linear(c.d, c.vocab, bias=False)

    def forward(self, x: Any) -> Any:
        return self.proj(self.norm(x))


class GPT(torch.nn.Sequential):
    """Embedding, blocks, head: a ``Sequential`` so that stages are slices of it."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__(Embedding(c), *[Block(c) for _ in range(c.layers)], Head(c))
        self.config = c
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c.layers) if name.endswith(("out.weight",
                                                                       "down.weight")) else 0.02
                torch.nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)


def loss_fn(logits: Any, targets: Any) -> Any:
    """Mean cross-entropy of next-byte prediction."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


def split_tensors(model: GPT, tp: Any) -> GPT:
    """Megatron-LM's tensor parallelism over the communicator ``tp`` (in place)."""
    import mpicomp.torch as mt

    t = tp.Get_size()
    if t == 1:
        return model
    c = model.config
    if c.heads % t or (4 * c.d) % t:
        raise ValueError(f"tensor parallelism over {t} ranks needs heads ({c.heads}) and "
                         f"4 d ({4 * c.d}) divisible by {t}")
    for block in model:
        if isinstance(block, Block):
            a, m = block.attn, block.mlp
            # rows regrouped so that rank r's contiguous slice is [q_r; k_r; v_r]
            order = torch.arange(3 * c.d, device=a.qkv.weight.device).view(
                3, t, c.d // t).transpose(0, 1).reshape(-1)
            with torch.no_grad():
                a.qkv.weight.copy_(a.qkv.weight[order])
                a.qkv.bias.copy_(a.qkv.bias[order])
            a.qkv = mt.ColumnParallelLinear.from_linear(a.qkv, tp)
            a.out = mt.RowParallelLinear.from_linear(a.out, tp)
            a.heads = c.heads // t
            m.up = mt.ColumnParallelLinear.from_linear(m.up, tp)
            m.down = mt.RowParallelLinear.from_linear(m.down, tp)
    return model


def stage_of(model: GPT, stage: int, stages: int) -> torch.nn.Sequential:
    """Stage ``stage`` of ``stages``: the embedding with the first blocks, ..., the last
    blocks with the head (blocks shared out as evenly as they go)."""
    blocks = len(model) - 2
    if stages > blocks:
        raise ValueError(f"{stages} pipeline stages need at least as many blocks, "
                         f"got {blocks}")
    first = 1 + stage * blocks // stages
    last = 1 + (stage + 1) * blocks // stages
    parts = list(model)[first:last]
    if stage == 0:
        parts = [model[0], *parts]
    if stage == stages - 1:
        parts = [*parts, model[-1]]
    return torch.nn.Sequential(*parts)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
