"""A tiny random transformers Qwen3.5 with its vision tower (Qwen3_5ForConditionalGeneration, f32, eager) written as
llama.cpp's converter writes its two files from it: the `qwen35` LM GGUF (conversion/qwen.py Qwen3_5TextModel:
tests.qwen35_factory) with Qwen's chat and vision tokens and a chat template, and the mmproj (conversion/qwen3vl.py
Qwen3VLVisionModel registers Qwen3_5ForConditionalGeneration too: projector qwen3vl_merger, and as Qwen3.5's tower has
no deepstack_visual_indexes, clip.vision.is_deepstack_layers all false and no v.deepstack tensors;
tests.mmproj_qwen3). The LM's weights are tests.qwen35_factory.hf_qwen35's, the tower's random (the same tiny tower
as tests.mmproj_qwen3's, less its deepstack mergers)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
import transformers

from transformers import AutoTokenizer

from tests import mmproj_factory, mmproj_qwen3
from tests.gguf_factory import QWEN_VL_TOKENS, tiny_dir
from tests.qwen35_factory import DIMS, EXPERTS, hf_qwen35, write_qwen35_gguf

VISION = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=DIMS.hidden, num_position_embeddings=36)


WHOLE = {"qwen35": (transformers.Qwen3_5Config, transformers.Qwen3_5ForConditionalGeneration),
         "qwen35moe": (transformers.Qwen3_5MoeConfig, transformers.Qwen3_5MoeForConditionalGeneration)}
"""The LM GGUF's arch -> transformers' whole model's (config, class)."""


def hf_qwen35_vl(text_model, arch: str = "qwen35", seed: int = 1, **top) -> torch.nn.Module:
    """Qwen3_5(Moe)ForConditionalGeneration over `text_model`'s weights (a Qwen3_5(Moe)ForCausalLM) and a random
    tower; top: image_token_id and the other top-level ids."""
    config, whole = WHOLE[arch]
    cfg = config(text_config=text_model.config.to_dict(), vision_config=VISION,
                        tie_word_embeddings=text_model.config.tie_word_embeddings, **top)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = whole(cfg).eval()
    mmproj_factory._randomize(model)  # the tower's weights (the text ones are replaced next)
    state = {k.replace("model.", "model.language_model.", 1): v for k, v in text_model.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("model.visual.") for k in missing), (missing, unexpected)
    return model


def write_pair(folder: Path, chat_template: str, ids: dict[str, int], arch: str = "qwen35",
               seed: int = 0) -> tuple[Path, Path, object]:
    """(LM GGUF, mmproj GGUF, transformers' whole model) in folder; ids: the tokenizer's vision token ids; arch:
    qwen35 or qwen35moe (tests.qwen35_factory's EXPERTS)."""
    d = replace(DIMS, vl_tokens=True, rope_theta=100.0)  # faster turns: a wrong h or w position shows more
    moe = EXPERTS if arch == "qwen35moe" else None
    text = hf_qwen35(seed, d, moe=moe)
    lm = write_qwen35_gguf(folder / "lm.gguf", text, d=d, moe=moe, chat_template=chat_template)
    model = hf_qwen35_vl(text, arch, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                         vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    mmproj_qwen3.write_mmproj(folder / "mmproj.gguf", model)
    return lm, folder / "mmproj.gguf", model


def tiny_qwen35_vl(folder: Path, chat_template: str, arch: str = "qwen35"):
    """(LM GGUF, mmproj GGUF, transformers' model of both, its (tokenizer, image processor, chat template)) in
    folder. transformers' GGUF reader knows no qwen35: the same tokenizer from a one-layer qwen2 file."""
    (folder / "tok").mkdir()
    tok_dir, tok_name, _ = tiny_dir(folder / "tok", "qwen2", vl_tokens=True, layers=1, vocab=DIMS.vocab)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir, gguf_file=tok_name)
    ids = dict(zip(QWEN_VL_TOKENS, tokenizer.convert_tokens_to_ids(list(QWEN_VL_TOKENS)), strict=True))
    lm, mmproj, model = write_pair(folder, chat_template, ids, arch)
    return lm, mmproj, model, (tokenizer, mmproj_factory.hf_processor(mmproj_qwen3.NAME), chat_template)
