"""Grammar drafts (EngineConfig.grammar_drafts): under a grammar, the tokens it forces next (a
schema's keys, a const, the rest of an enum value once begun) are drafted and verified in one step.
Greedy output is token for token the output without them, the drafts are verified and accepted
(so the equality is not vacuous), and where a verify row is not computed as a decode row (the
torch tier) they are off."""

from __future__ import annotations

import json

from hearth import LLM, SamplingParams
from hearth.sampling_params import StructuredOutput

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["fruit", "colour", "count", "ripe"],
          "properties": {"fruit": {"enum": ["pineapple", "pomegranate"]}, "colour": {"const": "yellow"},
                         "count": {"type": "integer", "minimum": 1, "maximum": 9}, "ripe": {"type": "boolean"}}}
PROMPT = "Describe one fruit as JSON."


def run(llm: LLM, seed: int | None = None) -> tuple[list[int], list[int]]:
    """(the completion's tokens, [grammar drafts verified, accepted] during it), prefix cache cold."""
    llm.engine.scheduler.kv.pool.reset_prefix_cache()
    stats = llm.engine.grammar_drafts
    before = (stats.drafted, stats.accepted)
    params = SamplingParams(temperature=0.0 if seed is None else 0.8, seed=seed, max_tokens=60,
                            structured_output=StructuredOutput(json_schema=SCHEMA))
    out = llm.generate(PROMPT, params)[0].outputs[0]
    assert out.finish_reason == "stop", out.text
    json.loads(out.text)  # the grammar held
    return out.token_ids, [stats.drafted - before[0], stats.accepted - before[1]]


def test_greedy_with_grammar_drafts_equals_greedy_without(smol_llm, model_path):
    off = LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, grammar_drafts=False)
    plain, none = run(off)
    assert none == [0, 0]
    tokens, (drafted, accepted) = run(smol_llm)
    assert tokens == plain
    if smol_llm.runner.row_regimes is None:  # torch: no lossless verify rows, so no drafts
        assert not smol_llm.runner.forced_drafts and drafted == 0
        return
    assert smol_llm.runner.forced_drafts
    assert drafted >= 5 and accepted == drafted, (drafted, accepted)  # the keys and the const at least


def test_a_seeded_sampled_request_gets_no_grammar_drafts(smol_llm, model_path):
    """Its draws would follow how many drafts each step had room for, which follows the batch: a seed
    would no longer give the same tokens alone or batched. So it decodes as without them."""
    off = LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, grammar_drafts=False)
    tokens, drafts = run(smol_llm, seed=7)
    assert drafts == [0, 0] and tokens == run(off, seed=7)[0]
