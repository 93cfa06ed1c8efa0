"""Token trees on the real SmolLM2: greedy with n-gram trees (several earlier continuations as
branches) is token for token plain greedy, logprobs included, and so is structured output (the
grammar masks each node's row by its path's state); a quantized KV cache verifies top-1 chains.
Every equality test asserts that drafts were accepted, and the greedy test that some were accepted
on a branch other than the top-1 chain, so tree verification itself is exercised."""

from __future__ import annotations

import json

import pytest

from hearth import LLM, SamplingParams
from hearth.sampling_params import StructuredOutput
from hearth.spec_decode.config import InvalidSpeculativeConfig
from tests.spec_decode.test_real_model import CODE, GREEDY, chat, generate

TREE = {"method": "ngram", "num_speculative_tokens": 5, "tree_budget": 8, "prompt_lookup_max": 3, "cost_aware": False}
# several earlier continuations of the same words: the branches a tree offers
TABLE = ("Continue the pattern: the red cat sat. the red dog ran. the red cat ran. the red dog sat. "
         "the blue cat sat. the blue dog ran. the red")


def load(model_path, **kw) -> LLM:
    return LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048, **kw)


@pytest.fixture(scope="module")
def tree_llm(model_path):
    return load(model_path, speculative_config=TREE)


def off_chain(llm):
    return llm.engine.spec.stats.num_accepted_off_chain


def test_greedy_with_ngram_trees_equals_plain_greedy_and_takes_side_branches(smol_llm, tree_llm):
    p = SamplingParams(temperature=0, max_tokens=128, ignore_eos=True)
    side = 0
    for prompt in (TABLE, CODE):
        want, _, _ = generate(smol_llm, prompt, p)
        before = off_chain(tree_llm)
        got, drafted, accepted = generate(tree_llm, prompt, p)
        assert got.token_ids == want.token_ids and got.text == want.text
        assert drafted > 0 and accepted >= 10, (drafted, accepted)
        side += off_chain(tree_llm) - before
    assert side > 0, "no token was accepted off the top-1 chain: the trees' branches were never used"


def test_logprobs_with_trees_are_the_targets(smol_llm, tree_llm):
    p = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True, logprobs=5)
    want, _, _ = generate(smol_llm, TABLE, p)
    got, _, accepted = generate(tree_llm, TABLE, p)
    assert accepted > 0 and got.token_ids == want.token_ids
    assert got.logprobs == want.logprobs


def test_structured_output_with_trees_equals_without(smol_llm, tree_llm):
    item = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                             "color": {"type": "string", "maxLength": 12}},
            "required": ["name", "color"]}
    schema = {"type": "object", "properties": {"fruits": {"type": "array", "maxItems": 6, "items": item}},
              "required": ["fruits"]}
    p = SamplingParams(temperature=0, max_tokens=200, structured_output=StructuredOutput(json_schema=schema))
    # the same keys before different values: the n-gram trees branch there
    example = ('[{"name": "apple", "color": "red"}, {"name": "banana", "color": "yellow"}, '
               '{"name": "lime", "color": "green"}, {"name": "plum", "color": "purple"}]')
    prompt = chat(smol_llm, f"Here are fruits: {example}. Answer in JSON as {{\"fruits\": [...]}} with these "
                            "fruits and two more.")
    want, _, _ = generate(smol_llm, prompt, p)
    trees, run = [], tree_llm.runner._run
    tree_llm.runner._run = lambda so: trees.extend(s for s in so.seqs if s.is_tree) or run(so)
    try:
        got, drafted, accepted = generate(tree_llm, prompt, p)
    finally:
        tree_llm.runner._run = run
    assert drafted > 0 and accepted > 0, (drafted, accepted)
    assert got.token_ids == want.token_ids
    assert isinstance(json.loads(got.text)["fruits"], list)
    assert trees, "no tree was verified under the grammar"


def test_seeded_sampling_with_trees_is_reproducible(tree_llm):
    p = SamplingParams(temperature=0.7, seed=5, max_tokens=64, ignore_eos=True)
    a, _, acc = generate(tree_llm, TABLE, p)
    b, _, _ = generate(tree_llm, TABLE, p)
    assert acc > 0 and a.token_ids == b.token_ids


def test_quantized_kv_with_trees_verifies_chains_and_equals_plain(model_path):
    plain = load(model_path, kv_cache_dtype="q8_0")
    spec = load(model_path, kv_cache_dtype="q8_0", speculative_config=TREE)
    if spec.speculation_off:  # the avx2 tier attends over bf16/f16 caches only
        pytest.skip(spec.speculation_off)
    steps = []
    run = spec.runner._run
    spec.runner._run = lambda so: steps.append([s.spec_parents for s in so.seqs]) or run(so)
    want, _, _ = generate(plain, TABLE, GREEDY)
    got, _, accepted = generate(spec, TABLE, GREEDY)
    assert got.token_ids == want.token_ids and accepted > 0
    assert steps and not any(any(p) for step in steps for p in step)  # chains only
    assert off_chain(spec) == 0


@pytest.mark.parametrize("value,budget", [(2048, 2048), (9000, 4096)])
def test_a_tree_budget_above_the_step_budget_is_one_line_naming_the_field(value, budget):
    with pytest.raises(InvalidSpeculativeConfig) as e:  # before any model is read
        LLM("no-such-model", progress=False, max_num_batched_tokens=budget,
            speculative_config={"method": "ngram", "tree_budget": value})
    msg = str(e.value)
    assert msg.startswith("speculative_config.tree_budget") and "max_num_batched_tokens" in msg and "\n" not in msg
