"""draft_lookup_min: prompt lookup ahead of the draft model. A request whose text ends in a long
enough repeated n-gram verifies the lookup's chain and skips the draft's steps; the draft queues the
tokens it did not compute and catches up when it drafts again, so greedy output equals plain greedy
and the draft (SmolLM2 drafting for itself) keeps being accepted."""

from __future__ import annotations

import pytest

from hearth import LLM
from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig

from tests.spec_decode.test_real_model import CODE, GREEDY, LIST, chat, generate, plain_greedy


@pytest.fixture(scope="module")
def hybrid(model_path):
    smol = str(model_path("smollm2-135m"))
    spec = {"method": "draft", "model": smol, "num_speculative_tokens": 4, "cost_aware": False,
            "draft_lookup_min": 3}
    return LLM(smol, progress=False, max_model_len=2048, speculative_config=spec)


@pytest.mark.parametrize("which", ["code", "list"])
def test_lookup_before_the_draft_model_equals_plain_greedy(smol_llm, hybrid, which):
    prompt = CODE if which == "code" else chat(smol_llm, LIST)
    want = plain_greedy(smol_llm, prompt, GREEDY)
    slots = hybrid.engine.spec.proposer
    before = slots.num_lookup, slots.num_slotted
    got, drafted, accepted = generate(hybrid, prompt, GREEDY)
    assert got.token_ids == want.token_ids and got.text == want.text
    used, slotted = slots.num_lookup - before[0], slots.num_slotted - before[1]
    assert used > 0 and slotted > 0, (used, slotted)  # both the lookup and the draft model drafted
    # the draft's K/V caught up after lookup steps. The share moves with the text the kernels' numerics
    # lead to (the list: 0.82 with f32 SDPA prefills, 0.74 with the BF16 flash kernel; the code: 0.84)
    assert accepted >= 0.6 * drafted, (drafted, accepted)


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
