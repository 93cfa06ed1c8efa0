"""Gemma 4's per-layer embeddings (PLE; transformers' Gemma4TextModel.get_per_layer_inputs and
project_per_layer_inputs, llama.cpp's build_inp_per_layer and project_per_layer_inputs): each token gets one
small input per layer, half looked up by its id in a second table, half projected from its scaled embedding;
each layer adds its own through a gate and a projection (hearth.models.gemma4_layer)."""

from __future__ import annotations

import math

import torch
from torch import nn

from hearth.config import ModelConfig
from hearth.layers.norm import RMSNorm
from hearth.loader.gguf_loader import GGUFFile
from hearth.models.gguf_tensors import f32

COMBINE = 2.0 ** -0.5
"""The two halves summed, times 1/sqrt(2) (transformers' per_layer_input_scale)."""


class PerLayerInputs(nn.Module):
    def __init__(self, cfg: ModelConfig, g: GGUFFile, backend):
        super().__init__()
        self.layers, self.width = cfg.num_layers, cfg.per_layer_input
        # [vocab, layers * width]: only the looked-up rows are read (llama.cpp's TENSOR_READ_LAZY)
        self.table = backend.embedding(g.tensor("per_layer_token_embd.weight"))
        self.proj = backend.linear(g.tensor("per_layer_model_proj.weight"))  # [layers * width, hidden]
        self.norm = RMSNorm(f32(g, "per_layer_proj_norm.weight"), cfg.rms_norm_eps)  # [width], per layer's slice
        # f32 scales as llama.cpp's sqrtf; transformers' are the same values in f32
        self.table_scale = torch.tensor(math.sqrt(self.width), dtype=torch.float32).item()
        self.proj_scale = torch.tensor(1 / math.sqrt(cfg.hidden_size), dtype=torch.float32).item()

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """ids: [T]; x: the scaled token embeddings f32 [T, hidden] -> f32 [T, layers, width]."""
        T = ids.shape[0]
        tok = self.table(ids).view(T, self.layers, self.width).mul_(self.table_scale)
        proj = self.proj(x.to(self.proj.in_dtype)).float().mul_(self.proj_scale).view(T, self.layers, self.width)
        return self.norm(proj).add_(tok).mul_(COMBINE)
