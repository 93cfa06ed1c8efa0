"""qwen2vl (Qwen2-VL's and Qwen2.5-VL's text model): M-RoPE over image rows given as embeddings (a fake encoder,
fixed random rows), against transformers' models fed the same inputs_embeds and get_rope_index's positions;
chunked prefill, the prefix cache, speculation and n > 1 change nothing; text alone is qwen2's, bit for bit,
on the native paths too (t = h = w is ordinary rope)."""

from __future__ import annotations

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from hearth.media.inputs import MediaInput

from tests.backends.test_media_embeds import FakeEncoder, assert_same, rel_err, runner_logits
from tests.gguf_factory import write_tiny_gguf
from tests.hf_qwen2vl import VARIANTS, hf_logits, hf_qwen_vl, rope_index
from tests.models.qwen_vl_runs import (MEDIA, PROMPT, check_chunked_prefill_and_decode, check_image_and_text_batched,
                                       check_preempted_recompute, check_speculation_lossless,
                                       check_text_alone_bit_for_bit, generate, llm_with, prompt_ids, run)

REL_TOL = 1e-3  # exact linears, hearth's K/V in f16 (measured ~1e-4)
REL_TOL_FAST = 1e-2  # the fast paths round activations to bf16: measured 5e-3 (image rows at t alone: 4e-2)


def embeds(hf, dims, ids: list[int], media) -> torch.Tensor:
    """[T, hidden]: the token embeddings with the fake encoder's rows over each image's."""
    with torch.no_grad():
        x = hf.model.language_model.embed_tokens(torch.tensor(ids)).clone()
    for m in media:
        x[m.offset:m.end] = FakeEncoder(dims.hidden).encode(m.pixels)
    return x


def reference(hf, dims, ids, media=MEDIA) -> torch.Tensor:
    return hf_logits(hf, embeds(hf, dims, ids, media), rope_index(hf, len(ids), media))


def llm_of(path, dims, **kw) -> LLM:
    return llm_with(path, FakeEncoder(dims.hidden), **kw)


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    """(LLM on exact linears over an f32 file, {variant: transformers' model of it}, dims)."""
    path = tmp_path_factory.mktemp("qwen2vl") / "tiny.gguf"
    dims = write_tiny_gguf(path, "qwen2vl")
    with use_linear_policy(exact=True):
        llm = llm_of(path, dims)
    return llm, {v: hf_qwen_vl(path, v, dims) for v in VARIANTS}, dims


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    """(LLM on the tier's fast paths over a Q8_0 file: fused C++ layers and stack, native attention;
    transformers' Qwen2-VL of it, dims, the file's path)."""
    path = tmp_path_factory.mktemp("qwen2vl-q8") / "tiny.gguf"
    dims = write_tiny_gguf(path, "qwen2vl", qtype="Q8_0")
    return llm_of(path, dims), hf_qwen_vl(path, "qwen2-vl", dims), dims, path


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_equal_transformers_on_the_same_embeddings_and_positions(exact, variant):
    llm, hfs, dims = exact
    hf, ids = hfs[variant], prompt_ids()
    ours = runner_logits(llm, ids, MEDIA)
    assert rel_err(ours, reference(hf, dims, ids)) < REL_TOL
    # teeth: 1-D positions for the image rows, or the text after an image at its index (no delta), move them
    x, pos = embeds(hf, dims, ids, MEDIA), rope_index(hf, len(ids), MEDIA)
    flat = hf_logits(hf, x, torch.arange(len(ids)).expand(3, 1, -1))
    no_delta = pos.clone()
    text = torch.ones(len(ids), dtype=torch.bool)
    for m in MEDIA:
        text[m.offset:m.end] = False
    no_delta[:, 0, text] = torch.arange(len(ids))[text]
    for wrong in (flat, hf_logits(hf, x, no_delta)):
        assert rel_err(ours[3:], wrong[3:]) > 1e-2
        assert rel_err(ours[:3], wrong[:3]) < REL_TOL  # before the first image: the same


def test_chunked_prefill_and_decode_follow_transformers(exact):
    """Every budget cuts the images elsewhere; each generated token's logprobs are transformers' over the prompt
    and the tokens before it (the decode's positions: index + the images' delta)."""
    llm, hfs, dims = exact
    check_chunked_prefill_and_decode(llm, lambda ids: reference(hfs["qwen2-vl"], dims, ids))


def test_a_prefix_cache_hit_is_the_miss_and_keys_the_grid(exact):
    llm, _, _ = exact
    first = generate(llm)
    again = run(llm)
    assert again[2] == 28 and again[0] == first[0]  # every full block but the last token's
    assert_same(again, first)
    other = [MEDIA[0], MediaInput(12, 8, b"b", (2, 8), grid=(2, 4))]  # the same rows laid out otherwise
    moved = run(llm, other)
    assert moved[2] == 12  # the blocks before the second image only
    assert_same(moved, generate(llm, other))
    assert moved[1] != first[1]


def test_n_sequences_of_one_prompt_each_decode_as_one(exact):
    llm, _, _ = exact
    want = generate(llm)[0]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, n=2)
    out = llm.generate({"prompt_token_ids": prompt_ids(), "media": MEDIA}, params)[0]
    assert [o.token_ids for o in out.outputs] == [want, want]


def test_a_step_with_image_rows_beside_text_only_sequences_computes_each_as_alone(exact):
    """Batched: one request's image rows make the step's positions [3, T]; the other's text rows take three equal
    ones (and its decode the 1-D path at its own positions): each ends as it would alone."""
    check_image_and_text_batched(exact[0], text_first=False)


def test_preempted_requests_recompute_their_images_as_they_were(exact):
    """Three requests with their own images in a cache too small for all: the preempted ones recompute their
    prompts (their positions from the indices again) and end as each alone."""
    llm, _, dims = exact
    check_preempted_recompute(llm, lambda p, **kw: llm_of(p, dims, **kw))


@pytest.mark.parametrize("length", [30, 80], ids=["decode-sized", "prefill-sized"])
def test_the_fast_paths_rotate_image_rows_by_their_grid(fast, length, monkeypatch):
    """A short step runs the whole stack in one C++ call, a long one the fused prefill (where the CPU has it):
    both read the M-RoPE tables (no step aside)."""
    llm, hf, dims, _ = fast
    ids = prompt_ids(PROMPT * 3)[:length]
    stack, layers = llm.engine.runner.model.stack, []
    if stack is not None:  # the native tiers: how many layers its one call ran
        real = stack.run
        monkeypatch.setattr(stack, "run", lambda *a: (out := real(*a), layers.append(out[0]))[0])
    ours = runner_logits(llm, ids, MEDIA)
    if stack is not None and length < stack.min_rows:  # a prefill-sized step takes it on AMX tiles only
        assert layers == [dims.layers]
    assert rel_err(ours, reference(hf, dims, ids)) < REL_TOL_FAST
    x, pos = embeds(hf, dims, ids, MEDIA), rope_index(hf, length, MEDIA)
    flat = hf_logits(hf, x, torch.arange(length).expand(3, 1, -1))
    t_alone = hf_logits(hf, x, pos[:1].expand(3, -1, -1))  # the h and w sections turned as t
    assert rel_err(ours[3:], flat[3:]) > 0.05 and rel_err(ours, t_alone) > 2 * REL_TOL_FAST


@pytest.mark.parametrize("spec", ["ngram", "draft", "draft-tree"])
def test_speculation_over_a_prompt_with_images_is_lossless(fast, spec):
    """Verify rows, a tree's nodes at their depths (and a draft model's catch-up, at its own positions) after
    images: greedy output unchanged."""
    llm, _, dims, path = fast
    check_speculation_lossless(llm, lambda p, **kw: llm_of(p, dims, **kw), path, spec)


def test_text_alone_is_qwen2_bit_for_bit(fast, tmp_path):
    """The same weights as a qwen2 file: equal logits on the fused decode stack and the fused prefill, and equal
    greedy tokens and logprobs with n-gram speculation."""
    llm, _, dims, _ = fast
    check_text_alone_bit_for_bit(llm, lambda p, **kw: llm_of(p, dims, **kw), dims, "qwen2", ("rope_sections",),
                                 tmp_path)


@pytest.mark.parametrize("sections,why", [
    ((4, 6, 4, 0), r"rope.dimension_sections \[4, 6, 4, 0\]: hearth runs three sections \(t, h, w\) covering the 16"),
    ((4, 6, 4, 2), r"\[4, 6, 4, 2\]"),  # a 4th component (Qwen3-VL's layout): text would not rotate as qwen2
    ((), "metadata key qwen2vl.rope.dimension_sections is missing"),
])
def test_sections_that_would_not_rotate_text_as_qwen2_are_refused(tmp_path, sections, why):
    from hearth.errors import ModelLoadError
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.models.registry import model_config

    write_tiny_gguf(tmp_path / "bad.gguf", "qwen2vl", rope_sections=sections)
    with pytest.raises(ModelLoadError, match=why):
        model_config(GGUFFile(tmp_path / "bad.gguf"))
