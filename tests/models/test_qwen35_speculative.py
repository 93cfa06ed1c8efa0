"""Speculative decoding on qwen35 (Gated DeltaNet layers): a verify step's drafting sequences run their DeltaNet rows
token by token and record them (hearth.layers.delta_log), and once the target has accepted n drafts the state is
rebuilt after the next token and those n only. Greedy with drafts is greedy without them, token for token, with
drafts both accepted and rejected (so the equality is not vacuous), on the native kernels (verify rows computed as
decode rows; the torch tier keeps speculation off: the native_speculation fixture)."""

from __future__ import annotations

import logging

import pytest
import torch

from hearth import LLM, SamplingParams
from hearth.layers.delta_log import VerifyLog
from tests.models.test_logits_vs_transformers import prompt
from tests.qwen35_factory import DIMS, hf_qwen35, write_qwen35_gguf

pytestmark = pytest.mark.usefixtures("native_speculation")

# a few favoured tokens: the random model's text then repeats its n-grams, so lookups are accepted at times
FAVOURED = {t: 30.0 for t in (3, 7, 11, 19)}
GREEDY = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True, logit_bias=FAVOURED)
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "cost_aware": False, "prompt_lookup_min": 1}


@pytest.fixture(scope="module")
def q8(tmp_path_factory):
    """A tiny random qwen35 with Q8_0 matrices (the native kernels' linears, as llama-quantize leaves them)."""
    return write_qwen35_gguf(tmp_path_factory.mktemp("qwen35spec") / "tiny-qwen35-q8.gguf", hf_qwen35(), qtype="Q8_0")


@pytest.fixture(scope="module")
def prompts():
    return [prompt(DIMS.vocab, n=8, seed=s) for s in (5, 6)]


@pytest.fixture(scope="module")
def plain(q8, prompts):
    """The plain engine's greedy tokens for the prompts."""
    return _generate(LLM(str(q8), progress=False), prompts)


def _generate(llm: LLM, prompts, params=GREEDY) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in prompts], params)]


def _speculative(q8, spec, **kw) -> LLM:
    llm = LLM(str(q8), progress=False, speculative_config=spec, **kw)
    assert not llm.speculation_off, llm.speculation_off
    return llm


def _drafted_accepted(llm: LLM) -> tuple[int, int]:
    stats = llm.engine.spec.stats
    return stats.num_draft_tokens, stats.num_accepted_tokens


def test_ngram_drafts_are_lossless(q8, prompts, plain):
    """Some drafts accepted, some rejected: each rejection rolls the state back to the accepted rows."""
    llm = _speculative(q8, NGRAM)
    assert _generate(llm, prompts) == plain
    drafted, accepted = _drafted_accepted(llm)
    assert 0 < accepted < drafted, (drafted, accepted)
    assert llm.runner.forced_drafts  # a grammar's forced tokens are drafted too


def test_without_the_rollback_the_text_changes(q8, prompts, plain, monkeypatch):
    """The check above fails where the state keeps the rejected drafts' rows (the rebuild skipped)."""
    monkeypatch.setattr(VerifyLog, "rebuild", lambda *a: None)
    assert _generate(_speculative(q8, NGRAM), prompts) != plain


def test_suffix_drafts_are_lossless_as_chains(q8, prompts, plain):
    """The suffix proposer's trees are verified as their top-1 chain (Scheduler.set_drafts)."""
    llm = _speculative(q8, {"method": "suffix", "num_speculative_tokens": 4, "cost_aware": False})
    assert _generate(llm, prompts) == plain
    drafted, accepted = _drafted_accepted(llm)
    assert 0 < accepted < drafted, (drafted, accepted)


def test_a_tree_budget_is_verified_as_chains_with_a_line(q8, prompts, plain, caplog):
    with caplog.at_level(logging.WARNING, logger="hearth"):
        llm = _speculative(q8, {**NGRAM, "tree_budget": 8, "prompt_lookup_max": 3})
    lines = [r.getMessage() for r in caplog.records]
    assert ("speculative_config.tree_budget is ignored for a model with recurrent layers (qwen35): its "
            "drafts are verified as chains (the recurrent state follows one path)") in lines
    assert _generate(llm, prompts) == plain
    assert _drafted_accepted(llm)[1] > 0


def test_preempted_under_speculation(q8, prompts, plain):
    """10 blocks of 8 tokens cannot hold both sequences with their drafts: the newer is preempted (its slot freed,
    zeroed when it is recomputed) while the older's verify steps go on, token for token the plain engine's. (The
    recomputed one is held to its length only: a prompt recomputed from position 0 is a prefill, whose arithmetic
    is not a decode row's, with or without drafts.)"""
    llm = _speculative(q8, NGRAM, num_kv_blocks=10, block_size=8)
    got = _generate(llm, prompts)
    assert got[0] == plain[0] and len(got[1]) == len(plain[1])
    assert llm.engine.scheduler.num_preemptions > 0 and _drafted_accepted(llm)[1] > 0
    assert sorted(llm.engine.scheduler.kv.free_states) == list(range(llm.config.max_num_seqs))


def test_seeded_sampling_with_drafts_is_reproducible(q8, prompts):
    params = SamplingParams(temperature=0.8, seed=7, max_tokens=40, ignore_eos=True, logit_bias=FAVOURED)
    llm = _speculative(q8, NGRAM)
    first = _generate(llm, prompts, params)
    assert _generate(_speculative(q8, NGRAM), prompts, params) == first
    assert _drafted_accepted(llm)[1] > 0


def test_a_snapshot_after_a_verify_step_holds_no_draft(q8, prompts):
    """A decode snapshot (the answer's last full block, for the next turn) saved in a verify step is the state after
    its next token alone: the next turn hits it and continues as an engine without the cache. (The target drafting
    for itself: every draft accepted, so a snapshot copied from the slot after the step would hold 4 more tokens.)"""
    ids = prompts[0]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    llm = _speculative(q8, _self_draft(q8), block_size=8)
    first = _generate(llm, [ids], params)[0]
    turn = ids + first  # the conversation so far, then more
    again = llm.generate({"prompt_token_ids": turn}, params)[0]
    assert again.num_cached_tokens > len(ids) + 8  # a block of the answer's hit: its snapshot was a verify step's
    cold = LLM(str(q8), progress=False, enable_prefix_caching=False)
    # the first tokens: a hit's K/V and state were computed by decode rows, a cold prompt's by prefill chunks, so
    # rounding (~0.02-0.07 in a logprob on this tiny random model, with or without drafts) may flip a later near tie;
    # a snapshot holding 4 more tokens is another state from the first token on
    assert list(again.outputs[0].token_ids)[:8] == _generate(cold, [turn], params)[0][:8]


def _self_draft(q8) -> dict:
    return {"method": "draft", "model": str(q8), "num_speculative_tokens": 4, "cost_aware": False}


def test_the_target_as_its_own_draft_is_lossless_and_accepted(q8, prompts):
    """A recurrent draft (hearth.runner.draft_states): its state follows the committed tokens, so drafting for
    itself nearly every draft is accepted."""
    params = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    want = _generate(LLM(str(q8), progress=False), prompts, params)
    llm = _speculative(q8, _self_draft(q8))
    assert _generate(llm, prompts, params) == want
    drafted, accepted = _drafted_accepted(llm)
    assert drafted >= 40 and accepted >= 0.98 * drafted, (drafted, accepted)


# the target's text leans off what the draft (unbiased) proposes: drafts are rejected, and where the draft's state
# is rolled back to the accepted tokens the next ones still match (measured 13 of 72 accepted; 1 of 43 without)
LEANING = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True, logit_bias={t: 2.0 for t in range(0, 320, 3)})


def test_a_recurrent_draft_is_rolled_back_after_a_rejection(q8, prompts):
    want = _generate(LLM(str(q8), progress=False), prompts, LEANING)
    llm = _speculative(q8, _self_draft(q8))
    assert _generate(llm, prompts, LEANING) == want
    drafted, accepted = _drafted_accepted(llm)
    assert accepted >= 8 and accepted < drafted, (drafted, accepted)


def test_without_the_drafts_rollback_its_drafts_miss(q8, prompts, monkeypatch):
    """The check above fails where the draft's state keeps its rejected drafts (restore skipped)."""
    from hearth.runner.draft_states import DraftStates

    monkeypatch.setattr(DraftStates, "restore", lambda self, request_id: None)
    llm = _speculative(q8, _self_draft(q8))
    _generate(llm, prompts, LEANING)
    assert _drafted_accepted(llm)[1] < 8


def test_a_draft_model_without_recurrent_layers_drafts_for_qwen35(q8, prompts, plain):
    """A non-recurrent draft for a qwen35 target (a tiny qwen2 of the same vocabulary): lossless too."""
    from tests.gguf_factory import write_tiny_gguf

    draft = q8.parent / "tiny-qwen2-draft.gguf"
    if not draft.exists():
        write_tiny_gguf(draft, "qwen2", vocab=DIMS.vocab, qtype="Q8_0")
    llm = _speculative(q8, {"method": "draft", "model": str(draft), "num_speculative_tokens": 3, "cost_aware": False})
    assert _generate(llm, prompts) == plain
    assert _drafted_accepted(llm)[0] > 0


def test_a_snapshot_taken_after_the_accepted_drafts_misleads_the_next_turn(q8, prompts, monkeypatch):
    """The snapshot check above fails where a verify step's snapshot is copied from the slot after the step (its
    accepted drafts folded in: past the block end it was reserved for)."""
    from hearth.runner import model_runner, state_slots

    def slot_copies(step, snapshots, seqs, accepted):
        state_slots.keep_accepted(step, None, seqs, accepted)
        return []  # save_snapshots then copies each slot as the step left it

    monkeypatch.setattr(model_runner, "keep_accepted", slot_copies)
    with pytest.raises(AssertionError):
        test_a_snapshot_after_a_verify_step_holds_no_draft(q8, prompts)


def test_grammar_forced_drafts_are_lossless(q8):
    """Under a regex, the tokens it forces next are drafted (EngineConfig.grammar_drafts) and verified over the
    DeltaNet layers like any chain."""
    from hearth.sampling_params import StructuredOutput

    params = SamplingParams(temperature=0, max_tokens=40, structured_output=StructuredOutput(regex="(abc|abd){6}"))
    want = LLM(str(q8), progress=False).generate("hello", params)[0].outputs[0]
    llm = _speculative(q8, NGRAM)
    got = llm.generate("hello", params)[0].outputs[0]
    assert list(got.token_ids) == list(want.token_ids) and len(got.text) == 18
    stats = llm.engine.grammar_drafts
    assert stats.drafted > 0 and stats.accepted > 0, (stats.drafted, stats.accepted)


def test_the_state_copies_take_their_share_of_the_kv_bound(q8):
    """With drafts, each of max_num_seqs sequences keeps a copy of its state for a verify step's rollback: it comes
    out of kv_cache_memory_gb as the slots do (a recurrent draft's state and copy too, per sequence)."""
    from hearth.config import layer_caches, recurrent_state_bytes
    from hearth.kvstore.codecs import CODECS, cache_block_bytes

    kw = {"kv_cache_memory_gb": 0.6 / 1024, "max_num_seqs": 4}  # fewer blocks than 4 whole contexts want
    blocks = lambda llm: llm.engine.scheduler.kv.pool.num_blocks  # noqa: E731
    plain = LLM(str(q8), progress=False, **kw)
    mc = plain.model_config
    block = cache_block_bytes(CODECS["f16"], layer_caches(mc), plain.config.block_size)
    copies = 4 * recurrent_state_bytes(mc)
    ngram = _speculative(q8, NGRAM, **kw)
    lost = blocks(plain) - blocks(ngram)
    assert copies - block < lost * block <= copies + block, (lost, block, copies)
    # the draft's K/V shares each block, its state and copy each sequence: fewer blocks again
    draft_bytes = cache_block_bytes(CODECS["f16"], layer_caches(mc), plain.config.block_size) + block
    state = recurrent_state_bytes(mc)
    left = int(0.6 * 2**20) - 4 * 4 * state - 8 * state  # the slots and copies, the 8 snapshots
    assert blocks(_speculative(q8, _self_draft(q8), **kw)) == left // draft_bytes
