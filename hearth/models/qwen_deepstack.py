"""Qwen3-VL's mergers (transformers' Qwen3VLVisionPatchMerger; llama.cpp's clip_graph_qwen3vl): the main one on
the last block's output as Qwen2-VL's (hearth.models.qwen_vision.QwenMerger: norm per patch, then each unit's
m * m rows side by side), and one per DeepStack block on that block's output, its norm after the m * m rows are
side by side (use_postshuffle_norm). Its rows are llama.cpp's: [main | deepstack 1 | ...], each lm_hidden wide;
the LM adds part i to its hidden state after decoder layer i - 1 (VisionConfig.deepstack)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hearth.errors import ModelLoadError
from hearth.loader.gguf_loader import GGUFFile
from hearth.media.config import VisionConfig
from hearth.models.encoder import LayerNorm
from hearth.models.qwen_vision import QwenMerger
from hearth.models.vision_tower import _linear


class DeepstackMerger(nn.Module):
    """v.deepstack.{block}: norm over the unit's m * m rows side by side -> fc1 -> gelu (erf, HF's nn.GELU) -> fc2."""

    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend, block: int):
        super().__init__()
        p = f"v.deepstack.{block}."
        self.width = cfg.hidden * cfg.merge ** 2
        self.norm = LayerNorm(g, p + "norm", cfg.eps)
        self.fc1, self.fc2 = _linear(g, backend, [p + "fc1.weight"]), _linear(g, backend, [p + "fc2.weight"])
        if self.norm.weight.shape != (self.width,) or self.fc1.in_features != self.width:
            raise ModelLoadError(f"{g.path}: {p}norm / fc1 do not read {cfg.merge} x {cfg.merge} rows of width "
                                 f"{cfg.hidden} ({self.width})")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N / m ** 2, lm_hidden]
        x = self.norm(x.reshape(-1, self.width)).to(self.fc1.dtype)
        return self.fc2(F.gelu(self.fc1(x)).to(self.fc2.dtype))


class Qwen3Merger(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.hidden = cfg.hidden
        self.main = QwenMerger(cfg, g, backend)
        self.deepstack = nn.ModuleList(DeepstackMerger(cfg, g, backend, i) for i in cfg.deepstack_layers)
        if any(d.fc2.lin.out_features != cfg.lm_hidden for d in self.deepstack):
            raise ModelLoadError(f"{g.path}: a v.deepstack fc2 does not make rows of the LM's width {cfg.lm_hidden}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [N, hidden * (1 + deepstack)], the tower's (last block | deepstack blocks) -> [N / m ** 2,
        lm_hidden * (1 + deepstack)] f32."""
        parts = x.split(self.hidden, dim=-1)
        rows = [self.main(parts[0])] + [merge(part) for merge, part in zip(self.deepstack, parts[1:])]
        return torch.cat([r.float() for r in rows], dim=-1)
