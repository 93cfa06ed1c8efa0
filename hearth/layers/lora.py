"""Low-rank adapter terms added to a linear at run time: y = W x + sum_j s_j (alpha_j / r_j) B_j (A_j x).

The quantized W is never merged with B A (that would round it again, and fix the scale): the term is
computed per row with that row's scale s_j (its request's), so requests with different adapters or
scales share a step. LoraRows holds the step's scales for every adapted linear of a model; LoraLinear
wraps a linear (QuantLinear, or fused q|k|v, gate|up) with the terms that land on its output slices."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class LoraRows:
    """The step's scale of every adapter per row, set by the runner before the model runs."""

    def __init__(self, num_adapters: int):
        self.num_adapters = num_adapters
        self.scales: torch.Tensor | None = None
        """[T, n] or [1, n] (every row alike) f32; None: every scale is 0 this step (no term computed)."""
        self.active: frozenset[int] = frozenset()
        """Adapters with a nonzero scale on some row this step."""
        self.out_rows: list[int] | None = None
        """The rows that go past the last layer's attention (CausalLM.forward's out_rows)."""

    def set(self, per_seq: list[tuple[float, ...]], rows: list[int]) -> None:
        """per_seq: each sequence's scales (one per adapter), rows: its rows this step."""
        self.out_rows = None
        self.active = frozenset(j for j in range(self.num_adapters) if any(s[j] for s in per_seq))
        if not self.active:
            self.scales = None
        elif len(set(per_seq)) == 1:
            self.scales = torch.tensor([per_seq[0]], dtype=torch.float32)
        else:
            self.scales = torch.tensor(per_seq, dtype=torch.float32).repeat_interleave(torch.tensor(rows), dim=0)

    def take(self, rows: int) -> torch.Tensor | None:
        """The scales of a linear's `rows` input rows: every row's, or (past the last attention) out_rows'."""
        s = self.scales
        if s is None or s.shape[0] == 1 or s.shape[0] == rows:
            return s
        return s[self.out_rows]


@dataclass(frozen=True, slots=True)
class LoraTerm:
    adapter: int
    start: int
    """First output feature of the base linear it adds to (q, k or v within q|k|v)."""
    a: torch.Tensor
    """[rank, in] f32."""
    b: torch.Tensor
    """[out, rank] f32."""
    factor: float
    """alpha / rank (1 without alpha): scale 1's multiplier."""


class LoraLinear(nn.Module):
    """A linear with low-rank terms; the same interface (in_features, out_features, in_dtype, bias,
    weight_bytes), output in the input's dtype."""

    def __init__(self, base: nn.Module, rows: LoraRows, terms: list[LoraTerm]):
        super().__init__()
        self.base, self.rows, self.terms = base, rows, terms
        self.in_features, self.out_features = base.in_features, base.out_features
        self.in_dtype, self.bias = base.in_dtype, base.bias

    @property
    def weight_bytes(self) -> int:
        return self.base.weight_bytes + sum(t.a.nbytes + t.b.nbytes for t in self.terms)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., K] -> [..., N]
        y = self.base(x)
        x2 = x.reshape(-1, self.in_features)
        scales = self.rows.take(x2.shape[0])
        if scales is None:
            return y
        y2, xf = y.reshape(-1, self.out_features).float(), x2.float()
        for t in self.terms:
            if t.adapter in self.rows.active:
                h = (xf @ t.a.T) * (scales[:, t.adapter:t.adapter + 1] * t.factor)  # [T, rank]
                y2[:, t.start:t.start + t.b.shape[0]] += h @ t.b.T
        return y2.to(y.dtype).view(y.shape)
