"""Tiny random Qwen2-VL and Qwen2.5-VL models of transformers and their vision tower + merger written as
llama.cpp's convert_hf_to_gguf.py --mmproj writes them (conversion/qwenvl.py, Qwen2VLVisionModel):
  - the Conv3d patch embedding split into its two temporal slices, v.patch_embd.weight (forced F16 in an F16
    file, F32 otherwise) and v.patch_embd.weight.1 (always F32: its name does not end in ".weight");
  - each block's fused qkv split into attn_q / attn_k / attn_v (weights and biases);
  - Qwen2-VL's feed_forward_length is its vision config's hidden_size (the LM's width, which the converter
    renames), not the MLP's: the tower reads the MLP's width from its tensors;
  - Qwen2.5-VL: use_silu, n_wa_pattern = fullatt_block_indexes[0] + 1 (evenly spaced), no window_size key;
  - the merger's ln_q as v.post_ln, its mlp.0 / mlp.2 as mm.0 / mm.2; layer_norm_epsilon 1e-6.
Sizes: 14 px patches and 2 x 2 merges as the real ones (so the processor's factor is 28), width 32, 2 heads."""

from __future__ import annotations

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

import transformers
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.utils.constants import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

QWEN = ("qwen2vl_merger", "qwen2.5vl_merger")
UNIT = 28 * 28
MIN_PIXELS, MAX_PIXELS = 8 * UNIT, 4096 * UNIT  # llama.cpp's set_limit_image_tokens(8, 4096)
FULL_ATTENTION = [1, 3]  # Qwen2.5-VL's fullatt_block_indexes: n_wa_pattern 2


def tiny_hf(projector: str, text: dict, **config):
    """The random transformers model (not yet randomized: mmproj_factory does it); `config`: vision settings."""
    if projector == "qwen2vl_merger":
        vision = dict(depth=2, embed_dim=32, hidden_size=text["hidden_size"], num_heads=2, mlp_ratio=2)
        return transformers.Qwen2VLForConditionalGeneration(
            Qwen2VLConfig(vision_config={**vision, **config}, text_config=text))
    vision = dict(depth=4, hidden_size=32, intermediate_size=64, out_hidden_size=text["hidden_size"], num_heads=2,
                  fullatt_block_indexes=FULL_ATTENTION, window_size=112)
    return transformers.Qwen2_5_VLForConditionalGeneration(
        Qwen2_5_VLConfig(vision_config={**vision, **config}, text_config=text))


def hf_processor(min_pixels: int = MIN_PIXELS, max_pixels: int = MAX_PIXELS):
    """Qwen2VLImageProcessor (PIL backend) with the area bounds hearth reads from the file (llama.cpp's)."""
    return Qwen2VLImageProcessorPil(size={"shortest_edge": min_pixels, "longest_edge": max_pixels})


@torch.no_grad()
def hf_features(model, pixels: np.ndarray) -> torch.Tensor:
    """get_image_features for one image's pixels [rows, cols, 4, 3 * 2 * 14 * 14] (hearth's, = the processor's
    pixel_values) -> [rows * cols, lm_hidden] f32."""
    height, width = pixels.shape[:2]
    flat = torch.from_numpy(np.ascontiguousarray(pixels)).reshape(-1, pixels.shape[-1])
    grid = torch.tensor([[1, height * 2, width * 2]])  # patches: 2 x 2 to a unit
    (rows,) = model.model.get_image_features(pixel_values=flat, image_grid_thw=grid).pooler_output  # one per image
    return rows


BLOCK_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.proj": "attn_out", "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down",
               "mlp.up_proj": "ffn_up", "mlp.gate_proj": "ffn_gate", "mlp.down_proj": "ffn_down"}


def write_mmproj(path, projector: str, model, qtype: str = "F32", max_pixels: int | None = None) -> None:
    """The mmproj of `model` as the converter writes it, matrices in `qtype` (F32, F16, Q8_0); max_pixels: a
    clip.vision.image_max_pixels key, which the converter does not write for these types (hearth reads it)."""
    sd = {k: v.detach().float().numpy() for k, v in model.model.visual.state_dict().items()}
    write_state(path, projector, model.config.vision_config, model.config.text_config.hidden_size, sd, qtype,
                max_pixels)


def write_state(path, projector: str, vc, lm_hidden: int, sd: dict[str, np.ndarray], qtype: str = "F32",
                max_pixels: int | None = None) -> None:
    """write_mmproj of a vision config `vc` (its fields as transformers' config names them) and the tower's
    state dict `sd` as numpy arrays (benchmarks/bench_vision.py writes random ones at real shapes)."""
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name(f"tiny-{projector}")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(lm_hidden)
    w.add_vision_image_size(560)  # the converter's default: Qwen's vision configs have no image_size
    w.add_vision_patch_size(vc.patch_size)
    qwen2 = projector == "qwen2vl_merger"
    w.add_vision_embedding_length(vc.embed_dim if qwen2 else vc.hidden_size)
    w.add_vision_feed_forward_length(vc.hidden_size if qwen2 else vc.intermediate_size)
    w.add_vision_block_count(vc.depth)
    w.add_vision_head_count(vc.num_heads)
    w.add_vision_image_mean(list(OPENAI_CLIP_MEAN))
    w.add_vision_image_std(list(OPENAI_CLIP_STD))
    w.add_clip_projector_type(projector)
    if not qwen2:
        w.add_vision_use_silu(True)
        w.add_vision_n_wa_pattern(vc.fullatt_block_indexes[0] + 1)
    w.add_vision_attention_layernorm_eps(1e-6)
    finish(w, _tensors(sd), qtype, max_pixels)


def finish(w: gguf.GGUFWriter, tensors, qtype: str, max_pixels: int | None) -> None:
    """The optional clip.vision.image_max_pixels key, then the (name, array) `tensors` in `qtype`; writes the file."""
    if max_pixels:
        w.add_uint32("clip.vision.image_max_pixels", max_pixels)
    for name, value in tensors:
        _add(w, name, value, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _tensors(sd: dict[str, np.ndarray]):
    sd = dict(sd)
    patch = sd.pop("patch_embed.proj.weight")  # [hidden, 3, 2, p, p]
    yield "v.patch_embd.weight", patch[:, :, 0]
    yield "v.patch_embd.weight.1", patch[:, :, 1]
    for key, value in sd.items():
        if key.startswith("blocks."):
            _, i, rest = key.split(".", 2)
            hf, part = rest.rsplit(".", 1)
            if hf == "attn.qkv":
                for gg, third in zip(("attn_q", "attn_k", "attn_v"), np.split(value, 3)):
                    yield f"v.blk.{i}.{gg}.{part}", third
            else:
                yield f"v.blk.{i}.{BLOCK_NAMES[hf]}.{part}", value
        elif key.startswith("merger.ln_q."):
            yield "v.post_ln." + key.rsplit(".", 1)[1], value
        else:  # merger.mlp.0 / .2
            yield "mm." + key.removeprefix("merger.mlp."), value


def _add(w: gguf.GGUFWriter, name: str, value: np.ndarray, qtype: str) -> None:
    if name == "v.patch_embd.weight":  # MmprojModel.tensor_force_quant: F16 in an F16 file, else F32
        w.add_tensor(name, value.astype(np.float16) if qtype == "F16" else value)
    elif value.ndim == 1 or qtype == "F32" or not name.endswith(".weight") or name == "v.position_embd.weight":
        w.add_tensor(name, value)  # V_ENC_EMBD_POS and .weight.1 always F32
    elif qtype == "F16" or value.shape[-1] % 32:
        w.add_tensor(name, value.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(value, Q.Q8_0), raw_dtype=Q.Q8_0)
