"""Gemma 4's MoE layers (the 26B-A4B; transformers' Gemma4TextDecoderLayer with enable_moe_block, llama.cpp's
gemma4 graph with ffn_gate_inp): a dense GELU MLP and routed experts side by side, each from the residual stream
through its own norm and post-norm, their sum post-normed again and added. The router reads the stream RMS-normed
without a weight, times its own per-dim scale (ffn_gate_inp.scale) and 1/sqrt(hidden); softmax over every expert,
top-k, renormalized, then each weight times its expert's scale (ffn_down_exps.scale, transformers'
router.per_expert_scale, which llama.cpp applies to the expert's output: the same product)."""

from __future__ import annotations

import math

import torch

from hearth.layers.norm import RMSNorm
from hearth.models.gguf_tensors import f32
from hearth.models.moe import MoE


class Gemma4MoE(MoE):
    def __init__(self, cfg, g, i, backend, activation):
        super().__init__(cfg, g, i, backend, activation)
        p = f"blk.{i}."
        # the weightless norm's output times scale / sqrt(hidden), as one weight (f32: llama.cpp's two products)
        scale = f32(g, p + "ffn_gate_inp.scale") * torch.tensor(1 / math.sqrt(cfg.hidden_size), dtype=torch.float32)
        self.router_norm = RMSNorm(scale, cfg.rms_norm_eps)
        self.expert_scale = f32(g, p + "ffn_down_exps.scale")  # [n_expert]

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: the residual stream [T, hidden] (not the experts' normed input) -> f32 [T, n_expert]."""
        return self.router_norm(h.float()) @ self.router.T

    def route(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights, ids = super().route(h)
        return weights * self.expert_scale[ids], ids

    def mixed(self, x: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
        """x: the residual stream [T, hidden], normed: the experts' input (pre_ffw_norm_2's) -> f32 [T, hidden]."""
        return self.experts.forward(normed, *self.route(x))
