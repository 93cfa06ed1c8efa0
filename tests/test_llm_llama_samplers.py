"""llama.cpp's samplers on a real model (SmolLM2-135M): DRY breaks a repetition the plain greedy answer makes,
its sequence breakers come from the model's own vocabulary, the penalty window reads only the last N tokens,
and with prompt-lookup speculation (whose drafts copy the repetition DRY penalizes) greedy output is token
for token the output without it; XTC's seeded sampling reproduces with speculation on."""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams

LINE = "one two three four five six seven eight nine ten."
COUNTING = f"{LINE} {LINE} {LINE} one two"
PROMPT = "Paris is the capital of France. Rome is the capital of Italy. Madrid is the capital of Spain. Berlin is the"
DRY = dict(dry_multiplier=2.0, dry_base=1.75, dry_allowed_length=2, dry_penalty_last_n=-1)


def greedy(llm, prompt: str, n: int = 16, **options) -> list[int]:
    return llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n, **options))[0].outputs[0].token_ids


# no prefix caching in the equality tests: a prompt's second run, a prefix hit, computes its tail in another chunk,
# and DRY's penalties leave near ties there (COUNTING's 10th token flips between two runs of one plain engine)
@pytest.fixture(scope="module")
def spec_llm(model_path):
    llm = LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, enable_prefix_caching=False,
              speculative_config={"method": "ngram", "num_speculative_tokens": 6})
    if llm.speculation_off:  # the torch tier: verify rows are not decode rows, so hearth keeps speculation off
        pytest.skip(llm.speculation_off)
    return llm


@pytest.fixture(scope="module")
def plain_llm(model_path):
    return LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, enable_prefix_caching=False)


def test_dry_breaks_the_repetition_plain_greedy_makes(smol_llm):
    tok = smol_llm.engine.tokenizer
    plain = tok.decode(greedy(smol_llm, COUNTING, 8))
    assert plain.startswith(" three four five")  # the prompt's count, copied
    dry = tok.decode(greedy(smol_llm, COUNTING, 8, **DRY))
    assert not dry.startswith(" three four five"), dry


def test_breakers_are_found_in_the_vocabulary(smol_llm):
    engine, tok = smol_llm.engine, smol_llm.engine.tokenizer
    found = engine.dry_breakers(SamplingParams(dry_multiplier=1.0))
    newline = tok.encode("\n", add_special_tokens=False)
    assert len(newline) == 1 and found[newline[0]] == [[]]  # a token holding a breaker is one
    assert all(found[t] == [[]] for t in range(engine.vocab_size) if b":" in tok.token_pieces()[t])
    # a breaker spanning tokens: " capital of" -> a head ending in its first bytes, and the rest as its tail
    spanning = engine.dry_breakers(SamplingParams(dry_multiplier=1.0, dry_sequence_breakers=[" capital of"]))
    capital, of = tok.encode(" capital of", add_special_tokens=False)
    assert [of] in spanning[capital]
    assert engine.dry_breakers(SamplingParams(dry_multiplier=1.0)) is found  # found once, then shared
    assert engine.dry_breakers(SamplingParams()) is None  # DRY off: none looked up


def test_the_penalty_window_reads_only_the_last_tokens(smol_llm):
    # a strong repetition penalty over the whole context forbids the count; over the last 2 tokens it allows
    # " three" after " one two" ... until a token of the last 2 comes again
    whole = greedy(smol_llm, COUNTING, 6, repetition_penalty=3.0, repeat_last_n=-1)
    window = greedy(smol_llm, COUNTING, 6, repetition_penalty=3.0, repeat_last_n=2)
    off = greedy(smol_llm, COUNTING, 6, repetition_penalty=3.0, repeat_last_n=0)
    assert off == greedy(smol_llm, COUNTING, 6)
    assert window != whole and window[:3] == off[:3]  # " three four five" are not among the last 2 tokens


@pytest.mark.parametrize("options", [DRY, {**DRY, "dry_sequence_breakers": []}, dict(repetition_penalty=1.5, repeat_last_n=8),
                                     dict(presence_penalty=1.0, frequency_penalty=0.5, repeat_last_n=-1),
                                     dict(top_n_sigma=1.0, xtc_probability=0.5)])
def test_speculation_is_lossless_with_them(plain_llm, spec_llm, options):
    """A verify row's history holds the drafts before it: DRY and the windows see a drafted repeat as plain
    decoding sees it generated (XTC and top-nσ do not move a greedy row)."""
    for prompt in (COUNTING, PROMPT):
        assert greedy(spec_llm, prompt, **options) == greedy(plain_llm, prompt, **options)
    assert spec_llm.engine.spec.stats.num_accepted_tokens > 0  # drafts were verified


def test_seeded_xtc_reproduces_with_speculation(plain_llm, spec_llm):
    """XTC takes no draw of its own (its coin is folded into the row's distribution): a seeded request repeats,
    with drafts verified by rejection sampling as without them; batched == alone at the sampler:
    tests/sample/test_llama_samplers_spec.py."""
    params = SamplingParams(temperature=0.8, max_tokens=16, seed=7, xtc_probability=0.5, xtc_threshold=0.1, **DRY)
    for llm in (plain_llm, spec_llm):
        first = llm.generate([COUNTING], params)[0].outputs[0].token_ids
        assert llm.generate([COUNTING], params)[0].outputs[0].token_ids == first


def test_mirostat_drafts_nothing_and_samples_as_without_speculation(plain_llm, spec_llm):
    """Its state moves with each sampled token's distribution, which a draft's row would not know: the scheduler
    gives such a request no drafts, so with speculation on it samples step by step, as a plain engine does."""
    params = SamplingParams(temperature=0.8, max_tokens=16, seed=3, mirostat=2, mirostat_tau=3.0)
    stats = spec_llm.engine.spec.stats
    drafted = stats.num_draft_tokens
    out = spec_llm.generate([COUNTING], params)[0].outputs[0].token_ids
    assert stats.num_draft_tokens == drafted  # the prompt's count would have been drafted
    assert out == plain_llm.generate([COUNTING], params)[0].outputs[0].token_ids
    assert plain_llm.engine.runner.mirostat == {}  # a finished request's state is dropped
