"""transformers' Qwen2-VL and Qwen2.5-VL (the whole model, a one-layer vision tower beside it, unused) with the
text weights of a tiny `qwen2vl` GGUF (tests/gguf_factory.py), and their M-RoPE positions for a prompt with
images (get_rope_index, the reference for hearth.media.mrope): transformers' GGUF loader does not read qwen2vl."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from gguf.quants import dequantize

from tests.gguf_factory import TinyDims
from tests.hf_built import NAMES

VARIANTS = {  # name -> (config class, model class, a tiny vision config: its `out` width is the LM's)
    "qwen2-vl": (transformers.Qwen2VLConfig, transformers.Qwen2VLForConditionalGeneration,
                 lambda d: dict(depth=1, embed_dim=32, hidden_size=d.hidden, num_heads=2)),
    "qwen2.5-vl": (transformers.Qwen2_5_VLConfig, transformers.Qwen2_5_VLForConditionalGeneration,
                   lambda d: dict(depth=1, hidden_size=32, out_hidden_size=d.hidden, num_heads=2, intermediate_size=64)),
}
MERGE = 2  # spatial_merge_size: image_grid_thw counts patches, 2 x 2 of them one LM row


def hf_qwen_vl(path, variant: str, d: TinyDims, vision: dict | None = None, **top) -> torch.nn.Module:
    """transformers' f32 model (eager attention) with the text weights of the GGUF at `path`; vision: its vision
    config (VARIANTS' by default), the tower's weights as random as the config's init leaves them; `top`: other
    top-level settings (image_token_id, ...)."""
    config_cls, model_cls, default_vision = VARIANTS[variant]
    text = dict(vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.ffn, num_hidden_layers=d.layers,
                num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, rms_norm_eps=d.rms_eps,
                max_position_embeddings=d.context, tie_word_embeddings=d.tied, bos_token_id=None, eos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta,
                                 "mrope_section": list(d.rope_sections[:3])})
    cfg = config_cls(text_config=text, vision_config=vision or default_vision(d), tie_word_embeddings=d.tied, **top)
    cfg._attn_implementation = "eager"
    return load_text_weights(model_cls(cfg).eval(), path, d)


def load_text_weights(model, path, d: TinyDims) -> torch.nn.Module:
    """`model` (a Qwen VL ForConditionalGeneration) with its language model's weights from the GGUF at `path`,
    dequantized to f32; only the vision tower's (and a tied head's) may stay as the config's init left them."""
    from hearth.loader.gguf_loader import GGUFFile

    t = {n: torch.from_numpy(dequantize(np.asarray(x.data), x.qtype).astype(np.float32).reshape(x.shape))
         for n, x in GGUFFile(path).tensors.items()}
    lm = "model.language_model."
    state = {lm + "embed_tokens.weight": t.pop("token_embd.weight"), lm + "norm.weight": t.pop("output_norm.weight")}
    if "output.weight" in t:
        state["lm_head.weight"] = t.pop("output.weight")
    for name, w in t.items():
        _, i, base, kind = name.split(".")
        state[f"{lm}layers.{i}.{NAMES[base]}.{kind}"] = w
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("visual" in k or k == "lm_head.weight" and d.tied for k in missing), (missing, unexpected)
    return model


def rope_index(model, length: int, media) -> torch.Tensor:
    """[3, 1, length] int64: get_rope_index's positions for a prompt of `length` tokens whose image rows are the
    media's (each MediaInput with a grid; text between any two, as the processor's vision_start / vision_end)."""
    types = torch.zeros(1, length, dtype=torch.int)
    for m in media:
        types[0, m.offset:m.end] = 1
    grids = torch.tensor([[1, m.grid[0] * MERGE, m.grid[1] * MERGE] for m in media]) if media else None
    if not media:
        return torch.arange(length).expand(3, 1, -1)
    pos, _ = model.model.get_rope_index(torch.zeros(1, length, dtype=torch.long), types, image_grid_thw=grids)
    return pos


def hf_logits(model, embeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """embeds [T, hidden], positions [3, 1, T] -> [T, vocab]: the text model over inputs_embeds, then the head."""
    with torch.no_grad():
        h = model.model.language_model(inputs_embeds=embeds[None], position_ids=positions).last_hidden_state
        return model.lm_head(h)[0]
