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
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config

from transformers import AutoTokenizer

from tests import mmproj_factory, mmproj_qwen3
from tests.gguf_factory import QWEN_VL_TOKENS, tiny_dir
from tests.qwen35_factory import DIMS, hf_qwen35, write_qwen35_gguf

VISION = dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=DIMS.hidden, num_position_embeddings=36)


def hf_qwen35_vl(text_model, seed: int = 1, **top) -> torch.nn.Module:
    """Qwen3_5ForConditionalGeneration over `text_model`'s weights (a Qwen3_5ForCausalLM) and a random tower;
    top: image_token_id and the other top-level ids."""
    cfg = Qwen3_5Config(text_config=text_model.config.to_dict(), vision_config=VISION,
                        tie_word_embeddings=text_model.config.tie_word_embeddings, **top)
    cfg._attn_implementation = "eager"
    cfg.text_config._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForConditionalGeneration(cfg).eval()
    mmproj_factory._randomize(model)  # the tower's weights (the text ones are replaced next)
    state = {k.replace("model.", "model.language_model.", 1): v for k, v in text_model.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("model.visual.") for k in missing), (missing, unexpected)
    return model


def write_pair(folder: Path, chat_template: str, ids: dict[str, int], seed: int = 0) -> tuple[Path, Path, object]:
    """(LM GGUF, mmproj GGUF, transformers' whole model) in folder; ids: the tokenizer's vision token ids."""
    d = replace(DIMS, vl_tokens=True, rope_theta=100.0)  # faster turns: a wrong h or w position shows more
    text = hf_qwen35(seed, d)
    lm = write_qwen35_gguf(folder / "lm.gguf", text, d=d, chat_template=chat_template)
    model = hf_qwen35_vl(text, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                         vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    mmproj_qwen3.write_mmproj(folder / "mmproj.gguf", model)
    return lm, folder / "mmproj.gguf", model


def tiny_qwen35_vl(folder: Path, chat_template: str):
    """(LM GGUF, mmproj GGUF, transformers' model of both, its (tokenizer, image processor, chat template)) in
    folder. transformers' GGUF reader knows no qwen35: the same tokenizer from a one-layer qwen2 file."""
    (folder / "tok").mkdir()
    tok_dir, tok_name, _ = tiny_dir(folder / "tok", "qwen2", vl_tokens=True, layers=1, vocab=DIMS.vocab)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir, gguf_file=tok_name)
    ids = dict(zip(QWEN_VL_TOKENS, tokenizer.convert_tokens_to_ids(list(QWEN_VL_TOKENS)), strict=True))
    lm, mmproj, model = write_pair(folder, chat_template, ids)
    return lm, mmproj, model, (tokenizer, mmproj_factory.hf_processor(mmproj_qwen3.NAME), chat_template)
