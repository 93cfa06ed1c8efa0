"""The Gated DeltaNet's recurrence (qwen35's linear-attention layers) in plain torch: a causal depthwise conv
continued from a per-sequence window, and the gated delta rule token by token from a per-sequence state.

Same math as transformers' causal_conv1d_update / torch_recurrent_gated_delta_rule (Qwen3_5GatedDeltaNet) and
llama.cpp's ggml_ssm_conv + gated delta net (src/models/delta-net-base.cpp), for a flat batch of sequences
that each continue from their slot's state. The slow, obvious twin of any faster form."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv(x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """One sequence's new conv inputs x: [n, C] f32 after the kernel - 1 before them, window: [C, K - 1] (updated
    in place to the last K - 1 inputs), weight: [C, K] (tap K - 1 is the row's own) -> silu(conv) [n, C]."""
    n, c = x.shape
    full = torch.cat([window, x.t()], dim=1)  # [C, K - 1 + n]
    window.copy_(full[:, full.shape[1] - window.shape[1]:])
    return F.silu(F.conv1d(full[None], weight[:, None], groups=c)[0].t())  # [n, C]


def l2_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / |x| over the last dim (transformers' l2norm: rsqrt(sum x^2 + eps))."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def delta_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of S sequences: q, k [S, H, dk] (q scaled, both normed), v [S, H, dv], decay (log, <= 0) and
    beta [S, H], state [S, H, dk, dv] -> (out [S, H, dv], the new state)."""
    state = state * decay.exp()[..., None, None]
    remembered = torch.einsum("shk,shkv->shv", k, state)  # what the state recalls for k
    delta = (v - remembered) * beta[..., None]
    state = state + k[..., :, None] * delta[..., None, :]
    return torch.einsum("shk,shkv->shv", q, state), state


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, decay: torch.Tensor, beta: torch.Tensor,
                     states: torch.Tensor, qsl: list[int], slots: list[int]) -> torch.Tensor:
    """A flat batch: sequence i's rows qsl[i]:qsl[i + 1] continue from states[slots[i]] (updated in place).
    q, k: [T, H, dk], v: [T, H, dv], decay, beta: [T, H], states: [slots, H, dk, dv] -> [T, H, dv].
    Step t runs the t-th row of every sequence that has one: a decode batch is one step."""
    lens = [b - a for a, b in zip(qsl, qsl[1:])]
    index = torch.tensor(slots, dtype=torch.long, device=states.device)
    s = states.index_select(0, index)  # [S, H, dk, dv]
    out = v.new_empty(v.shape)
    for t in range(max(lens, default=0)):
        live = [i for i, n in enumerate(lens) if n > t]
        rows = torch.tensor([qsl[i] + t for i in live], dtype=torch.long, device=q.device)
        if len(live) == len(lens):
            o, s = delta_step(q[rows], k[rows], v[rows], decay[rows], beta[rows], s)
        else:
            at = torch.tensor(live, dtype=torch.long, device=s.device)
            o, new = delta_step(q[rows], k[rows], v[rows], decay[rows], beta[rows], s.index_select(0, at))
            s = s.index_copy(0, at, new)
        out[rows] = o
    states.index_copy_(0, index, s)
    return out
