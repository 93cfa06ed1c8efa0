"""An mmproj's vision encoder: the tower (hearth.models.vision_tower; Qwen-VL's hearth.models.qwen_vision) and its
projector (hearth.models.vision_projector), built from the file once; encode() makes one image's rows for the LM.
Linear weights go through the backend's quantized linears (F32/F16 in tiny files, F16/Q8_0 in real ones)."""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import nn

from hearth.loader.gguf_loader import GGUFFile
from hearth.media.config import VisionConfig, vision_config
from hearth.models.gemma4_vision import Gemma4VisionTower
from hearth.models.qwen_vision import QwenVisionTower
from hearth.models.vision_projector import PROJECTORS
from hearth.models.vision_tower import VisionTower

TOWERS = {"vit": VisionTower, "qwen2vl": QwenVisionTower, "gemma4v": Gemma4VisionTower}
"""hearth.media.projectors.Projector.tower -> the module; each checks the pixels it reads (check) first."""


class VisionEncoder(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.cfg = cfg
        self.tower = TOWERS[cfg.spec.tower](cfg, g, backend)
        self.projector = PROJECTORS[cfg.projector](cfg, g, backend)

    @classmethod
    def load(cls, path: str | os.PathLike, backend, cfg: VisionConfig | None = None) -> VisionEncoder:
        """The encoder of an mmproj GGUF (hearth.media.config's one-line errors for a file that is none);
        cfg: its VisionConfig if already read (the file's fingerprint is not sampled again)."""
        g = GGUFFile(path)
        return cls(cfg or vision_config(g), g, backend)

    @torch.inference_mode()
    def encode(self, pixels: np.ndarray) -> torch.Tensor:
        """pixels: float32 [3, S, S] (Gemma 4: [3, H, W]; Qwen-VL: [rows, cols, m * m, 3 * T * p * p]), one piece of
        hearth.media.images.prepare_image's -> f32 [num_embeds, lm_hidden] (Qwen3-VL: [num_embeds, lm_hidden *
        (1 + deepstack)], the main rows then each DeepStack part)."""
        self.tower.check(pixels)
        x = torch.from_numpy(np.ascontiguousarray(pixels, dtype=np.float32))
        return self.projector(self.tower(x)).float()
