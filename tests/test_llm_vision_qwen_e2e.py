"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL end to end: a tiny random transformers model (vision tower, merger and text
model) written as llama.cpp's converter writes it (a `qwen2vl` / `qwen3vl` LM GGUF with Qwen's chat and vision
tokens and chat template, an mmproj beside it), then hearth's LLM.chat with images against transformers' model
fed the same chat as its Qwen2VLProcessor / Qwen3VLProcessor writes it (the tiny tokenizer read by transformers'
GGUF reader, the image processor with llama.cpp's area bounds): the prompt ids are equal, the first step's logits
close, greedy tokens the same. Every piece counts: the processor's pixels and grid, the tower's rows (Qwen3-VL's
with their deepstack parts, added after the LM's first layers), the prompt's placeholders, each image's M-RoPE
rows (Qwen3-VL's pairs interleaved) and the text after it at index + delta."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoTokenizer

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from tests import mmproj_factory
from tests.backends.test_media_embeds import rel_err, runner_logits
from tests.gguf_factory import QWEN_VL_TOKENS, tiny_dir, write_tiny_gguf
from tests.hf_qwen2vl import hf_qwen_vl
from tests.hf_qwen3vl import hf_qwen3_vl
from tests.media.test_qwen_images import QWEN2_VL_TEMPLATE
from tests.test_llm_vision import url

QWEN3_VL_TEMPLATE = (  # Qwen3-VL-2B-Instruct's chat_template.json without its tools and tool-call branches
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' }}{%- if messages[0].content is string %}"
    "{{- messages[0].content }}{%- else %}{%- for content in messages[0].content %}{%- if 'text' in content %}"
    "{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- set image_count = namespace(value=0) %}{%- set video_count = namespace(value=0) %}"
    "{%- for message in messages %}{%- if message.role == 'user' %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{%- set image_count.value = image_count.value + 1 %}"
    "{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif content.type == 'video' or 'video' in content %}{%- set video_count.value = video_count.value + 1 %}"
    "{%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content_item in message.content %}"
    "{%- if 'text' in content_item %}{{- content_item.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}")


@dataclass(frozen=True)
class Variant:
    arch: str
    """The LM GGUF's architecture."""
    projector: str
    template: str
    """The chat template both the GGUF and transformers' tokenizer render."""
    hf: Callable
    """(LM GGUF path, its TinyDims, vision config dict, **top-level settings) -> transformers' whole model."""


VARIANTS = {
    "qwen2-vl": Variant("qwen2vl", "qwen2vl_merger", QWEN2_VL_TEMPLATE,
                        lambda path, d, vision, **top: hf_qwen_vl(path, "qwen2-vl", d, vision, **top)),
    "qwen2.5-vl": Variant("qwen2vl", "qwen2.5vl_merger", QWEN2_VL_TEMPLATE,
                          lambda path, d, vision, **top: hf_qwen_vl(path, "qwen2.5-vl", d, vision, **top)),
    # interleaved M-RoPE, and deepstack parts the tower's blocks 0 and 2 make, added after LM layers 0 and 1
    "qwen3-vl": Variant("qwen3vl", "qwen3vl_merger", QWEN3_VL_TEMPLATE, hf_qwen3_vl),
}
PROJECTORS = {name: v.projector for name, v in VARIANTS.items()}
REL_TOL = 5e-3
"""First-step logits, max |ours - theirs| / max |theirs|: exact linears over an f32 file, the tower's rows f32,
hearth's K/V stored f16. Measured up to 1e-3 at the last row (2e-3 over the whole prompt, as much before the
first image as after it: the LM's f16 K/V, not the image path); a grid dropped (1-D positions) gives 0.23.
Qwen3-VL: 1.4e-4 (one image) and 7.9e-4 (two) at the last row, 2.7e-3 over the whole two-image prompt; broken, its
last row moves by 0.24 / 0.31 with the deepstack parts not added, 0.08 / 0.10 with the M-RoPE pairs in runs
(Qwen2-VL's layout) instead of interleaved, 0.20 / 0.26 with 1-D positions (each also changes the greedy tokens)."""
LOGPROB_TOL = 5e-3
"""Each generated token's logprob (measured within 1e-3; Qwen3-VL's within 7.2e-4). A decode at positions without
the images' delta changed the greedy tokens in three cases of four (Qwen3-VL's: both), and in the fourth 4 of its 5
logprobs past this."""
STEPS = 5


def png(size: tuple[int, int], seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def data(img: Image.Image) -> bytes:
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


ONE = [png((71, 45), 1)]  # 3 x 4 rows (min_pixels raises it)
TWO = [png((196, 308), 2), png((30, 97), 3)]  # 11 x 7 rows (partial windows), then 6 x 2


def chats(images: list[Image.Image]) -> tuple[list[dict], list[dict]]:
    """(hearth's OpenAI messages, the processor's typed ones): text, then each image with text after it."""
    ours, theirs = [{"type": "text", "text": "the capital"}], [{"type": "text", "text": "the capital"}]
    for i, img in enumerate(images):
        words = " of france is" if i == 0 else " and paris"
        ours += [{"type": "image_url", "image_url": {"url": url(data(img))}}, {"type": "text", "text": words}]
        theirs += [{"type": "image"}, {"type": "text", "text": words}]
    return [{"role": "user", "content": ours}], [{"role": "user", "content": theirs}]


def tiny_qwen_vl(d, variant: str):
    """(LM GGUF, mmproj GGUF, transformers' model of both, its (tokenizer, image processor, chat template)) of one
    tiny Qwen-VL written in folder d."""
    v = VARIANTS[variant]
    projector = v.projector
    dims = write_tiny_gguf(d / "lm.gguf", v.arch, vl_tokens=True, chat_template=v.template,
                           tied=False)  # tied: each step's argmax is the last token again
    # transformers' GGUF reader knows no qwen2vl: the same tokenizer in a one-layer qwen2 file
    (d / "tok").mkdir()
    tok_dir, tok_name, _ = tiny_dir(d / "tok", "qwen2", vl_tokens=True, layers=1)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir, gguf_file=tok_name)
    ids = dict(zip(QWEN_VL_TOKENS, tokenizer.convert_tokens_to_ids(list(QWEN_VL_TOKENS)), strict=True))
    tower = mmproj_factory.tiny_hf(projector, seed=1, lm_hidden=dims.hidden)  # random vision weights
    hf = v.hf(d / "lm.gguf", dims, tower.config.vision_config.to_dict(),
              image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
              vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    hf.model.visual.load_state_dict(tower.model.visual.state_dict())
    mmproj_factory.write_mmproj(d / "mmproj.gguf", projector, hf)
    return d / "lm.gguf", d / "mmproj.gguf", hf, (tokenizer, mmproj_factory.hf_processor(projector), v.template)


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request, tmp_path_factory):
    """(hearth's LLM on exact linears, transformers' model, its (tokenizer, image processor)) of one tiny Qwen-VL."""
    model, mmproj, hf, processor = tiny_qwen_vl(tmp_path_factory.mktemp(request.param), request.param)
    with use_linear_policy(exact=True):
        llm = LLM(str(model), mmproj=str(mmproj), max_model_len=256, progress=False)
    return llm, hf, processor


def processed(processor, typed: list[dict], images: list[Image.Image]) -> dict:
    """Qwen2VLProcessor's (Qwen3VLProcessor's) inputs (its class wants torchvision's video processor, which the
    venv lacks; this is its __call__ for images): the template rendered, each <|image_pad|> repeated
    grid.prod() / 4 times, the text tokenized, mm_token_type_ids 1 at image places."""
    tokenizer, image_processor, template = processor
    text = tokenizer.apply_chat_template(typed, chat_template=template, tokenize=False, add_generation_prompt=True)
    pixels = image_processor(images=images, return_tensors="pt")
    pieces = text.split("<|image_pad|>")
    assert len(pieces) == len(images) + 1
    counts = [int(g.prod()) // image_processor.merge_size ** 2 for g in pixels["image_grid_thw"]]
    text = "".join(p + "<|image_pad|>" * n for p, n in zip(pieces, counts + [0], strict=True))
    ids = tokenizer(text, return_tensors="pt").input_ids
    pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": (ids == pad).int(),
            **pixels}


def theirs(hf, processor, typed: list[dict], images: list[Image.Image]):
    """(prompt ids, the first step's logits [vocab], STEPS greedy tokens, each one's logprob) of transformers'
    model."""
    inputs = processed(processor, typed, images)
    with torch.no_grad():
        logits = hf(**inputs).logits[0, -1]
        out = hf.generate(**inputs, max_new_tokens=STEPS, do_sample=False, eos_token_id=None, pad_token_id=0,
                          output_scores=True, return_dict_in_generate=True)
    tokens = out.sequences[0, inputs["input_ids"].shape[1]:].tolist()
    logprobs = [torch.log_softmax(s[0], -1)[t].item() for s, t in zip(out.scores, tokens, strict=True)]
    return inputs["input_ids"][0].tolist(), logits, tokens, logprobs


@pytest.mark.parametrize("images", [ONE, TWO], ids=["one-image", "two-images"])
def test_chat_equals_transformers_through_its_processor(pair, images):
    llm, hf, processor = pair
    messages, typed = chats(images)
    their_ids, their_logits, their_tokens, their_logprobs = theirs(hf, processor, typed, images)
    ids = llm.encode_chat(messages)
    assert list(ids) == their_ids
    assert [m.grid for m in ids.media] and all(m.grid for m in ids.media)
    ours = runner_logits(llm, list(ids), list(ids.media))[-1]
    assert rel_err(ours, their_logits) < REL_TOL
    llm.engine.scheduler.kv.pool.reset_prefix_cache()  # each case from its first token (the other's blocks gone)
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=STEPS, ignore_eos=True, logprobs=1))[0].outputs[0]
    assert out.token_ids == their_tokens
    # each step's logprob: the decode's positions (index + the images' delta) as transformers' rope_deltas
    ours_lp = [lp[t] for lp, t in zip(out.logprobs, out.token_ids, strict=True)]
    assert ours_lp == pytest.approx(their_logprobs, abs=LOGPROB_TOL)
