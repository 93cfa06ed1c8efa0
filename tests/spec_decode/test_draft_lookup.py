"""draft_lookup_min: prompt lookup ahead of the draft model. A request whose text ends in a long
enough repeated n-gram verifies the lookup's chain and skips the draft's steps; the draft queues the
tokens it did not compute and catches up when it drafts again, so greedy output equals plain greedy
and the draft (SmolLM2 drafting for itself) keeps being accepted."""

from __future__ import annotations

import pytest

from hearth import LLM
from hearth.runner.messages import RunnerOutput, ScheduledSequence
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig

from tests.spec_decode.test_real_model import CODE, GREEDY, LIST, chat, generate, plain_greedy


@pytest.fixture(scope="module")
def hybrid(model_path):
    smol = str(model_path("smollm2-135m"))
    spec = {"method": "draft", "model": smol, "num_speculative_tokens": 4, "cost_aware": False,
            "draft_lookup_min": 3}
    return LLM(smol, progress=False, max_model_len=2048, speculative_config=spec)


def _steps(llm, monkeypatch) -> list[tuple[ScheduledSequence, RunnerOutput]]:
    """Fills with (sequence, the runner's output) for each sequence of each step the runner runs."""
    runner, steps = llm.engine.runner, []
    execute = runner.execute

    def recorded(so):
        out = execute(so)
        steps.extend((s, out) for s in so.seqs)
        return out

    monkeypatch.setattr(runner, "execute", recorded)
    return steps


@pytest.mark.parametrize("which", ["code", "list"])
def test_lookup_before_the_draft_model_equals_plain_greedy(smol_llm, hybrid, which, monkeypatch):
    """Greedy equals plain greedy, and the draft's queue is kept as intended, whatever the text: a step
    without draft slots (a prompt chunk, a lookup chain) queues its tokens and the chain's accepted ones
    for the draft (its lag grows by exactly those), and a step with slots first catches the whole queue
    up (its lag after: 0, or 1 where its last draft was accepted, which it proposed but never computed).
    Lookup chains and the draft model's drafts after a catch-up of a lookup's tokens are both accepted."""
    prompt = CODE if which == "code" else chat(smol_llm, LIST)
    want = plain_greedy(smol_llm, prompt, GREEDY)
    steps = _steps(hybrid, monkeypatch)
    got, _, _ = generate(hybrid, prompt, GREEDY)
    assert got.token_ids == want.token_ids and got.text == want.text
    lag, after_lookup = 0, False
    accepted = {"lookup": 0, "draft after a lookup": 0}
    for s, out in steps:
        taken = len(out.accepted.get(s.request_id, []))
        if s.num_draft_slots:  # the draft model drafted
            chain = out.drafted[s.request_id][0]
            assert out.draft_lag[s.request_id] == (taken == len(chain)), (lag, taken, chain)
            if after_lookup:
                accepted["draft after a lookup"] += taken
        else:
            assert out.draft_lag[s.request_id] == lag + len(s.token_ids) + taken, (lag, s.token_ids, taken)
        if s.spec_token_ids and not s.num_draft_slots:
            accepted["lookup"] += taken
        lag, after_lookup = out.draft_lag[s.request_id], bool(s.spec_token_ids) and not s.num_draft_slots
    assert all(accepted.values()), accepted


def test_draft_lookup_min_is_checked():
    with pytest.raises(InvalidSpeculativeConfig, match=r"speculative_config\.draft_lookup_min must be 0 \(off\) or more"):
        SpeculativeConfig.parse({"method": "draft", "model": "x.gguf", "draft_lookup_min": -2})
    with pytest.raises(InvalidSpeculativeConfig, match=r'speculative_config\.draft_lookup_min applies to method "draft" only'):
        SpeculativeConfig.parse({"method": "suffix", "draft_lookup_min": 3})


def test_the_lookup_of_a_draft_with_every_draft_key_is_a_plain_ngram():
    spec = SpeculativeConfig.parse({"method": "draft", "model": "x.gguf", "draft_quant": "q4_0", "draft_vocab": 100,
                                    "draft_lookup_min": 3, "tree_budget": 6})
    look = spec.lookup(3)  # was refused: draft-only keys carried over to method ngram
    assert (look.method, look.tree_budget, look.prompt_lookup_min, look.prompt_lookup_max) == ("ngram", 0, 3, 5)
    assert (look.draft_quant, look.draft_vocab, look.draft_lookup_min) == ("", None, 0)
