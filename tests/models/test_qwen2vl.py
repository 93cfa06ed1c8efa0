"""qwen2vl (Qwen2-VL's and Qwen2.5-VL's text model): M-RoPE over image rows given as embeddings (a fake encoder,
fixed random rows), against transformers' models fed the same inputs_embeds and get_rope_index's positions;
chunked prefill, the prefix cache, speculation and n > 1 change nothing; text alone is qwen2's, bit for bit,
on the native paths too (t = h = w is ordinary rope)."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from hearth.media.inputs import MediaInput

from tests.backends.test_media_embeds import FakeEncoder, assert_same, attach, rel_err, runner_logits
from tests.gguf_factory import write_tiny_gguf
from tests.hf_qwen2vl import VARIANTS, hf_logits, hf_qwen_vl, rope_index

PROMPT = [5 + (7 * i) % 300 for i in range(30)]
PLACEHOLDER = 3
MEDIA = [MediaInput(3, 6, b"a", (1, 6), grid=(2, 3)),  # rows 3..8, then text from position 3 + 3
         MediaInput(12, 8, b"b", (2, 8), grid=(4, 2))]  # rows 12..19: cut by 4-token blocks
REL_TOL = 1e-3  # exact linears, hearth's K/V in f16 (measured ~1e-4)
REL_TOL_FAST = 1e-2  # the fast paths round activations to bf16: measured 5e-3 (image rows at t alone: 4e-2)


def prompt_ids(ids=PROMPT, media=MEDIA) -> list[int]:
    ids = list(ids)
    for m in media:
        ids[m.offset:m.end] = [PLACEHOLDER] * m.length
    return ids


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
    llm = LLM(str(path), max_model_len=128, block_size=4, progress=False, max_num_batched_tokens=128, **kw)
    attach(llm, FakeEncoder(dims.hidden))
    return llm


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


def generate(llm: LLM, media=MEDIA, budget: int = 128, ids=None, **kw):
    """(greedy tokens, their logprobs, cached prompt tokens) through the engine, nothing cached before."""
    llm.engine.scheduler.kv.pool.reset_prefix_cache()
    return run(llm, media, budget, ids, **kw)


def run(llm: LLM, media=MEDIA, budget: int = 128, ids=None, **kw):
    engine = llm.engine
    engine.scheduler.max_num_batched_tokens = budget
    try:
        params = SamplingParams(**{"temperature": 0, "max_tokens": 6, "ignore_eos": True, "logprobs": 3, **kw})
        engine.add_request(ids or prompt_ids(), params, media=media)
        tokens, logprobs, cached = [], [], None
        while engine.has_unfinished():
            for o in engine.step():
                tokens += o.new_token_ids
                logprobs += o.new_logprobs
                cached = o.num_cached_tokens
        return tokens, logprobs, cached
    finally:
        engine.scheduler.max_num_batched_tokens = 128


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
    whole = generate(llm)
    ids = prompt_ids() + whole[0][:-1]
    ref = torch.log_softmax(reference(hfs["qwen2-vl"], dims, ids)[len(PROMPT) - 1:], -1)
    for row, lp in zip(ref, whole[1]):
        # logprobs down to -40 here: f16 K/V puts them ~5e-3 off (a decode at its index, not index + delta: 0.1+)
        assert int(row.argmax()) in lp and all(abs(v - row[t].item()) < 2e-2 for t, v in lp.items())
    for budget in (3, 5, 8, 11):  # logprobs to -42: f32 sums in other orders ~4e-4 apart (a cut image's rows
        assert_same(generate(llm, budget=budget), whole, tol=2e-3)  # at the wrong positions: 0.1+)


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
    llm, _, _ = exact
    text = PROMPT[::-1]
    want = [generate(llm), generate(llm, [], ids=text)]
    engine = llm.engine
    engine.scheduler.kv.pool.reset_prefix_cache()
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=3)
    rids = [engine.add_request(prompt_ids(), params, media=MEDIA), engine.add_request(text, params)]
    got = {rid: ([], []) for rid in rids}
    while engine.has_unfinished():
        for o in engine.step():
            got[o.request_id][0].extend(o.new_token_ids)
            got[o.request_id][1].extend(o.new_logprobs)
    for rid, w in zip(rids, want):
        assert_same(got[rid], w[:2], tol=2e-3)


def test_preempted_requests_recompute_their_images_as_they_were(exact):
    """Three requests with their own images in a cache too small for all: the preempted ones recompute their
    prompts (their positions from the indices again) and end as each alone."""
    llm, _, dims = exact
    media = [[MediaInput(3, 6, bytes([i]), (10 + i, 6), grid=(2, 3)),
              MediaInput(12, 8, bytes([9, i]), (20 + i, 8), grid=(4, 2))] for i in range(3)]
    want = [generate(llm, m, max_tokens=12) for m in media]
    with use_linear_policy(exact=True):
        small = llm_of(llm.config.model, dims, num_kv_blocks=20, max_num_seqs=3)  # 80 tokens for 3 x 42
    engine = small.engine
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=3)
    rids = [engine.add_request(prompt_ids(), params, media=m) for m in media]
    got = {rid: ([], []) for rid in rids}
    while engine.has_unfinished():
        for o in engine.step():
            got[o.request_id][0].extend(o.new_token_ids)
            got[o.request_id][1].extend(o.new_logprobs)
    assert engine.scheduler.num_preemptions > 0
    for rid, w in zip(rids, want):
        assert_same(got[rid], w, tol=2e-3)


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
    config = ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1} if spec == "ngram" else
              {"method": "draft", "model": str(path), "num_speculative_tokens": 3})
    config["cost_aware"] = False  # drafts every step, whatever they would pay on this machine
    if spec == "draft-tree":
        config["tree_budget"] = 8
    spec_llm = llm_of(path, dims, speculative_config=config)
    if spec_llm.speculation_off:  # the torch tier (HEARTH_NATIVE=0): verify rows are not decode rows
        pytest.skip(spec_llm.speculation_off)
    ids = prompt_ids() * 2  # text that repeats: the n-gram proposer finds drafts
    want = generate(llm, ids=ids, max_tokens=24)
    got = generate(spec_llm, ids=ids, max_tokens=24)
    assert got[0] == want[0]
    assert spec_llm.engine.spec.stats.num_draft_tokens > 0


def test_text_alone_is_qwen2_bit_for_bit(fast, tmp_path):
    """The same weights as a qwen2 file: equal logits on the fused decode stack and the fused prefill, and equal
    greedy tokens and logprobs with n-gram speculation."""
    llm, _, dims, _ = fast
    fields = {k: v for k, v in asdict(dims).items() if k != "rope_sections"}
    write_tiny_gguf(tmp_path / "qwen2.gguf", "qwen2", qtype="Q8_0", **fields)
    qwen2 = llm_of(tmp_path / "qwen2.gguf", dims)
    for length in (30, 80):
        ids = (PROMPT * 3)[:length]
        assert torch.equal(runner_logits(llm, ids, []), runner_logits(qwen2, ids, []))
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "cost_aware": False}
    outs = [generate(llm_of(p, dims, speculative_config=config), [], ids=PROMPT * 2, max_tokens=16)
            for p in (llm.config.model, tmp_path / "qwen2.gguf")]
    assert outs[0] == outs[1]


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
