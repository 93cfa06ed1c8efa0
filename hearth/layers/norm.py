"""RMSNorm with the weight read from the GGUF (f32).

Math is f32 whatever comes in; `out_dtype` is what the consumer wants (bf16 before a fast linear,
which would round its input to bf16 anyway), written directly so no separate cast op runs."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float, offset: float = 0.0):
        super().__init__()
        # offset: gemma stores (w - 1) in HF checkpoints but the GGUF converter already adds the 1 back
        self.weight = nn.Parameter(weight.float() + offset, requires_grad=False)
        self.eps = eps
        self.register_buffer("_eps", torch.tensor([eps], dtype=torch.float32), persistent=False)  # moves with .to()
        self.out_dtype = torch.float32

    def forward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x: [..., dim] -> [..., dim] in out_dtype (or into `out`, which may alias x)."""
        f32 = torch.float32  # no .float() / .to() call where it would return x itself: each is a dispatch
        if x.dtype != f32:
            x = x.float()
        # mean(x^2) as |x|^2 / dim: one reduction kernel instead of pow + sum + div
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        r = torch.addcmul(self._eps, n, n, value=1.0 / x.shape[-1]).rsqrt_()
        if out is not None:
            return torch.mul(x * r, self.weight, out=out)
        y = (x * r).mul_(self.weight)
        return y if self.out_dtype == f32 else y.to(self.out_dtype)


class NoNorm(nn.Module):
    """In place of a norm an architecture lacks (olmo2's before attention and the MLP): x as it is, in
    out_dtype, as RMSNorm hands it on."""

    weight, eps = None, 0.0  # a native kernel's null norm

    def __init__(self):
        super().__init__()
        self.out_dtype = torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.out_dtype)


class WholeQKNorm(nn.Module):
    """q's and k's norms each over its whole projection (olmo2: RMS over all of q's heads together), not
    per head: forward(qk [T, heads + kv_heads, head_dim], a row's heads contiguous) normalizes it in place."""

    def __init__(self, q: RMSNorm, k: RMSNorm, heads: int):
        super().__init__()
        self.q, self.k, self.heads = q, k, heads  # weights [heads * head_dim], [kv_heads * head_dim]
        self.eps = q.eps
        self.register_buffer("weight", torch.cat([q.weight, k.weight]), persistent=False)  # the native kernels': q | k

    def forward(self, qk: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        assert out is None or out is qk, "WholeQKNorm normalizes in place"
        for norm, part in ((self.q, qk[:, :self.heads]), (self.k, qk[:, self.heads:])):
            flat = part.view(part.shape[0], -1)  # [T, heads * head_dim], a view: written in place
            norm(flat, out=flat)
        return qk
