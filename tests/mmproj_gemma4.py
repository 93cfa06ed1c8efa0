"""A tiny random Gemma 4 vision tower + embedder of transformers (Gemma4VisionModel, Gemma4MultimodalEmbedder; f32,
eager) written as llama.cpp's convert_hf_to_gguf.py --mmproj writes it (conversion/gemma.py Gemma4VisionAudioModel
over MmprojModel): clip.vision.projector_type "gemma4v", image_size 224 (unused), the processor's mean 0 / std 1,
HF names mapped by gguf-py's MMPROJ table after the converter's renames (model.vision_tower.encoder. ->
vision_model.model., .linear.weight -> .weight, position_embedding_table -> .weight), the patch projection
[hidden, p * p * 3] reshaped to a conv weight [hidden, 3, p, p], scalar clamp bounds as 1-element tensors.
Sizes: 16 px patches, 3 x 3 pooling as the real ones; width 32, 2 heads of 16, 2 blocks, a 64-row position table
(images up to 1024 px a side)."""

from __future__ import annotations

import math

import gguf
import numpy as np
import torch
from torch import nn

import transformers
from transformers.models.gemma4 import modeling_gemma4 as m4
from transformers.image_transforms import resize
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig, Gemma4VisionConfig
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

transformers.logging.set_verbosity_error()

NAME = "gemma4v"
TOKENS = (70, 1120)  # llama.cpp's set_limit_image_tokens for gemma4v
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
              head_dim=16, patch_size=16, pooling_kernel_size=3, position_embedding_size=64)


class TinyVision(nn.Module):
    """The parts of Gemma4Model an image goes through, under its names (vision_tower, embed_vision)."""

    def __init__(self, lm_hidden: int, **config):
        super().__init__()
        self.config = Gemma4VisionConfig(**{**VISION, **config})
        self.config._attn_implementation = "eager"
        self.vision_tower = m4.Gemma4VisionModel(self.config)
        text = Gemma4TextConfig(hidden_size=lm_hidden)
        self.embed_vision = m4.Gemma4MultimodalEmbedder(self.config, text)

    @torch.no_grad()
    def features(self, pixels: np.ndarray) -> torch.Tensor:
        """pixels [3, H, W] in [0, 1] -> the LM rows [H * W / (p * k) ** 2, lm_hidden] (get_image_features)."""
        p = self.config.patch_size
        _, h, w = pixels.shape
        x = torch.from_numpy(pixels)
        # convert_image_to_patches: each patch flattened (row, col, channel)
        patches = x.reshape(3, h // p, p, w // p, p).permute(1, 3, 2, 4, 0).reshape(1, -1, p * p * 3)
        yy, xx = torch.meshgrid(torch.arange(h // p), torch.arange(w // p), indexing="ij")
        pos = torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=-1)[None]  # [1, N, 2]: (x, y)
        rows = self.vision_tower(pixel_values=patches, pixel_position_ids=pos).last_hidden_state
        return self.embed_vision(rows[None] if rows.ndim == 2 else rows).reshape(-1, self.embed_vision.text_hidden_size)


def tiny_hf(lm_hidden: int = 48, seed: int = 0, clamps: bool = False, standardize: bool = False,
            **config) -> TinyVision:
    """Random weights (norms around 1, so that each is seen); clamps: Gemma4ClippableLinear bounds tight enough to
    bite; standardize: std_bias / std_scale."""
    torch.manual_seed(seed)
    model = TinyVision(lm_hidden, use_clipped_linears=clamps, standardize=standardize, **config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
            elif "position_embedding_table" in name:
                p.copy_(torch.randn_like(p) * 0.5)
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
        for name, b in model.named_buffers():
            if name.endswith(("input_min", "output_min")):
                b.fill_(-1.5)
            elif name.endswith(("input_max", "output_max")):
                b.fill_(1.5)
            elif name.endswith("std_bias"):
                b.copy_(torch.randn_like(b))
            elif name.endswith("std_scale"):
                b.copy_(torch.rand_like(b) + 0.5)
    return model.eval()


def llamacpp_size(height: int, width: int, align: int = 48, tokens: tuple[int, int] = TOKENS) -> tuple[int, int]:
    """(height, width) as llama.cpp's img_tool::calc_size_preserved_ratio picks them (floats in f32, std::round
    half away from zero), written again by hand from clip.cpp for the test."""
    f32 = np.float32
    lo, hi = tokens[0] * align * align, tokens[1] * align * align

    def by(x, op):
        return int(op(f32(x) / f32(align))) * align

    half_up = lambda v: math.floor(v + 0.5)
    h, w = max(align, by(height, half_up)), max(align, by(width, half_up))
    if h * w > hi:
        beta = np.sqrt(f32(height) * f32(width) / f32(hi), dtype=f32)
        h, w = max(align, by(f32(height) / beta, math.floor)), max(align, by(f32(width) / beta, math.floor))
    elif h * w < lo:
        beta = np.sqrt(f32(lo) / (f32(height) * f32(width)), dtype=f32)
        h, w = by(f32(height) * beta, math.ceil), by(f32(width) * beta, math.ceil)
    return h, w


class _LlamaCppSized(Gemma4ImageProcessorPil):
    """HF's Gemma 4 processor (PIL backend: its resize, rescale and patches) sized as llama.cpp sizes an image."""

    def aspect_ratio_preserving_resize(self, image, patch_size, max_patches, pooling_kernel_size, resample):
        return resize(image, size=llamacpp_size(*image.shape[-2:]), resample=resample)


def hf_processor():
    """A callable as mmproj_factory's processors: (images=PIL image, return_tensors="np") -> {"pixel_values":
    [1, 3, H, W]}, the processor's patches put back in place (its padding dropped)."""
    proc = _LlamaCppSized(max_soft_tokens=TOKENS[1])

    def run(images, return_tensors="np"):
        out = proc(images=images, return_tensors="np")
        (pos,), (patches,) = out["image_position_ids"], out["pixel_values"]
        real = pos[:, 0] >= 0
        cols, rows = pos[real].max(0) + 1
        p = VISION["patch_size"]
        x = patches[real].reshape(rows, cols, p, p, 3).transpose(4, 0, 2, 1, 3).reshape(3, rows * p, cols * p)
        return {"pixel_values": np.ascontiguousarray(x, np.float32)[None]}

    return run


def _gguf_name(hf: str, tmap) -> str | None:
    name = "model." + hf  # Gemma4ForConditionalGeneration's prefix
    name = name.replace("model.vision_tower.encoder.", "vision_model.model.").replace(".linear.weight", ".weight")
    if name.endswith("position_embedding_table"):
        name += ".weight"
    return tmap.get_name(name, try_suffixes=(".weight", ".bias", ".input_max", ".input_min", ".output_max",
                                             ".output_min"))


def write_mmproj(path, model: TinyVision, qtype: str = "F32", min_pixels: int = 0) -> None:
    """The mmproj of `model`; matrices F32, F16 or Q8_0 (norms, the position table, the conv weight and scalars F32);
    min_pixels: a clip.vision.image_min_pixels key (hearth reads it: small images stay small)."""
    vc = model.config
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("tiny-gemma4v")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(model.embed_vision.text_hidden_size)
    w.add_vision_image_size(224)
    w.add_vision_patch_size(vc.patch_size)
    w.add_vision_embedding_length(vc.hidden_size)
    w.add_vision_feed_forward_length(vc.intermediate_size)
    w.add_vision_block_count(vc.num_hidden_layers)
    w.add_vision_head_count(vc.num_attention_heads)
    w.add_vision_image_mean([0.0, 0.0, 0.0])
    w.add_vision_image_std([1.0, 1.0, 1.0])
    w.add_vision_use_gelu(True)
    w.add_clip_vision_projector_type("gemma4v")
    w.add_vision_attention_layernorm_eps(1e-6)
    if min_pixels:
        w.add_uint32("clip.vision.image_min_pixels", min_pixels)
    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, vc.num_hidden_layers)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    for hf, t in state.items():
        if "rotary_emb" in hf:
            continue
        value = t.detach().float().reshape(-1) if t.ndim == 0 else t.detach().float()
        if hf.endswith("patch_embedder.input_proj.weight"):
            p = vc.patch_size
            value = value.reshape(vc.hidden_size, p, p, 3).permute(0, 3, 1, 2).contiguous()
        name = _gguf_name(hf, tmap)
        assert name is not None, hf
        array = value.numpy()
        if qtype == "F32" or array.ndim != 2 or "position" in name:
            w.add_tensor(name, array)
        elif qtype == "F16" or array.shape[-1] % 32:
            w.add_tensor(name, array.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
