"""What the qwen2vl and qwen3vl tests share: the prompt with two images, an LLM with a fake encoder attached, greedy
runs through the engine, and the checks both models pass the same way (chunked prefill, batching, preemption,
speculation, text alone as the text-only architecture)."""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.linear import use_linear_policy
from hearth.media.inputs import MediaInput

from tests.backends.test_media_embeds import assert_same, attach, runner_logits
from tests.gguf_factory import write_tiny_gguf

PROMPT = [5 + (7 * i) % 300 for i in range(30)]
PLACEHOLDER = 3
MEDIA = [MediaInput(3, 6, b"a", (1, 6), grid=(2, 3)),  # rows 3..8, then text from position 3 + 3
         MediaInput(12, 8, b"b", (2, 8), grid=(4, 2))]  # rows 12..19: cut by 4-token blocks
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "cost_aware": False}


def prompt_ids(ids=PROMPT, media=MEDIA) -> list[int]:
    ids = list(ids)
    for m in media:
        ids[m.offset:m.end] = [PLACEHOLDER] * m.length
    return ids


def llm_with(path, encoder, **kw) -> LLM:
    llm = LLM(str(path), max_model_len=128, block_size=4, progress=False, max_num_batched_tokens=128, **kw)
    attach(llm, encoder)
    return llm


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


def step_all(engine) -> dict:
    """request id -> (tokens, logprobs) of every request the engine holds, stepped to the end together."""
    got = {}
    while engine.has_unfinished():
        for o in engine.step():
            tokens, logprobs = got.setdefault(o.request_id, ([], []))
            tokens.extend(o.new_token_ids)
            logprobs.extend(o.new_logprobs)
    return got


def check_chunked_prefill_and_decode(llm: LLM, reference) -> None:
    """Each generated token's logprobs are reference(ids)'s (transformers' logits) over the prompt and the tokens
    before it; every budget (cutting the images elsewhere) gives the same run."""
    whole = generate(llm)
    ids = prompt_ids() + whole[0][:-1]
    ref = torch.log_softmax(reference(ids)[len(PROMPT) - 1:], -1)
    for row, lp in zip(ref, whole[1]):
        # logprobs down to -40 here: f16 K/V puts them ~5e-3 off (a decode at its index, not index + delta: 0.1+)
        assert int(row.argmax()) in lp and all(abs(v - row[t].item()) < 2e-2 for t, v in lp.items())
    for budget in (3, 5, 8, 11):  # logprobs to -42: f32 sums in other orders ~4e-4 apart (a cut image's rows
        assert_same(generate(llm, budget=budget), whole, tol=2e-3)  # at the wrong positions: 0.1+)


def check_image_and_text_batched(llm: LLM, text_first: bool) -> None:
    """A request with images and a text-only one in the same steps (added in either order) each end as alone."""
    text = PROMPT[::-1]
    want = [generate(llm), generate(llm, [], ids=text)]
    engine = llm.engine
    engine.scheduler.kv.pool.reset_prefix_cache()
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=3)
    adds = [lambda: engine.add_request(prompt_ids(), params, media=MEDIA), lambda: engine.add_request(text, params)]
    if text_first:
        adds, want = adds[::-1], want[::-1]
    rids = [add() for add in adds]
    got = step_all(engine)
    for rid, w in zip(rids, want):
        assert_same(got[rid], w[:2], tol=2e-3)


def check_preempted_recompute(llm: LLM, llm_of) -> None:
    """Three requests with their own images in a cache too small for all (llm_of(path, **kw): a second LLM like
    `llm`): some are preempted, and each ends as it would alone."""
    media = [[MediaInput(3, 6, bytes([i]), (10 + i, 6), grid=(2, 3)),
              MediaInput(12, 8, bytes([9, i]), (20 + i, 8), grid=(4, 2))] for i in range(3)]
    want = [generate(llm, m, max_tokens=12) for m in media]
    with use_linear_policy(exact=True):
        small = llm_of(llm.config.model, num_kv_blocks=20, max_num_seqs=3)  # 80 tokens for 3 x 42
    engine = small.engine
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=3)
    rids = [engine.add_request(prompt_ids(), params, media=m) for m in media]
    got = step_all(engine)
    assert engine.scheduler.num_preemptions > 0
    for rid, w in zip(rids, want):
        assert_same(got[rid], w, tol=2e-3)


def check_speculation_lossless(llm: LLM, llm_of, path, spec: str) -> None:
    """Greedy output over a prompt with images is the same with `spec` (ngram, draft, draft-tree) as without."""
    config = dict(NGRAM) if spec == "ngram" else {"method": "draft", "model": str(path), "num_speculative_tokens": 3,
                                                   "cost_aware": False}  # drafts every step, whatever they would pay
    if spec == "draft-tree":
        config["tree_budget"] = 8
    spec_llm = llm_of(path, speculative_config=config)
    if spec_llm.speculation_off:  # the torch tier (HEARTH_NATIVE=0): verify rows are not decode rows
        pytest.skip(spec_llm.speculation_off)
    ids = prompt_ids() * 2  # text that repeats: the n-gram proposer finds drafts
    want = generate(llm, ids=ids, max_tokens=24)
    got = generate(spec_llm, ids=ids, max_tokens=24)
    assert got[0] == want[0]
    assert spec_llm.engine.spec.stats.num_draft_tokens > 0


def check_text_alone_bit_for_bit(llm: LLM, llm_of, dims, arch: str, drop: tuple[str, ...], tmp_path) -> None:
    """The same weights as an `arch` file (dims less the `drop` fields): equal logits on the fused decode stack and
    the fused prefill, and equal greedy tokens and logprobs with n-gram speculation."""
    fields = {k: v for k, v in asdict(dims).items() if k not in drop}
    other = tmp_path / f"{arch}.gguf"
    write_tiny_gguf(other, arch, qtype="Q8_0", **fields)
    text_llm = llm_of(other)
    for length in (30, 80):
        ids = (PROMPT * 3)[:length]
        assert torch.equal(runner_logits(llm, ids, []), runner_logits(text_llm, ids, []))
    outs = [generate(llm_of(p, speculative_config=NGRAM), [], ids=PROMPT * 2, max_tokens=16)
            for p in (llm.config.model, other)]
    assert outs[0] == outs[1]
