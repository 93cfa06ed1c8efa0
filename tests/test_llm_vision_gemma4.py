"""Gemma 4 with an image end to end: a tiny random E2B-shaped Gemma 4 (tests/gemma4_factory.py, with the image
tokens in its vocabulary) and its gemma4v mmproj (tests/mmproj_gemma4.py), then hearth's LLM.chat against
transformers' whole Gemma4ForConditionalGeneration (f32, eager) holding the same weights, fed the prompt as
Gemma4Processor writes one image ("<|image>" + "<|image|>" per row + "<image|>") and the pixels hearth prepared
(equal to the HF processor's at llama.cpp's size: tests/media/test_images.py). The prompt ids are equal, the first
step's logits close, the greedy tokens the same. The image's rows replace the placeholder embeddings unscaled and
the per-layer lookup reads the pad id there (transformers' pad_token_id, llama.cpp's id 0)."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import Gemma4Config, Gemma4ForConditionalGeneration

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from hearth.media.images import prepare_image
from tests import mmproj_gemma4
from tests.backends.test_media_embeds import rel_err, runner_logits
from tests.gemma4_factory import E2B_LIKE, hf_gemma4, write_gemma4_gguf
from tests.mmproj_factory import ROLES
from tests.test_llm_vision import url

SPECIALS = ("<|image>", "<|image|>", "<image|>")
DIMS = replace(E2B_LIKE, vocab=E2B_LIKE.vocab + len(SPECIALS), specials=SPECIALS, window=512, hidden=1536)
"""E2B's width (its images attend causally: hearth.media.projectors' causal_widths); a window longer than the
prompt: the image's 70+ rows inside one window, as in real files' 512."""
REL_TOL = 3e-3
"""Exact linears, hearth's K/V in f16, a prompt under 64 tokens (an mmproj whose image_min_pixels lets an image be
small): measured 1.2e-3 and 1.5e-3; a text-only prompt of 29 tokens is 1.4e-3 off alike (f16 K/V at width 1536)."""
REL_TOL_LONG = 3e-2
"""A prompt of 64 tokens or more (every image at llama.cpp's 70 rows at least): hearth's prefill of such a chunk is
not exact (f16 K/V and its long-chunk attention: the text before the image alone, without an image, is 4.6e-3 off
at 104 tokens and 3e-6 at 48, hearth against itself); measured 1.3e-2 over every position at width 64. Broken, the
pad id's per-layer lookup at the image rows is 0.71 off, no image rows 1.6."""
STEPS = 4
SMALL = 4 * 48 * 48  # image_min_pixels: 4 rows


def png(w: int, h: int, seed: int = 0) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def tiny_gemma4v(d):
    """(LM GGUF, mmproj, the small-image mmproj, transformers' whole model of them) written in folder d."""
    text = hf_gemma4(DIMS)
    write_gemma4_gguf(d / "lm.gguf", text, DIMS, chat_template=ROLES)
    vision = mmproj_gemma4.tiny_hf(lm_hidden=DIMS.hidden, seed=1)
    mmproj_gemma4.write_mmproj(d / "mmproj.gguf", vision)
    mmproj_gemma4.write_mmproj(d / "small.gguf", vision, min_pixels=SMALL)
    first = DIMS.vocab - len(SPECIALS)
    cfg = Gemma4Config(text_config=text.config.to_dict(), vision_config=vision.config.to_dict(), audio_config=None,
                       boi_token_id=first, image_token_id=first + 1, eoi_token_id=first + 2)
    cfg.text_config.pad_token_id = 0
    for sub in (cfg, cfg.text_config, cfg.vision_config):
        sub._attn_implementation = "eager"
    hf = Gemma4ForConditionalGeneration(cfg).eval()
    hf.model.language_model.load_state_dict(text.model.state_dict())
    hf.model.vision_tower.load_state_dict(vision.vision_tower.state_dict())
    hf.model.embed_vision.load_state_dict(vision.embed_vision.state_dict())
    hf.lm_head.weight = hf.model.language_model.embed_tokens.weight
    return d / "lm.gguf", d / "mmproj.gguf", d / "small.gguf", hf


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(hearth's LLM on exact linears, transformers' whole model, the LLM with the small-image mmproj)."""
    lm, mmproj, small, hf = tiny_gemma4v(tmp_path_factory.mktemp("gemma4v"))
    with use_linear_policy(exact=True):
        llm = LLM(str(lm), mmproj=str(mmproj), max_model_len=256, progress=False)
        small = LLM(str(lm), mmproj=str(small), max_model_len=256, progress=False)
    return llm, hf, small


def hf_inputs(llm, hf, data: bytes, ids: list[int]) -> dict:
    """transformers' inputs for the prompt ids: the image's patches and (x, y) positions as Gemma4ImageProcessor
    lays them out, from the pixels hearth prepared."""
    (pixels,) = prepare_image(data, llm.vision_config).pixels  # [3, H, W]
    p = mmproj_gemma4.VISION["patch_size"]
    _, h, w = pixels.shape
    x = torch.from_numpy(np.ascontiguousarray(pixels))
    patches = x.reshape(3, h // p, p, w // p, p).permute(1, 3, 2, 4, 0).reshape(1, -1, p * p * 3)
    yy, xx = torch.meshgrid(torch.arange(h // p), torch.arange(w // p), indexing="ij")
    pos = torch.stack([xx.reshape(-1), yy.reshape(-1)], dim=-1)[None]
    input_ids = torch.tensor([ids])
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "pixel_values": patches,
            "image_position_ids": pos}


CASES = {"small-wide": ((100, 60), True), "small-tall": ((50, 120), True), "default": ((71, 45), False),
         "default-tall": ((100, 160), False)}


@pytest.mark.parametrize("case", CASES)
def test_chat_equals_transformers(pair, case):
    (w, h), small = CASES[case]
    llm, hf = (pair[2] if small else pair[0]), pair[1]
    data = png(w, h)
    messages = [{"role": "user", "content": [{"type": "text", "text": "the capital"},
                                             {"type": "image_url", "image_url": {"url": url(data)}},
                                             {"type": "text", "text": " of france is"}]}]
    ids = llm.encode_chat(messages)
    n = prepare_image(data, llm.vision_config).num_embeds
    assert (len(ids) < 64) == small
    first = DIMS.vocab - len(SPECIALS)
    # Gemma4Processor's expansion of one image: boi, image_token * n, eoi
    at = list(ids).index(first)
    assert list(ids)[at:at + n + 2] == [first] + [first + 1] * n + [first + 2]
    assert list(ids).count(first + 1) == n and [(m.offset, m.length) for m in ids.media] == [(at + 1, n)]
    inputs = hf_inputs(llm, hf, data, list(ids))
    with torch.no_grad():
        their_logits = hf(**inputs).logits[0]
        out = hf.generate(**inputs, max_new_tokens=STEPS, do_sample=False, eos_token_id=None, pad_token_id=0)
    ours = runner_logits(llm, list(ids), list(ids.media))
    assert rel_err(ours, their_logits) < (REL_TOL if small else REL_TOL_LONG)  # every position
    llm.engine.scheduler.kv.pool.reset_prefix_cache()
    got = llm.chat(messages, SamplingParams(temperature=0, max_tokens=STEPS, ignore_eos=True))[0].outputs[0]
    assert got.token_ids == out[0, len(ids):].tolist()


def test_the_image_rows_and_the_pad_lookup_are_seen(pair, monkeypatch):
    """Teeth: the per-layer lookup at the image's own token id, or no image rows at all, is far off."""
    from hearth.models import gemma4

    llm, hf, small = pair
    data = png(100, 60)
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url(data)}},
                                             {"type": "text", "text": " of france is"}]}]
    ids = small.encode_chat(messages)
    with torch.no_grad():
        theirs = hf(**hf_inputs(small, hf, data, list(ids))).logits[0]
    assert rel_err(runner_logits(small, list(ids), list(ids.media)), theirs) < REL_TOL
    assert rel_err(runner_logits(small, list(ids), []), theirs) > 100 * REL_TOL
    monkeypatch.setattr(gemma4, "PAD_ID", DIMS.vocab - 2)  # the <|image|> id
    assert rel_err(runner_logits(small, list(ids), list(ids.media)), theirs) > 10 * REL_TOL
