"""A MoE block's routed experts op by op: the slow, obvious twin of a backend's fused experts
(hearth.backends.cpu_experts), and the path for what those lack (biases, gpt-oss's clamped SwiGLU, a fused
gate|up tensor). Each expert is a pair of ordinary linears (gate | up, and down) over its own 2-D views of
the stacked GGUF tensors (hearth.loader.gguf_loader.expert_views, no copy), run on the rows routed to it;
built for every expert at load (12,288 linears for Qwen3-30B-A3B's 48 x 128)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from hearth.layers.activation import GLUS
from hearth.loader.gguf_loader import GGUFTensor, expert_views


class Experts(nn.Module):
    """forward(h f32 [T, hidden], weights f32 [T, k], ids int64 [T, k]) -> f32 [T, hidden]:
    sum_j weights[t, j] * expert_{ids[t, j]}(h[t]), the experts summed in ascending order (as transformers)."""

    def __init__(self, linear: Callable, gate_up: list[GGUFTensor], down: GGUFTensor, activation: str,
                 biases: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)):
        """gate_up: the stacked gate and up tensors [n_expert, expert_ffn, hidden], or one fused [n_expert,
        2 * expert_ffn, hidden] (rows [gate | up]); biases: stacked (gate|up [n_expert, 2 * expert_ffn], down
        [n_expert, hidden]) or None each."""
        super().__init__()
        views = [expert_views(t) for t in gate_up]  # per tensor [n_expert, out, in]
        gate_up_bias, down_bias = biases
        self.gate_up = nn.ModuleList(linear(list(w), bias=None if gate_up_bias is None else gate_up_bias[e])
                                     for e, w in enumerate(zip(*views)))
        self.down = nn.ModuleList(linear(d, bias=None if down_bias is None else down_bias[e])
                                  for e, d in enumerate(expert_views(down)))
        self.inter, self.glu = down.shape[2], GLUS[activation]

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        """Expert e's gated unit: x f32 [rows, hidden] -> f32 [rows, hidden]. f32 in and out: the native GEMV
        reads f32 with no cast (a bf16 input would add four casts per expert, measured ~1.3x its time)."""
        gate, up = self.gate_up[e](x).split(self.inter, dim=-1)
        return self.down[e](self.glu(gate, up))

    def forward(self, h: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        if h.shape[0] == 1:  # decode: k experts, no gather or scatter (~10 torch ops fewer per layer)
            return self._one_row(h, weights[0].tolist(), ids[0].tolist())
        out = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        for e in ids.unique().tolist():  # ascending, as transformers sums them
            rows, slot = (ids == e).nonzero(as_tuple=True)  # the tokens routed to e, and where in their top-k
            out.index_add_(0, rows, self.expert(e, h[rows]).mul_(weights[rows, slot, None]))
        return out

    def _one_row(self, h: torch.Tensor, weights: list[float], ids: list[int]) -> torch.Tensor:
        """The same sum in the same order (ascending experts) as forward's scatter, for one row."""
        out = None
        for e, w in sorted(zip(ids, weights)):
            y = self.expert(e, h).mul_(w)
            out = y if out is None else out.add_(y)
        return out
