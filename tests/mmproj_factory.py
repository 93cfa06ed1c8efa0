"""Tiny random vision-language models of transformers (LLaVA-1.5, Gemma 3, Idefics3/SmolVLM) and their
vision tower + projector written as llama.cpp's converters write an mmproj GGUF:
  mlp       the legacy tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py (LLaVA-1.5's real files):
            the blocks past the feature layer dropped (block_count = layers - 1), no post-LayerNorm, mlp.fc1
            named ffn_down and fc2 ffn_up (llama.cpp swaps them back by shape), mm.0 / mm.2, use_gelu false
  gemma3    convert_hf_to_gguf.py --mmproj (Gemma3VisionModel): soft_emb_norm stored as 1 + w, the input
            projection kept [vision, lm] and forced F16, embeddings F32, scale_factor only when not 4
  idefics3  convert_hf_to_gguf.py --mmproj (SmolVLMModel): scale_factor, preproc_image_size, mm.model.fc
  qwen2vl_merger, qwen2.5vl_merger  convert_hf_to_gguf.py --mmproj (Qwen2VLVisionModel, tests.mmproj_qwen)
  qwen3vl_merger  convert_hf_to_gguf.py --mmproj (Qwen3VLVisionModel, tests.mmproj_qwen3)
  gemma4v   convert_hf_to_gguf.py --mmproj (Gemma4VisionAudioModel, tests.mmproj_gemma4)
Sizes: 64 px images (LLaVA 32), 8 px patches, width 32: each file is a few hundred kB."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as Q

import transformers
from transformers import (CLIPVisionConfig, Gemma3Config, Idefics3Config, LlamaConfig, LlavaConfig,
                          SiglipVisionConfig)
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
from transformers.models.gemma3.configuration_gemma3 import Gemma3TextConfig
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

from tests import mmproj_gemma4, mmproj_qwen, mmproj_qwen3

transformers.logging.set_verbosity_error()

TEXT = dict(hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
            vocab_size=128)
VISION = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, patch_size=8)
MEAN, STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)  # CLIP's
HALF = (0.5, 0.5, 0.5)  # SigLIP's (IMAGENET_STANDARD_*)
IDEFICS3_PREPROC = 96
"""Idefics3's processor's first resize (size.longest_edge): larger than the 64 px the tower reads, as SmolVLM's."""


def tiny_hf(projector: str, seed: int = 0, lm_hidden: int | None = None, **config):
    """A random transformers model (eval, f32) whose vision tower and projector the mmproj holds; lm_hidden: its
    LM's width (the projector's rows), TEXT's by default; `config`: its top-level settings changed
    (vision_feature_layer, mm_tokens_per_image, scale_factor)."""
    torch.manual_seed(seed)
    text = {**TEXT, **({"hidden_size": lm_hidden} if lm_hidden else {})}
    if projector == mmproj_gemma4.NAME:
        return mmproj_gemma4.tiny_hf(text["hidden_size"], seed, **config)
    if projector in mmproj_qwen.QWEN:
        model = mmproj_qwen.tiny_hf(projector, text, **config)
    elif projector == mmproj_qwen3.NAME:
        model = mmproj_qwen3.tiny_hf(text, **config)
    elif projector == "mlp":
        vision = CLIPVisionConfig(**VISION, num_hidden_layers=3, image_size=32, hidden_act="quick_gelu",
                                  layer_norm_eps=1e-5, projection_dim=16)
        cfg = LlavaConfig(vision_config=vision, text_config=LlamaConfig(**text), vision_feature_select_strategy="default",
                          image_token_index=100, **{"vision_feature_layer": -2, **config})
        model = transformers.LlavaForConditionalGeneration(cfg)
    elif projector == "gemma3":
        vision = SiglipVisionConfig(**VISION, num_hidden_layers=2, image_size=64, layer_norm_eps=1e-6,
                                    hidden_act="gelu_pytorch_tanh", vision_use_head=False)
        lm = Gemma3TextConfig(**text, head_dim=12)
        cfg = Gemma3Config(vision_config=vision.to_dict(), text_config=lm.to_dict(),
                           **{"mm_tokens_per_image": 16, **config})
        model = transformers.Gemma3ForConditionalGeneration(cfg)
    else:
        vision = Idefics3VisionConfig(**VISION, num_hidden_layers=2, image_size=64, layer_norm_eps=1e-6)
        cfg = Idefics3Config(vision_config=vision.to_dict(), text_config=LlamaConfig(**text).to_dict(),
                             **{"scale_factor": 2, **config})
        model = transformers.Idefics3ForConditionalGeneration(cfg)
    _randomize(model)
    return model.eval()


ROLES = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
"""A chat template showing each message as it is, for the tests' tiny LMs (they have none of their own)."""


def tiny_vision_model(d: Path, arch: str = "gemma3", projector: str = "gemma3", **lm) -> tuple[Path, Path, object]:
    """A tiny LM (tests.gguf_factory, chat template ROLES unless given) in folder d and `mmproj.gguf` beside it,
    whose rows are as wide as the LM: (model, mmproj, the LM's TinyDims)."""
    from tests.gguf_factory import tiny_dir

    _, name, dims = tiny_dir(d, arch, **{"chat_template": ROLES, **lm})
    write_mmproj(d / "mmproj.gguf", projector, tiny_hf(projector, lm_hidden=dims.hidden))
    return d / name, d / "mmproj.gguf", dims


HALF_STORED = {"LlavaForConditionalGeneration": "patch_embedding.weight",  # 4-d: "always saved in f16"
               "Gemma3ForConditionalGeneration": "mm_input_projection_weight",  # forced F16
               "Idefics3ForConditionalGeneration": "(none)",
               "Qwen2VLForConditionalGeneration": "(none)", "Qwen2_5_VLForConditionalGeneration": "(none)",
               "Qwen3VLForConditionalGeneration": "(none)", "Qwen3_5ForConditionalGeneration": "(none)",
               "Qwen3_5MoeForConditionalGeneration": "(none)"}


def _randomize(model) -> None:
    """Every weight random (HF's init leaves norms at 1 and biases at 0, which would hide their use)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in name else 0.0))
            else:
                p.copy_(torch.randn_like(p) / p[0].numel() ** 0.5)
            if name.endswith(HALF_STORED[type(model).__name__]):
                p.copy_(p.half().float())  # the converter stores it F16 whatever: the reference holds the same values


def hf_processor(projector: str, preproc: int = IDEFICS3_PREPROC):
    """The HF image processor (PIL backend) of each tiny model, as its preprocessor_config would say (idefics3:
    its default do_image_splitting, the first resize's longest edge `preproc`)."""
    if projector == mmproj_gemma4.NAME:
        return mmproj_gemma4.hf_processor()
    if projector in mmproj_qwen.QWEN:
        return mmproj_qwen.hf_processor()
    if projector == mmproj_qwen3.NAME:
        return mmproj_qwen3.hf_processor()
    if projector == "mlp":
        return CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                                     image_mean=MEAN, image_std=STD)
    if projector == "gemma3":  # gemma-3's preprocessor_config: resample 2 (bilinear), mean/std 0.5
        return Gemma3ImageProcessorPil(size={"height": 64, "width": 64}, resample=2, image_mean=HALF, image_std=HALF)
    return Idefics3ImageProcessorPil(size={"longest_edge": preproc},
                                     max_image_size={"longest_edge": 64}, image_mean=HALF, image_std=HALF)


@torch.no_grad()
def hf_features(projector: str, model, pixels: np.ndarray) -> torch.Tensor:
    """get_image_features of the model for one image's pixels [3, S, S] -> [rows, lm_hidden] f32."""
    if projector == mmproj_gemma4.NAME:
        return model.features(pixels[0] if pixels.ndim == 4 else pixels)
    if projector in mmproj_qwen.QWEN:
        return mmproj_qwen.hf_features(model, pixels)
    if projector == mmproj_qwen3.NAME:
        return mmproj_qwen3.hf_features(model, pixels)
    x = torch.from_numpy(pixels)[None]
    if projector == "mlp":
        out = model.model.get_image_features(pixel_values=x, vision_feature_layer=model.config.vision_feature_layer,
                                             vision_feature_select_strategy="default", output_hidden_states=True)
        return out.pooler_output[0]
    if projector == "gemma3":
        return model.model.get_image_features(pixel_values=x).pooler_output[0]
    return model.model.get_image_features(pixel_values=x[None]).pooler_output[0]


VIT_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.out_proj": "attn_out", "layer_norm1": "ln1", "layer_norm2": "ln2",
             "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down"}
LEGACY_SWAP = {"ffn_up": "ffn_down", "ffn_down": "ffn_up"}  # convert_image_encoder_to_gguf.py's get_tensor_name


def write_mmproj(path, projector: str, model, qtype: str = "F32", feature_key: bool = False,
                 feature_layers: list[int] | None = None, preproc: int = IDEFICS3_PREPROC) -> None:
    """The mmproj of `model` (tiny_hf) as the converter writes it; matrices in `qtype` (F32, F16 or Q8_0:
    a row that is no whole Q8_0 block stays F16, as llama.cpp's quantizer leaves it). feature_key: an mlp
    file that names its feature layer (clip.vision.feature_layer, as the legacy converter writes one from a
    config with vision_feature_layer); feature_layers: that key as given, whatever the model (a broken file);
    preproc: idefics3's clip.vision.preproc_image_size (its processor's size.longest_edge)."""
    if projector == mmproj_gemma4.NAME:
        return mmproj_gemma4.write_mmproj(path, model, qtype)
    if projector in mmproj_qwen.QWEN:
        return mmproj_qwen.write_mmproj(path, projector, model, qtype)
    if projector == mmproj_qwen3.NAME:
        return mmproj_qwen3.write_mmproj(path, model, qtype)
    w = gguf.GGUFWriter(str(path), "clip")
    vc = model.config.vision_config
    features = _feature_layers(model) if projector == "mlp" else None
    layers = max(features) if features else vc.num_hidden_layers
    tensors = _tensors(projector, model, layers)
    _metadata(w, projector, model, layers, feature_layers or (features if feature_key else None), preproc)
    for name, value in tensors:
        _add(w, name, value, qtype, projector == "mlp")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _feature_layers(model) -> list[int]:
    """LLaVA's vision_feature_layer made non-negative as the legacy converter does (i: after block i); the file
    keeps the blocks up to the deepest (-2 alone: every block but the last)."""
    n, chosen = model.config.vision_config.num_hidden_layers, model.config.vision_feature_layer
    return [i if i >= 0 else n + i + 1 for i in ([chosen] if isinstance(chosen, int) else chosen)]


def _metadata(w: gguf.GGUFWriter, projector: str, model, layers: int, features: list[int] | None,
              preproc: int) -> None:
    vc, proc = model.config.vision_config, hf_processor(projector)
    w.add_name(f"tiny-{projector}")
    w.add_clip_has_vision_encoder(True)
    w.add_clip_projector_type(projector)
    if projector == "mlp":  # legacy: CLIP's own projection_dim, no general.type
        w.add_bool("clip.has_text_encoder", False)
        w.add_bool("clip.has_llava_projector", True)
        w.add_vision_projection_dim(vc.projection_dim)
    else:
        w.add_type(gguf.GGUFType.MMPROJ)
        w.add_vision_projection_dim(model.config.text_config.hidden_size)
    w.add_vision_image_size(vc.image_size)
    w.add_vision_patch_size(vc.patch_size)
    w.add_vision_embedding_length(vc.hidden_size)
    w.add_vision_feed_forward_length(vc.intermediate_size)
    w.add_vision_block_count(layers)
    w.add_vision_head_count(vc.num_attention_heads)
    w.add_vision_attention_layernorm_eps(vc.layer_norm_eps)
    w.add_vision_image_mean(list(proc.image_mean))
    w.add_vision_image_std(list(proc.image_std))
    w.add_vision_use_gelu(projector != "mlp")  # legacy: hidden_act == "gelu"; CLIP's is quick_gelu
    if features:
        w.add_array("clip.vision.feature_layer", features)
    if projector == "gemma3":
        k = (vc.image_size // vc.patch_size) // int(model.config.mm_tokens_per_image ** 0.5)
        if k != 4:
            w.add_vision_projector_scale_factor(k)
    if projector == "idefics3":
        w.add_vision_projector_scale_factor(model.config.scale_factor)
        w.add_vision_preproc_image_size(preproc)


def _tensors(projector: str, model, layers: int):
    """(gguf name, f32 numpy array in torch order) for every tensor the mmproj holds."""
    tower = model.model.vision_model if projector == "idefics3" else model.model.vision_tower
    sd = {k: v.detach().float().numpy() for k, v in tower.state_dict().items()}
    yield "v.patch_embd.weight", sd["embeddings.patch_embedding.weight"]
    if "embeddings.patch_embedding.bias" in sd:
        yield "v.patch_embd.bias", sd["embeddings.patch_embedding.bias"]
    if "embeddings.class_embedding" in sd:
        yield "v.class_embd", sd["embeddings.class_embedding"]
    yield "v.position_embd.weight", sd["embeddings.position_embedding.weight"]
    for part in ("weight", "bias"):
        if f"pre_layrnorm.{part}" in sd:
            yield f"v.pre_ln.{part}", sd[f"pre_layrnorm.{part}"]
        if projector != "mlp":  # the legacy LLaVA converter skips post_layernorm
            yield f"v.post_ln.{part}", sd[f"post_layernorm.{part}"]
    for i in range(layers):
        for hf, gg in VIT_NAMES.items():
            gg = LEGACY_SWAP.get(gg, gg) if projector == "mlp" else gg
            for part in ("weight", "bias"):
                yield f"v.blk.{i}.{gg}.{part}", sd[f"encoder.layers.{i}.{hf}.{part}"]
    mm = {k: v.detach().float().numpy() for k, v in model.model.state_dict().items()
          if k.startswith(("multi_modal_projector.", "connector."))}
    if projector == "mlp":
        for hf, gg in (("linear_1", "mm.0"), ("linear_2", "mm.2")):
            for part in ("weight", "bias"):
                yield f"{gg}.{part}", mm[f"multi_modal_projector.{hf}.{part}"]
    elif projector == "gemma3":
        yield "mm.soft_emb_norm.weight", mm["multi_modal_projector.mm_soft_emb_norm.weight"] + 1
        yield "mm.input_projection.weight", mm["multi_modal_projector.mm_input_projection_weight"]
    else:
        yield "mm.model.fc.weight", mm["connector.modality_projection.proj.weight"]


def _add(w: gguf.GGUFWriter, name: str, value: np.ndarray, qtype: str, legacy: bool) -> None:
    if name == "mm.input_projection.weight":  # Gemma3VisionModel.tensor_force_quant
        w.add_tensor(name, value.astype(np.float16))
    elif value.ndim == 4 and legacy:  # convert_image_encoder_to_gguf.py: 4-d weights always F16
        w.add_tensor(name, value.astype(np.float16))
    elif value.ndim in (1, 4) or qtype == "F32" or "embd" in name:  # the new converter: .embeddings. F32
        w.add_tensor(name, value)
    elif qtype == "F16" or value.shape[-1] % 32:
        w.add_tensor(name, value.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(value, Q.Q8_0), raw_dtype=Q.Q8_0)


def write_settings_only(path, projector: str | None, tensors: dict, arch: str = "clip", **extra) -> None:
    """A GGUF with an mmproj's vision keys (vision=False: none) and only the given tensors (a config reads
    no others); `extra`: more string or bool keys."""
    w = gguf.GGUFWriter(str(path), arch)
    if projector is not None:
        w.add_clip_projector_type(projector)
    vision = extra.pop("vision", True)
    w.add_clip_has_vision_encoder(vision)
    if vision:
        w.add_vision_image_size(64)
        w.add_vision_patch_size(8)
        w.add_vision_embedding_length(32)
        w.add_vision_feed_forward_length(64)
        w.add_vision_block_count(2)
        w.add_vision_head_count(4)
        w.add_vision_attention_layernorm_eps(1e-6)
        w.add_vision_image_mean([0.5] * 3)
        w.add_vision_image_std([0.5] * 3)
    for key, value in extra.items():
        w.add_string(key, value) if isinstance(value, str) else w.add_bool(key, value)
    for name, value in tensors.items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
