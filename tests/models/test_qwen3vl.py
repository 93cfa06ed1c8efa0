"""qwen3vl (Qwen3-VL's text model): interleaved M-RoPE and deepstack over image rows given as wide embeddings (a fake
encoder's fixed random rows [length, hidden * (1 + deepstack)]: the first part over the placeholders, the others
added after layers 0, 1), against transformers' Qwen3-VL text model fed the same inputs_embeds, deepstack embeds and
get_rope_index's positions; chunked prefill, the prefix cache and speculation change nothing; text alone is qwen3's,
bit for bit, on the native paths too."""

from __future__ import annotations

import re

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy

from tests.backends.test_media_embeds import FakeEncoder, assert_same, attach, rel_err, runner_logits
from tests.gguf_factory import write_tiny_gguf
from tests.hf_qwen2vl import rope_index
from tests.hf_qwen3vl import hf_logits, hf_qwen3_vl
from tests.models.qwen_vl_runs import (MEDIA, PROMPT, check_chunked_prefill_and_decode, check_image_and_text_batched,
                                       check_preempted_recompute, check_speculation_lossless,
                                       check_text_alone_bit_for_bit, generate, llm_with, prompt_ids, run)

REL_TOL = 1e-3  # exact linears, hearth's K/V in f16 (as qwen2vl's)
REL_TOL_FAST = 1e-2  # the fast paths round activations to bf16


def wide(dims) -> FakeEncoder:
    return FakeEncoder(dims.hidden * (1 + dims.deepstack))


def reference(hf, dims, ids, media=MEDIA, parts: int | None = None, positions=None) -> torch.Tensor:
    """transformers' logits: the first part of each image's rows over its placeholders, `parts` deepstack parts
    (all by default) added after the first layers, at get_rope_index's positions (or those given)."""
    h, parts = dims.hidden, dims.deepstack if parts is None else parts
    with torch.no_grad():
        x = hf.model.language_model.embed_tokens(torch.tensor(ids)).clone()
    mask = torch.zeros(len(ids), dtype=torch.bool)
    rows = []
    for m in media:
        rows.append(wide(dims).encode(m.pixels))
        x[m.offset:m.end] = rows[-1][:, :h]
        mask[m.offset:m.end] = True
    deep = [torch.cat([r[:, (i + 1) * h:(i + 2) * h] for r in rows]) for i in range(parts)] if rows and parts else None
    pos = rope_index(hf, len(ids), media) if positions is None else positions
    return hf_logits(hf, x, pos, mask if deep else None, deep)


def llm_of(path, dims, **kw) -> LLM:
    return llm_with(path, wide(dims), **kw)


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    """(LLM on exact linears over an f32 file, transformers' Qwen3-VL of it, dims)."""
    path = tmp_path_factory.mktemp("qwen3vl") / "tiny.gguf"
    dims = write_tiny_gguf(path, "qwen3vl")
    with use_linear_policy(exact=True):
        llm = llm_of(path, dims)
    return llm, hf_qwen3_vl(path, dims), dims


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    """(LLM on the tier's fast paths over a Q8_0 file, transformers' Qwen3-VL of it, dims, the file's path)."""
    path = tmp_path_factory.mktemp("qwen3vl-q8") / "tiny.gguf"
    dims = write_tiny_gguf(path, "qwen3vl", qtype="Q8_0")
    return llm_of(path, dims), hf_qwen3_vl(path, dims), dims, path


def test_logits_equal_transformers_with_deepstack_and_interleaved_positions(exact):
    llm, hf, dims = exact
    ids = prompt_ids()
    ours = runner_logits(llm, ids, MEDIA)
    assert rel_err(ours, reference(hf, dims, ids)) < REL_TOL
    # teeth: fewer deepstack parts, or 1-D positions for the image rows, move every row from the first image on
    flat = torch.arange(len(ids)).expand(3, 1, -1)
    for wrong in (reference(hf, dims, ids, parts=0), reference(hf, dims, ids, parts=1),
                  reference(hf, dims, ids, positions=flat)):
        assert rel_err(ours[3:], wrong[3:]) > 1e-2
        assert rel_err(ours[:3], wrong[:3]) < REL_TOL  # before the first image: the same


def test_chunked_prefill_and_decode_follow_transformers(exact):
    """Every budget cuts the images (their deepstack parts with them) elsewhere; each generated token's logprobs are
    transformers' over the prompt and the tokens before it."""
    llm, hf, dims = exact
    check_chunked_prefill_and_decode(llm, lambda ids: reference(hf, dims, ids))


def test_a_prefix_cache_hit_is_the_miss(exact):
    llm, _, _ = exact
    first = generate(llm)
    again = run(llm)
    assert again[2] == 28 and again[0] == first[0]  # every full block but the last token's
    assert_same(again, first)


def test_a_step_with_image_rows_beside_a_text_only_sequence_computes_each_as_alone(exact):
    """The image rows' deepstack parts land at their batch rows only: the other sequence's text is untouched."""
    check_image_and_text_batched(exact[0], text_first=True)


def test_preempted_requests_recompute_their_images_with_their_deepstack_parts(exact):
    """Three requests with their own images in a cache too small for all: the preempted ones recompute their
    prompts (each image's rows, all parts, from the encoded cache or again) and end as each alone."""
    llm, _, dims = exact
    check_preempted_recompute(llm, lambda p, **kw: llm_of(p, dims, **kw))


@pytest.mark.parametrize("length", [30, 80], ids=["decode-sized", "prefill-sized"])
def test_steps_with_image_rows_leave_the_fused_stack_and_follow_transformers(fast, length, monkeypatch):
    """The fused stack's one call cannot add between layers: a step with deepstack rows runs layer by layer (each
    layer's own fused ops), and its logits are transformers'."""
    llm, hf, dims, _ = fast
    ids = prompt_ids(PROMPT * 3)[:length]
    stack, calls = llm.engine.runner.model.stack, []
    if stack is not None:
        monkeypatch.setattr(stack, "run", lambda *a: calls.append(a) or (0, a[0]))
    ours = runner_logits(llm, ids, MEDIA)
    assert not calls
    assert rel_err(ours, reference(hf, dims, ids)) < REL_TOL_FAST
    assert rel_err(ours[3:], reference(hf, dims, ids, parts=0)[3:]) > 5 * REL_TOL_FAST


def test_layer_by_layer_is_the_stacks_bits(fast, monkeypatch):
    """What keeps the fallback exact: rows the fused stack computes come out the same layer by layer (so a text
    sequence batched beside image rows, or a draft verified there, is the decode it would be in any step)."""
    llm, _, _, _ = fast
    model = llm.engine.runner.model
    for length in (1, 4, 30, 80):
        ids = (PROMPT * 3)[:length]
        want = runner_logits(llm, ids, [])
        with monkeypatch.context() as m:
            m.setattr(model, "stack", None)
            assert torch.equal(runner_logits(llm, ids, []), want)


@pytest.mark.parametrize("spec", ["ngram", "draft", "draft-tree"])
def test_speculation_over_a_prompt_with_images_is_lossless(fast, spec):
    llm, _, dims, path = fast
    check_speculation_lossless(llm, lambda p, **kw: llm_of(p, dims, **kw), path, spec)


def test_text_alone_is_qwen3_bit_for_bit(fast, tmp_path):
    """The same weights as a qwen3 file: equal logits on the fused decode stack and the fused prefill, and equal
    greedy tokens and logprobs with n-gram speculation."""
    llm, _, dims, _ = fast
    check_text_alone_bit_for_bit(llm, lambda p, **kw: llm_of(p, dims, **kw), dims, "qwen3",
                                 ("rope_sections", "deepstack"), tmp_path)


def test_rows_without_their_deepstack_parts_end_their_request_with_why(exact):
    """An encoder making rows of the LM's width alone (another model's mmproj) fails the request by name, not
    into the model."""
    _, _, dims = exact
    with use_linear_policy(exact=True):
        llm = llm_of(exact[0].config.model, dims)
    attach(llm, FakeEncoder(dims.hidden))
    llm.engine.add_request(prompt_ids(), SamplingParams(max_tokens=2), media=MEDIA)
    outs = []
    for _ in range(50):  # the encode runs beside the steps: its failure comes in a step or a few
        outs += llm.engine.step()
        if outs:
            break
    assert len(outs) == 1 and outs[0].finished and outs[0].finish_reason == "abort"
    # whichever of its images the encoder reaches first names the widths
    assert re.search(rf"made rows \((\d+), {dims.hidden}\) for an image of \1 rows; the model takes rows "
                     rf"{3 * dims.hidden} wide", str(outs[0].error)), outs[0].error


@pytest.mark.parametrize("dims,why", [
    (dict(deepstack=3), r"qwen3vl.n_deepstack_layers 3: hearth adds deepstack parts after layers 0 .. 1 of its 3"),
    (dict(rope_sections=(6, 5, 5, 2)), r"rope.dimension_sections \[6, 5, 5, 2\]: hearth runs three sections"),
    (dict(rope_sections=()), "metadata key qwen3vl.rope.dimension_sections is missing"),
])
def test_files_hearth_would_not_run_as_qwen3_vl_are_refused(tmp_path, dims, why):
    from hearth.errors import ModelLoadError
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.models.registry import model_config

    write_tiny_gguf(tmp_path / "bad.gguf", "qwen3vl", **dims)
    with pytest.raises(ModelLoadError, match=why):
        model_config(GGUFFile(tmp_path / "bad.gguf"))
