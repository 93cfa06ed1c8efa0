"""The draft-model proposer (method draft). SmolLM2 drafting for itself: its drafts are the
target's own greedy tokens whenever the draft's K/V are right, so >= 98% acceptance checks the
draft's K/V bookkeeping (catch-up over prefill chunks, rollback, recompute after preemption), and
equality with plain greedy checks that verification stays lossless. Tiny random GGUFs give the
vocabulary mismatch."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from hearth import LLM, SamplingParams
from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.spec_decode.policy import SpeculativeDecoder
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig

from tests.engine.fakes import CountingRunner, LetterTokenizer
from tests.gguf_factory import write_tiny_gguf
from tests.spec_decode.test_real_model import CODE, GREEDY, STORY, assert_greedy_equals_plain, chat, generate
from tests.test_engine_equivalence import MODES, PROMPTS, assert_agree


def draft_llm(model_path, **kw) -> LLM:
    smol = str(model_path("smollm2-135m"))
    spec = {"method": "draft", "model": smol, "num_speculative_tokens": 4, "cost_aware": False}
    return LLM(smol, progress=False, speculative_config=spec, **{"max_model_len": 2048, **kw})


@pytest.fixture(scope="module")
def self_draft(model_path):
    return draft_llm(model_path)


def test_draft_method_needs_a_model():
    with pytest.raises(InvalidSpeculativeConfig, match=r"speculative_config\.model is required"):
        SpeculativeConfig.parse({"method": "draft"})
    with pytest.raises(InvalidSpeculativeConfig, match=r"speculative_config\.model must be str"):
        SpeculativeConfig.parse({"method": "draft", "model": 3})


def test_a_draft_with_another_vocabulary_is_one_clear_error(tmp_path):
    target, other, shuffled = tmp_path / "t.gguf", tmp_path / "d.gguf", tmp_path / "s.gguf"
    write_tiny_gguf(target, "qwen2", vocab=320)
    write_tiny_gguf(other, "qwen2", vocab=384)
    write_tiny_gguf(shuffled, "llama", vocab=320, tokenizer="llama")  # same size, SentencePiece strings
    for draft, want in ((other, "(the target has 320 tokens, the draft 384)"), (shuffled, "(token 0 is ")):
        with pytest.raises(InvalidSpeculativeConfig) as e:
            LLM(str(target), progress=False, speculative_config={"method": "draft", "model": str(draft)})
        msg = str(e.value)
        assert msg.startswith("speculative_config.model: vocabulary differs from the target's") and want in msg
        assert "\n" not in msg


def test_missing_draft_model_names_the_field(tmp_path):
    target = tmp_path / "t.gguf"
    write_tiny_gguf(target, "qwen2", vocab=320)
    with pytest.raises(InvalidSpeculativeConfig, match=r"^speculative_config\.model 'no-such-model'"):
        LLM(str(target), progress=False, speculative_config={"method": "draft", "model": "no-such-model"})


def test_serve_model_draft_flag_sets_method_draft(monkeypatch):
    from hearth.commands import serve
    from hearth.loader import resolve

    # the draft is found as the flags are read: found here without a download or a file
    monkeypatch.setattr(resolve, "resolve_model", lambda name, **kw: Path(name))
    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    c = serve.speculative_config(p.parse_args(["-md", "qwen2.5-coder-0.5b", "--spec-draft-n-max", "6"]))
    assert (c["method"], c["model"], c["num_speculative_tokens"]) == ("draft", "qwen2.5-coder-0.5b", 6)
    c = serve.speculative_config(p.parse_args(["--model-draft", "x.gguf"]))
    assert (c["method"], c["model"]) == ("draft", "x.gguf")
    for spelling in ("--draft-max", "--draft", "--draft-n"):  # llama-server's (common/arg.cpp), = --spec-draft-n-max
        c = serve.speculative_config(p.parse_args(["-md", "x.gguf", spelling, "5"]))
        assert (c["method"], c["num_speculative_tokens"]) == ("draft", 5)
    for absent in ("--draft-min", "--draft-p-min"):  # no hearth knob: refused, not ignored
        with pytest.raises(SystemExit):
            p.parse_args([absent, "2"])


@pytest.mark.parametrize("flags,needles", [
    # each flag named as the user typed it
    (["-md", "d.gguf", "--speculative-config", '{"method": "ngram"}'],
     ["error: -md runs method draft but --speculative-config gives method 'ngram'"]),
    (["--model-draft", "d.gguf", "--speculative-config", '{"method": "suffix"}'],
     ["error: --model-draft runs method draft but --speculative-config gives method 'suffix'"]),
    (["-md", "d.gguf", "--speculative-config", '{"model": "e.gguf"}'],
     ["error: -md 'd.gguf' and --speculative-config's model 'e.gguf' differ"]),
    (["--draft-max", "6", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'],
     ["error: --draft-max 6 and --speculative-config's num_speculative_tokens 4 differ"]),
    (["--draft-n", "6", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'],
     ["error: --draft-n 6 and --speculative-config's num_speculative_tokens 4 differ"]),
])
def test_serve_flags_that_contradict_the_speculative_config_are_one_line(capsys, flags, needles):
    """-md used to override --speculative-config '{"method": "ngram"}' without a word (the draft ran)."""
    from tests.test_bad_input import assert_one_line_error, run_cli

    code, err = run_cli(capsys, "serve", "no-model-loads.gguf", *flags)
    assert_one_line_error(code, err, *needles, "give one of them")


def test_serve_flags_that_agree_with_the_speculative_config_are_accepted(tmp_path, monkeypatch):
    from hearth.commands import serve

    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    draft = tmp_path / "d.gguf"
    write_tiny_gguf(draft, "qwen2")
    monkeypatch.chdir(tmp_path)
    for config in ('{"method": "draft", "model": "d.gguf"}', f'{{"model": "{draft}"}}', '{"model": "./d.gguf"}'):
        c = serve.speculative_config(p.parse_args(["-md", "d.gguf", "--draft", "4", "--speculative-config",
                                                   config.replace("}", ', "num_speculative_tokens": 4}')]))
        assert (c["method"], c["num_speculative_tokens"], c["model"]) == ("draft", 4, "d.gguf")


@pytest.mark.parametrize("which", ["story", "code"])
def test_target_as_its_own_draft_equals_plain_greedy_and_accepts_almost_all(smol_llm, self_draft, which):
    assert_greedy_equals_plain(smol_llm, self_draft, which, min_drafted=60, min_rate=0.98)


def test_sampling_with_the_drafts_distribution_accepts_almost_all_and_is_reproducible(smol_llm, self_draft):
    """Drafts drawn from q (the draft's own distribution) are accepted with min(1, p/q): with q = p
    nearly always, where argmax drafts at temperature 1 would be accepted only with p(argmax)."""
    prompt = chat(smol_llm, STORY)
    p = SamplingParams(temperature=1.0, seed=5, max_tokens=48, ignore_eos=True)
    a, drafted, accepted = generate(self_draft, prompt, p)
    b, _, _ = generate(self_draft, prompt, p)
    assert a.token_ids == b.token_ids
    assert drafted >= 30 and accepted >= 0.95 * drafted, (drafted, accepted)


def test_draft_kv_catches_up_across_a_chunked_prefill(model_path):
    """A 16-token budget splits the prompt into chunks: the draft computes each with the target."""
    smol = str(model_path("smollm2-135m"))
    plain = LLM(smol, progress=False, max_model_len=2048, max_num_batched_tokens=16)
    spec = draft_llm(model_path, max_num_batched_tokens=16)
    prompt = chat(plain, "Write a short story about a cat who learns to fly over the old town.")
    assert len(prompt["prompt_token_ids"]) > 40
    want, _, _ = generate(plain, prompt, GREEDY)
    got, drafted, accepted = generate(spec, prompt, GREEDY)
    assert got.token_ids == want.token_ids
    assert drafted >= 60 and accepted >= 0.98 * drafted, (drafted, accepted)


def test_draft_kv_is_recomputed_after_preemption(model_path, smol_llm):
    """6 blocks of 16 tokens cannot hold 5 sequences of ~45 tokens: the newest are preempted and
    recomputed from position 0, the draft's K/V with them (else acceptance would fall)."""
    p = replace(MODES["greedy"], max_tokens=40)  # drafts finish 16 tokens before anyone is preempted
    small = draft_llm(model_path, num_kv_blocks=6, max_model_len=96, max_logprobs=-1)  # all 6 blocks; the top 1000
    squeezed = [o.outputs[0] for o in small.generate(PROMPTS, p)]
    sched, s = small.engine.scheduler, small.engine.spec.stats
    assert sched.num_preemptions > 0 and sched.kv.pool.num_free == 6
    assert s.num_draft_tokens > 20 and s.num_accepted_tokens >= 0.9 * s.num_draft_tokens, (
        s.num_draft_tokens, s.num_accepted_tokens)
    # held to plain greedy batched (batched == alone: tests/test_engine_equivalence.py): one run, not five
    for got, want in zip(squeezed, smol_llm.generate(PROMPTS, p)):
        assert_agree(got, want.outputs[0])


class SlotFillingRunner(CountingRunner):
    """A draft model's stand-in: fills each sequence's draft slots with 2 right drafts, then wrong ones."""

    def execute(self, so):
        seqs = []
        for s in so.seqs:
            if s.num_draft_slots:
                t = s.token_ids[-1]
                d = [(t + 1 + i) % self.vocab if i < 2 else 0 for i in range(s.num_draft_slots)]
                s = replace(s, spec_token_ids=d, num_draft_slots=0)
            seqs.append(s)
        self.sent, self.slots = so, [s.num_draft_slots for s in so.seqs]
        return super().execute(replace(so, seqs=seqs))


def test_draft_slots_are_budgeted_trimmed_and_rolled_back_like_drafts():
    kv = KVCacheManager(16, 4)
    sched = Scheduler(kv, 8, 16, row_regimes=(6,))
    spec = SpeculativeDecoder(SpeculativeConfig(method="draft", model="unused", disable_by_batch_size=0))
    runner = SlotFillingRunner()
    engine = EngineCore(sched, runner, LetterTokenizer(), 256, 50, spec)
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=12, temperature=0), "a")
    engine.step()  # prefill: no slots
    assert runner.slots == [0]
    engine.step()  # 4 slots, 1 + 4 rows < the regime boundary at 6: 2 accepted, the rest rolled back
    (req,) = sched.running
    assert runner.slots == [4] and runner.sent.seqs[0].spec_token_ids == []
    assert (req.output_token_ids, req.num_computed_tokens, req.block_ids) == ([4, 5, 6, 7], 6, [0, 1])
    assert (req.spec_token_ids, req.num_draft_slots) == ([], 0)
    assert kv.pool.ref_cnt[:3] == [1, 1, 0]
    engine.step()  # the policy follows acceptance: 2 accepted -> 3 slots next
    assert runner.slots == [3]
    s = spec.stats
    assert (s.num_drafts, s.num_draft_tokens, s.num_accepted_tokens) == (2, 7, 4)


def test_draft_catches_up_on_blocks_loaded_from_the_disk_tier(model_path, tmp_path):
    """The disk tier holds the target's K/V only: after a restart that loads the prompt's blocks
    from it, the draft must catch up on them (its tensors hold nothing there), so the request
    drafts and accepts exactly what it did from the same prefix cached in memory, where the
    draft's K/V were its own. (Both start from a prefix hit: a hit's shorter prefill may change
    the target's last bits against a whole one.)"""
    first = draft_llm(model_path, kv_disk_dir=str(tmp_path))
    generate(first, CODE, GREEDY)  # computes the prompt, saves its blocks
    want, drafted, accepted = generate(first, CODE, GREEDY, fresh=False)
    assert first.engine.scheduler.kv.stats.hits >= 3 * first.engine.scheduler.kv.block_size
    first.close()
    again = draft_llm(model_path, kv_disk_dir=str(tmp_path))
    got, drafted2, accepted2 = generate(again, CODE, GREEDY)
    kv = again.engine.scheduler.kv
    assert kv.stats.disk_hits >= 3 * kv.block_size  # the prompt came from disk
    assert got.token_ids == want.token_ids
    assert drafted >= 60 and (drafted2, accepted2) == (drafted, accepted)


def test_a_step_in_which_the_draft_catches_up_a_prompt_is_not_timed(self_draft):
    """The draft model computes a new request's prompt in its first decode step: that step's time
    is a prefill's, and priced as a verify step's it would make every draft look dear."""
    runner, steady, outs = self_draft.runner, [], []
    execute = runner.execute

    def timed(so):
        out = execute(so)
        outs.append((so, out))
        if so.seqs and all(len(s.token_ids) == 1 for s in so.seqs):
            steady.append(out.steady)
        return out

    runner.execute = timed
    try:
        generate(self_draft, CODE, GREEDY)
    finally:
        runner.execute = execute
    assert steady[0] is False  # the prompt caught up
    assert len(steady) > 10 and all(steady[1:])  # then one step's verified tokens each step
    # what the policy prices a catch-up by: the lag after the prompt's step (the whole prompt,
    # queued), then the first decode step's prefill of it (its new token after it, as a decode row)
    (prompt, after_prompt), (_, first) = outs[0], outs[1]
    rid = prompt.seqs[0].request_id
    n = len(prompt.seqs[0].token_ids)
    assert after_prompt.draft_lag == {rid: n} and after_prompt.catch_up == (0, 0.0)
    assert first.catch_up[0] == n and first.catch_up[1] > 0 and first.draft_lag[rid] <= 1
    assert all(out.draft_lag.get(rid, 0) <= 1 for _, out in outs[2:])  # drafting every step: no lag
