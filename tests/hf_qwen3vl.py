"""transformers' Qwen3-VL (the whole model, a one-block vision tower beside it, unused) with the text weights of a
tiny `qwen3vl` GGUF (tests/gguf_factory.py), and its text model over inputs_embeds with deepstack parts at the image
rows: transformers' GGUF loader does not read qwen3vl. get_rope_index is tests.hf_qwen2vl.rope_index's call."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from gguf.quants import dequantize

from tests.gguf_factory import TinyDims
from tests.hf_built import NAMES


def hf_qwen3_vl(path, d: TinyDims, vision: dict | None = None, **top) -> torch.nn.Module:
    """transformers' f32 Qwen3VLForConditionalGeneration (eager attention) with the weights of the GGUF at `path`;
    vision: its vision config (a one-block tower by default, its weights as random as the config's init leaves
    them); `top`: other top-level settings (image_token_id, ...)."""
    from hearth.loader.gguf_loader import GGUFFile

    g = GGUFFile(path)
    t = {n: torch.from_numpy(dequantize(np.asarray(x.data), x.qtype).astype(np.float32).reshape(x.shape))
         for n, x in g.tensors.items()}
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
    model = transformers.Qwen3VLForConditionalGeneration(cfg).eval()
    lm = "model.language_model."
    state = {lm + "embed_tokens.weight": t.pop("token_embd.weight"), lm + "norm.weight": t.pop("output_norm.weight")}
    if "output.weight" in t:
        state["lm_head.weight"] = t.pop("output.weight")
    for name, w in t.items():
        _, i, base, kind = name.split(".")
        state[f"{lm}layers.{i}.{NAMES[base]}.{kind}"] = w
    missing, unexpected = model.load_state_dict(state, strict=False)
    extra = [k for k in missing if "visual" not in k and not (k == "lm_head.weight" and d.tied)]
    assert not unexpected and not extra, (extra, unexpected)
    return model


def hf_logits(model, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None = None,
              deepstack: list[torch.Tensor] | None = None) -> torch.Tensor:
    """embeds [T, hidden], positions [3, 1, T], mask [T] bool (the image rows), deepstack: per part [rows, hidden]
    (the image rows' in order) -> [T, vocab]: the text model over inputs_embeds, then the head."""
    with torch.no_grad():
        h = model.model.language_model(inputs_embeds=embeds[None], position_ids=positions,
                                       visual_pos_masks=None if mask is None else mask[None],
                                       deepstack_visual_embeds=deepstack).last_hidden_state
        return model.lm_head(h)[0]
