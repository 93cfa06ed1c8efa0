"""Routed experts plus one shared expert that every token runs, scaled by a sigmoid gate of its own (Qwen3-Next's
and Qwen3.5-MoE's sparse block: transformers' Qwen3_5MoeSparseMoeBlock; llama.cpp's ffn_*_shexp and
ffn_gate_inp_shexp in qwen35moe.cpp's build_layer_ffn): moe(h) + sigmoid(h . w_gate) * swiglu_shared(h)."""

from __future__ import annotations

import torch

from hearth.config import ModelConfig
from hearth.layers.activation import ACTIVATIONS
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.gguf_tensors import f32
from hearth.models.moe import MoE


class SharedExpertMoE(MoE):
    def __init__(self, cfg: ModelConfig, g: GGUFFile, i: int, backend, activation: str):
        super().__init__(cfg, g, i, backend, activation)
        p = f"blk.{i}."
        self.shared_gate_up = backend.linear([g.tensor(p + f"ffn_{w}_shexp.weight") for w in ("gate", "up")])
        self.shared_down = backend.linear(g.tensor(p + "ffn_down_shexp.weight"))
        self.register_buffer("shared_gate", f32(g, p + "ffn_gate_inp_shexp.weight").reshape(-1), persistent=False)
        self.act = ACTIVATIONS[activation]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h: the normed hidden [T, hidden] f32 -> [T, hidden] f32."""
        gate, up = self.shared_gate_up(h).float().chunk(2, dim=-1)  # [T, shared_ffn] each
        shared = self.shared_down(self.act(gate).mul_(up).to(self.shared_down.in_dtype)).float()
        return super().forward(h).add_(shared * torch.sigmoid(h.float() @ self.shared_gate)[:, None])
