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
        self.out_rows: list[int] | None = None
        """The rows that go past the last layer's attention (CausalLM.forward's out_rows)."""

    def set(self, per_seq: list[tuple[float, ...]], rows: list[int]) -> None:
        """per_seq: each sequence's scales (one per adapter), rows: its rows this step."""
        self.out_rows = None
        if not any(any(s) for s in per_seq):
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
    weight_bytes), output in the input's dtype. Its terms are stacked into one pair, so a step costs two
    small matmuls per linear whatever the number of terms (q, k and v; several adapters): the A's
    along the rank, each B in its own output rows and rank columns (zeros elsewhere)."""

    def __init__(self, base: nn.Module, rows: LoraRows, terms: list[LoraTerm]):
        super().__init__()
        self.base, self.rows = base, rows
        self.in_features, self.out_features = base.in_features, base.out_features
        self.in_dtype, self.bias = base.in_dtype, base.bias
        ranks = [t.a.shape[0] for t in terms]
        self.a_t = torch.cat([t.a for t in terms]).T.contiguous()  # [in, R], R = the ranks' sum
        self.b_t = torch.zeros(sum(ranks), self.out_features)  # [R, out]: contiguous, a GEMV's fast layout
        col = 0
        for t, r in zip(terms, ranks):
            self.b_t[col:col + r, t.start:t.start + t.b.shape[0]] = t.b.T
            col += r
        self.col_adapter = torch.tensor([t.adapter for t, r in zip(terms, ranks) for _ in range(r)])  # [R]
        self.col_factor = torch.tensor([t.factor for t, r in zip(terms, ranks) for _ in range(r)])  # [R] f32
        firsts = [sum(ranks[:i]) for i in range(len(terms))]
        self.spans = torch.tensor([[c, r, t.start, t.b.shape[0]] for t, r, c in zip(terms, ranks, firsts)])
        """[terms, 4] int64: each term's first rank column, rank, first output and outputs (b_t's nonzero block)."""

    @property
    def weight_bytes(self) -> int:
        return self.base.weight_bytes + self.a_t.nbytes + self.b_t.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., K] -> [..., N]
        y = self.base(x)
        x2 = x.reshape(-1, self.in_features)
        scales = self.rows.take(x2.shape[0])  # [T or 1, adapters]
        if scales is None:
            return y
        if self.a_t.device != x.device:  # a backend on another device (cuda): the terms follow its activations, once
            self.a_t, self.b_t, self.col_adapter, self.col_factor = (
                t.to(x.device) for t in (self.a_t, self.b_t, self.col_adapter, self.col_factor))
        scales = scales.to(x.device)
        h = torch.mm(x2.float(), self.a_t).mul_(scales[:, self.col_adapter] * self.col_factor)  # [T, R]
        y2 = y.view(-1, self.out_features)
        if y2.dtype == torch.float32:
            y2.addmm_(h, self.b_t)
        else:  # a bf16 output: the f32 term rounded once, as it is added
            y2.add_(torch.mm(h, self.b_t))
        return y
