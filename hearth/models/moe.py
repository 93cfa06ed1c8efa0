"""A mixture-of-experts MLP (Qwen3-MoE's sparse block): per token, the router's softmax over every
expert, its top-k, renormalized to sum to 1 where the model does (norm_topk_prob), then the weighted
sum of the chosen experts' SwiGLU outputs (an architecture may route otherwise: gpt-oss). Same math as transformers' Qwen3MoeSparseMoeBlock and
llama.cpp's build_moe_ffn(..., norm_w) with softmax gating.

The routing is here (f32, torch's topk: the same choice on every backend, ties included); the experts
are the backend's (Backend.experts): op by op over one linear per expert (hearth.layers.experts), or
one native call over the stacked tensors (the CPU backend). No whole-layer fused call implements
ArchSpec.moe: the rest of these layers runs step by step (natively on the CPU backend)."""

from __future__ import annotations

import torch
from gguf import ExpertGatingFuncType
from torch import nn

from hearth.config import ModelConfig
from hearth.errors import UnsupportedError
from hearth.layers.quant import dequantize
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.gguf_tensors import maybe_f32


def moe_config(g: GGUFFile, weights_norm: bool) -> dict:
    """ModelConfig fields of a MoE file's `{arch}.expert_*` keys; weights_norm: the architecture's
    renormalization when the file does not state it (llama.cpp hard-codes it per graph: true for qwen3moe)."""
    count, used = g.arch_get("expert_count"), g.arch_get("expert_used_count")
    if not count or not used or used > count:
        raise UnsupportedError(f"{g.path}: a MoE model needs {g.arch}.expert_count and {g.arch}.expert_used_count "
                               f"(at most expert_count); the file has {count} and {used}")
    gating = int(g.arch_get("expert_gating_func", ExpertGatingFuncType.SOFTMAX))
    if gating != ExpertGatingFuncType.SOFTMAX:
        raise UnsupportedError(f"{g.path}: {g.arch}.expert_gating_func={gating}: only softmax routing (1) is implemented")
    ffn = g.arch_get("expert_feed_forward_length")
    if not ffn:  # [experts, expert_ffn, hidden]; a fused gate|up tensor is twice as tall
        fused = "blk.0.ffn_gate_up_exps.weight" in g.tensors
        stacked = g.tensor("blk.0.ffn_gate_up_exps.weight" if fused else "blk.0.ffn_gate_exps.weight")
        ffn = stacked.shape[1] // (1 + fused)
    return dict(num_experts=int(count), experts_used=int(used), expert_ffn=int(ffn),
                expert_weights_norm=bool(g.arch_get("expert_weights_norm", weights_norm)))


class MoE(nn.Module):
    """forward(h: normed hidden [T, hidden]) -> [T, hidden] f32, like the dense MLP's."""

    in_dtype = torch.float32  # the router's logits are taken in f32: a bf16 input could flip a near tie

    def __init__(self, cfg: ModelConfig, g: GGUFFile, i: int, backend, activation: str):
        super().__init__()
        p = f"blk.{i}."
        r = g.tensor(p + "ffn_gate_inp.weight")  # [n_expert, hidden], f32 in llama.cpp's files (never quantized)
        # F32 (as llama.cpp keeps it): a view of the file, no copy
        self.register_buffer("router", dequantize(r.data, r.qtype).reshape(r.shape), persistent=False)
        self.router_bias = maybe_f32(g, p + "ffn_gate_inp.bias")  # [n_expert] (gpt-oss), or None
        # stacked [n_expert, out, in]: gate and up [n_expert, expert_ffn, hidden] (or one of a file converted
        # with --fuse-gate-up-exps: ffn_gate_up_exps, rows [gate | up]), down [n_expert, hidden, expert_ffn]
        if p + "ffn_gate_up_exps.weight" in g.tensors:
            gate_up = [g.tensor(p + "ffn_gate_up_exps.weight")]
            gate_up_bias = maybe_f32(g, p + "ffn_gate_up_exps.bias")
        else:
            gate_up = [g.tensor(p + f"ffn_{w}_exps.weight") for w in ("gate", "up")]
            bg, bu = (maybe_f32(g, p + f"ffn_{w}_exps.bias") for w in ("gate", "up"))
            gate_up_bias = None if bg is None else torch.cat([bg, bu], dim=1)
        # per-expert biases (gpt-oss): stacked [n_expert, out]
        biases = (gate_up_bias, maybe_f32(g, p + "ffn_down_exps.bias"))
        self.experts = backend.experts(gate_up, g.tensor(p + "ffn_down_exps.weight"), activation, biases)
        self.top_k, self.renorm = cfg.experts_used, cfg.expert_weights_norm

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: [T, hidden] -> the router's f32 logits [T, n_expert]."""
        logits = h.float() @ self.router.T
        return logits if self.router_bias is None else logits.add_(self.router_bias)

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h: [T, hidden] -> (weights f32 [T, k], expert ids [T, k])."""
        probs = torch.softmax(self.logits(h), dim=-1)  # [T, n_expert]
        weights, ids = probs.topk(self.top_k, dim=-1)
        if self.renorm:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.experts.forward(h, *self.route(h))  # .forward: no module-call overhead
