"""A tiny random Qwen3-VL model of transformers and its vision tower + mergers written as llama.cpp's
convert_hf_to_gguf.py --mmproj writes them (conversion/qwen3vl.py, Qwen3VLVisionModel):
  - the Conv3d patch embedding split into its two temporal slices, v.patch_embd.weight (forced F16 in an F16
    file, F32 otherwise) and v.patch_embd.weight.1 (always F32), and its bias v.patch_embd.bias;
  - the learned position table pos_embed as v.position_embd.weight (always F32), image_size its side in pixels
    (sqrt(num_position_embeddings) * patch_size);
  - each block's qkv kept fused (attn_qkv), mlp.linear_fc1 / fc2 as ffn_up / ffn_down, use_gelu (its tanh form);
  - the merger's norm as v.post_ln, linear_fc1 / fc2 as mm.0 / mm.2; deepstack_merger_list[j] as
    v.deepstack.{deepstack_visual_indexes[j]}.{norm,fc1,fc2} (the block's own index) and
    clip.vision.is_deepstack_layers marking those blocks; layer_norm_epsilon the LM's rms_norm_eps (1e-6).
Sizes: 16 px patches and 2 x 2 merges as the real ones (the processor's factor 32), width 32, 2 heads, 3 blocks,
deepstack after blocks 0 and 2, a 6 x 6 position table."""

from __future__ import annotations

import gguf
import numpy as np
import torch

import transformers
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig

from tests.mmproj_qwen import finish

NAME = "qwen3vl_merger"
UNIT = 32 * 32
MIN_PIXELS, MAX_PIXELS = 8 * UNIT, 4096 * UNIT  # llama.cpp's set_limit_image_tokens(8, 4096)
HALF = [0.5, 0.5, 0.5]  # Qwen3-VL's preprocessor_config image_mean / image_std
DEEPSTACK = [0, 2]  # deepstack_visual_indexes (the real 2B: [5, 11, 17] of 24 blocks)
PATCH = 3 * 2 * 16 * 16  # a flattened patch: C * T * p * p


def tiny_hf(text: dict, **config):
    """The random transformers model (mmproj_factory randomizes it); `config`: vision settings."""
    vision = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=text["hidden_size"], num_position_embeddings=36,
                  deepstack_visual_indexes=DEEPSTACK)
    text = {**text, "head_dim": 16, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6,
                                                         "mrope_section": [2, 3, 3], "mrope_interleaved": True}}
    return transformers.Qwen3VLForConditionalGeneration(Qwen3VLConfig(vision_config={**vision, **config},
                                                                      text_config=text))


def hf_processor(min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS):
    """Qwen3-VL's image processor (Qwen2VLImageProcessor, PIL backend: patch 16, merge 2, mean / std 0.5) with
    the area bounds hearth reads from the file (llama.cpp's)."""
    return Qwen2VLImageProcessorPil(size={"shortest_edge": min_pixels, "longest_edge": max_pixels}, patch_size=16,
                                    merge_size=2, temporal_patch_size=2, image_mean=HALF, image_std=HALF)


@torch.no_grad()
def hf_features(model, pixels: np.ndarray) -> torch.Tensor:
    """get_image_features for one image's pixels [rows, cols, 4, 3 * 2 * 16 * 16] (hearth's, = the processor's
    pixel_values) -> [rows * cols, lm_hidden * (1 + deepstack)] f32: the merger's rows, then each deepstack
    merger's, side by side (llama.cpp's layout)."""
    height, width = pixels.shape[:2]
    flat = torch.from_numpy(np.ascontiguousarray(pixels)).reshape(-1, pixels.shape[-1])
    grid = torch.tensor([[1, height * 2, width * 2]])  # patches: 2 x 2 to a unit
    out = model.model.get_image_features(pixel_values=flat, image_grid_thw=grid)
    (rows,) = out.pooler_output  # one image
    return torch.cat([rows, *(feat for (feat,) in out.deepstack_features)], dim=-1)


BLOCK_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.qkv": "attn_qkv", "attn.proj": "attn_out",
               "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down"}
MERGER_NAMES = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}


def write_mmproj(path, model, qtype: str = "F32", max_pixels: int | None = None,
                 deepstack_key: bool = True) -> None:
    """The mmproj of `model` as the converter writes it, matrices in `qtype` (F32, F16, Q8_0); max_pixels: a
    clip.vision.image_max_pixels key (hearth reads it); deepstack_key False: no clip.vision.is_deepstack_layers
    (llama.cpp finds the deepstack blocks by their tensors)."""
    vc = model.config.vision_config
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("tiny-qwen3vl")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(model.config.text_config.hidden_size)
    w.add_vision_image_size(int(vc.num_position_embeddings ** 0.5 * vc.patch_size))
    w.add_vision_patch_size(vc.patch_size)
    w.add_vision_embedding_length(vc.hidden_size)
    w.add_vision_feed_forward_length(vc.intermediate_size)
    w.add_vision_block_count(vc.depth)
    w.add_vision_head_count(vc.num_heads)
    w.add_vision_image_mean(HALF)
    w.add_vision_image_std(HALF)
    w.add_clip_projector_type(NAME)
    w.add_vision_use_gelu(True)
    w.add_vision_spatial_merge_size(vc.spatial_merge_size)
    w.add_vision_attention_layernorm_eps(model.config.text_config.rms_norm_eps)
    if deepstack_key:
        w.add_vision_is_deepstack_layers([i in _deepstack(vc) for i in range(vc.depth)])
    finish(w, _tensors(model), qtype, max_pixels)


def _deepstack(vc) -> list[int]:
    """The deepstack blocks (Qwen3.5's tower has none: the converter still writes the key, all false)."""
    return list(getattr(vc, "deepstack_visual_indexes", None) or [])


def _tensors(model):
    visual = model.model.visual
    sd = {k: v.detach().float().numpy() for k, v in visual.state_dict().items()}
    patch = sd.pop("patch_embed.proj.weight")  # [hidden, 3, 2, p, p]
    yield "v.patch_embd.weight", patch[:, :, 0]
    yield "v.patch_embd.weight.1", patch[:, :, 1]
    for key, value in sd.items():
        head, part = key.rsplit(".", 1)
        if key == "patch_embed.proj.bias":
            yield "v.patch_embd.bias", value
        elif key == "pos_embed.weight":
            yield "v.position_embd.weight", value
        elif head.startswith("blocks."):
            _, i, hf = head.split(".", 2)
            yield f"v.blk.{i}.{BLOCK_NAMES[hf]}.{part}", value
        elif head == "merger.norm":
            yield f"v.post_ln.{part}", value
        elif head.startswith("merger."):
            yield f"mm.{ {'linear_fc1': 0, 'linear_fc2': 2}[head.split('.')[1]] }.{part}", value
        else:  # deepstack_merger_list.{j}.{norm,linear_fc1,linear_fc2}
            _, j, hf = head.split(".", 2)
            yield f"v.deepstack.{visual.deepstack_visual_indexes[int(j)]}.{MERGER_NAMES[hf]}.{part}", value

