"""Mirostat (Basu et al. 2021), as llama.cpp's llama_sampler_mirostat (1) and llama_sampler_mirostat_v2 (2) run it:
a sequence keeps a target surprise mu (starting at 2 * tau, in bits); each step truncates the tempered
distribution by it, samples, and moves mu by eta times the sampled token's surprise (-log2 p in the truncated
distribution) minus tau, so the text's surprise tracks tau.
- 2: keep the tokens whose surprise is at most mu (the most likely always);
- 1: estimate the Zipf exponent s from the top m = 100 probabilities and keep the top k tokens, k from s and mu.
mu is state each sampled token moves (MirostatState, the runner's per request), so a row's distribution
depends on every token before it as sampled: speculative decoding drafts nothing for such a request (a verify
row's mu would need the drafts' distributions, not only their tokens). Like llama.cpp's --mirostat, it
replaces top-k, top-p, min-p, typical-p, top-nσ and XTC; unlike llama.cpp's chain (logit bias, temperature,
mirostat), hearth still applies the penalties and DRY a request asks for, which only move logits."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

ZIPF_TOKENS = 100  # llama.cpp's m: the top probabilities mirostat 1 estimates s from


@dataclass(slots=True)
class MirostatState:
    """One sequence's target surprise in bits (llama.cpp's ctx->mu)."""
    mu: float


def start(tau: float) -> MirostatState:
    return MirostatState(2.0 * tau)  # llama.cpp's reset


def mirostat_probs(logits: torch.Tensor, version: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """logits: [S, V] divided by temperature; version: [S] (1 or 2); mu: [S] -> [S, V] the truncated
    distribution, renormalized."""
    p = logits.softmax(-1)
    V = p.shape[-1]
    keep = -torch.log2(p) <= mu.unsqueeze(1)  # v2: surprise at most mu; p 0 is inf, never kept
    if bool((version == 1).any()):
        k = _zipf_k(p, mu, V)  # [S]
        ranked = p.topk(min(int(k.max()), V), dim=-1).indices  # [S, kmax]: the k largest, no ties kept past k
        top = torch.zeros_like(keep).scatter_(1, ranked, torch.arange(ranked.shape[1]).unsqueeze(0) < k.unsqueeze(1))
        keep = torch.where((version == 1).unsqueeze(1), top, keep)
    keep.scatter_(1, p.argmax(-1, keepdim=True), True)  # the most likely always stays (llama.cpp: size 1)
    return logits.masked_fill(~keep, float("-inf")).softmax(-1)


def _zipf_k(p: torch.Tensor, mu: torch.Tensor, V: int) -> torch.Tensor:
    """[S] mirostat 1's k: s from the top probabilities' log ratios against log((i + 2) / (i + 1))."""
    top = p.topk(min(ZIPF_TOKENS, V), dim=-1).values.clamp(min=torch.finfo(p.dtype).tiny)  # [S, m]
    i = torch.arange(top.shape[1] - 1, dtype=p.dtype)
    t = torch.log((i + 2) / (i + 1))  # [m - 1]
    b = torch.log(top[:, :-1] / top[:, 1:])  # [S, m - 1]
    s = (t * b).sum(-1) / (t * t).sum()  # [S]
    eps = s - 1
    k = ((eps * torch.pow(2.0, mu)) / (1 - torch.pow(float(V), -eps))).pow(1 / s)
    return torch.nan_to_num(k, nan=1.0, posinf=float(V)).clamp(1, V).long()  # llama.cpp: max(int(k), 1)


def update(state: MirostatState, p_token: float, tau: float, eta: float) -> None:
    """After a token sampled with probability p_token from mirostat_probs: mu -= eta * (surprise - tau)."""
    surprise = -math.log2(p_token) if p_token > 0 else float("inf")
    state.mu -= eta * (surprise - tau)
