"""The projectors of an mmproj (`mm.*` tensors): the tower's features -> rows of the LM's width. One module
per llama.cpp projector type, each the math of transformers' own:
  mlp       LlavaMultiModalProjector: linear_1 (mm.0) -> gelu (erf form, projector_hidden_act) -> linear_2 (mm.2)
  gemma3    Gemma3MultiModalProjector: k x k average pool of the patch grid -> RMS norm (the file holds 1 + w)
            -> x @ mm_input_projection_weight
  idefics3  Idefics3Connector: pixel shuffle by s -> modality_projection (mm.model.fc, no bias)
  qwen2vl_merger, qwen2.5vl_merger  PatchMerger (hearth.models.qwen_vision.QwenMerger)
  gemma4v   Gemma4VisionPooler + Gemma4MultimodalEmbedder (hearth.models.gemma4_vision)
  qwen3vl_merger  Qwen3VLVisionPatchMerger and its DeepStack twins (hearth.models.qwen_deepstack.Qwen3Merger)"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from torch import nn

from hearth.errors import ModelLoadError
from hearth.layers.norm import RMSNorm
from hearth.layers.quant import dequantize
from hearth.loader.gguf_loader import GGUFFile, GGUFTensor
from hearth.media.config import VisionConfig
from hearth.models.gemma4_vision import Gemma4VisionProjector
from hearth.models.gguf_tensors import f32, maybe_f32
from hearth.models.qwen_deepstack import Qwen3Merger
from hearth.models.qwen_vision import QwenMerger


def _linear(g: GGUFFile, backend, name: str):
    return backend.linear(g.tensor(name + ".weight"), bias=maybe_f32(g, name + ".bias"))


class MlpProjector(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.drop_class = "v.class_embd" in g.tensors  # HF's vision_feature_select_strategy "default"
        self.mm0, self.mm2 = _linear(g, backend, "mm.0"), _linear(g, backend, "mm.2")
        width = cfg.hidden * len(cfg.feature_layers)  # the feature layers side by side
        if self.mm0.in_features != width:
            raise ModelLoadError(f"{g.path}: mm.0 reads rows of width {self.mm0.in_features}, but "
                                 f"{len(cfg.feature_layers)} feature layer(s) of width {cfg.hidden} make {width}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [rows, features] -> [patches, lm_hidden]
        if self.drop_class:
            x = x[1:]
        return self.mm2(F.gelu(self.mm0(x)))


class Gemma3Projector(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.side, self.k = cfg.patches_per_side, cfg.merge
        # convert_hf_to_gguf.py stores soft_emb_norm as 1 + w (Gemma3RMSNorm's scale): used as it is
        self.norm = RMSNorm(f32(g, "mm.soft_emb_norm.weight"), cfg.eps)
        self.proj = backend.linear(_transposed(g.tensor("mm.input_projection.weight")))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [n * n, hidden] -> [(n / k) ** 2, lm_hidden]
        grid = x.T.reshape(1, x.shape[1], self.side, self.side)  # [1, hidden, n, n], rows row-major
        x = F.avg_pool2d(grid, self.k, self.k).flatten(2)[0].T  # [(n / k) ** 2, hidden]
        return self.proj(self.norm(x))


class Idefics3Projector(nn.Module):
    def __init__(self, cfg: VisionConfig, g: GGUFFile, backend):
        super().__init__()
        self.s = cfg.merge
        self.fc = _linear(g, backend, "mm.model.fc")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [n * n, hidden] -> [(n / s) ** 2, lm_hidden]
        return self.fc(pixel_shuffle(x, self.s))


def pixel_shuffle(x: torch.Tensor, s: int) -> torch.Tensor:
    """Idefics3Connector.pixel_shuffle for one image: [n * n, d] -> [(n / s) ** 2, d * s * s], each row the s x s
    neighbours' features side by side, in the order of transformers' views and permutes."""
    seq, d = x.shape
    n = int(seq ** 0.5)
    x = x.view(n, n // s, d * s).permute(1, 0, 2)  # [n / s, n, d * s]
    x = x.reshape(n // s, n // s, d * s * s).permute(1, 0, 2)  # [n / s, n / s, d * s * s]
    return x.reshape(seq // (s * s), d * s * s)


def _transposed(t: GGUFTensor) -> GGUFTensor:
    """HF's mm_input_projection_weight is [vision, lm] (x @ W) and the converter keeps it so (forced F16):
    the same weight as a linear's [lm, vision], F16/F32 kept, other types as F32."""
    if t.qtype in (Q.F16, Q.F32):
        data, qtype = np.ascontiguousarray(t.data.T), t.qtype
    else:
        data, qtype = dequantize(t.data, t.qtype).reshape(t.shape).T.contiguous().numpy(), Q.F32
    return GGUFTensor(t.name, qtype, t.shape[::-1], data)


PROJECTORS = {"mlp": MlpProjector, "gemma3": Gemma3Projector, "idefics3": Idefics3Projector,
              "qwen2vl_merger": QwenMerger, "qwen2.5vl_merger": QwenMerger, "qwen3vl_merger": Qwen3Merger,
              "gemma4v": Gemma4VisionProjector}
"""clip.projector_type -> its module (the torch-free facts: hearth.media.projectors)."""
