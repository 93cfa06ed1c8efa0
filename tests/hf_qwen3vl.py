"""transformers' Qwen3-VL (the whole model, a one-block vision tower beside it, unused) with the text weights of a
tiny `qwen3vl` GGUF (tests/gguf_factory.py), and its text model over inputs_embeds with deepstack parts at the image
rows: transformers' GGUF loader does not read qwen3vl. get_rope_index is tests.hf_qwen2vl.rope_index's call."""

from __future__ import annotations

import torch
import transformers

from tests.gguf_factory import TinyDims
from tests.hf_qwen2vl import load_text_weights


def hf_qwen3_vl(path, d: TinyDims, vision: dict | None = None, **top) -> torch.nn.Module:
    """transformers' f32 Qwen3VLForConditionalGeneration (eager attention) with the weights of the GGUF at `path`;
    vision: its vision config (a one-block tower by default, its weights as random as the config's init leaves
    them); `top`: other top-level settings (image_token_id, ...)."""
    text = dict(vocab_size=d.vocab, hidden_size=d.hidden, intermediate_size=d.ffn, num_hidden_layers=d.layers,
                num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim,
                rms_norm_eps=d.rms_eps,
                max_position_embeddings=d.context, tie_word_embeddings=d.tied, bos_token_id=None, eos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": d.rope_theta, "mrope_interleaved": True,
                                 "mrope_section": list(d.rope_sections[:3])})
    vision = vision or dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=d.hidden,
                  num_position_embeddings=16, deepstack_visual_indexes=[0] * d.deepstack)
    cfg = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=d.tied, **top)
    cfg._attn_implementation = "eager"
    return load_text_weights(transformers.Qwen3VLForConditionalGeneration(cfg).eval(), path, d)


def hf_logits(model, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None,
              deepstack: list[torch.Tensor] | None = None) -> torch.Tensor:
    """embeds [T, hidden], positions [3, 1, T], mask [T] bool (the image rows), deepstack: per part [rows, hidden]
    (the image rows' in order) -> [T, vocab]: the text model over inputs_embeds, then the head."""
    with torch.no_grad():
        h = model.model.language_model(inputs_embeds=embeds[None], position_ids=positions,
                                       visual_pos_masks=None if mask is None else mask[None],
                                       deepstack_visual_embeds=deepstack).last_hidden_state
        return model.lm_head(h)[0]
