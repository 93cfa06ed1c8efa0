"""Structured output on the real SmolLM2: every sampled text satisfies its constraint, batched with
unconstrained requests; a constraint the grammar engine cannot compile is a one-line error."""

import json
import re
from dataclasses import replace

import jsonschema
import pytest

from hearth import SamplingParams
from hearth.sample.grammar import InvalidStructuredOutput
from hearth.sampling_params import InvalidSamplingParams, StructuredOutput

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}


def chat(llm, text):
    return {"prompt_token_ids": llm.encode_chat([{"role": "user", "content": text}])}


def test_json_schema_holds_for_greedy_and_sampled_rows_beside_free_ones(smol_llm):
    prompt = chat(smol_llm, "Describe a person as JSON.")
    constrained = [SamplingParams(temperature=t, seed=s, max_tokens=80,
                                  structured_output=StructuredOutput(json_schema=PERSON))
                   for t, s in [(0, None), (0.7, 1), (1.0, 2), (1.3, 3)]]
    free = SamplingParams(temperature=0, max_tokens=8)
    outs = smol_llm.generate([prompt] * 5, constrained[:2] + [free] + constrained[2:])
    for i, out in enumerate(outs):
        if i == 2:
            continue
        comp = out.outputs[0]
        assert comp.finish_reason == "stop", comp.text
        jsonschema.validate(json.loads(comp.text), PERSON)
    # the unconstrained row is what it would be alone
    alone = smol_llm.generate(prompt, free)[0].outputs[0]
    assert outs[2].outputs[0].token_ids == alone.token_ids


def test_json_object_regex_and_lark_grammar(smol_llm):
    prompt = chat(smol_llm, "Reply with a JSON object with keys name and age.")
    cases = [
        (StructuredOutput(json_object=True), lambda t: isinstance(json.loads(t), dict)),
        (StructuredOutput(regex=r"(yes|no), [0-9]{3}"), lambda t: re.fullmatch(r"(yes|no), [0-9]{3}", t)),
        (StructuredOutput(grammar='start: "color=" COLOR\nCOLOR: "red" | "green" | "blue"'),
         lambda t: t in ("color=red", "color=green", "color=blue")),
    ]
    # greedy: an unbounded json_object sampled at high temperature may ramble past max_tokens
    params = [SamplingParams(temperature=0, max_tokens=60, structured_output=so) for so, _ in cases]
    for (_, ok), out in zip(cases, smol_llm.generate([prompt] * len(cases), params)):
        assert out.outputs[0].finish_reason == "stop" and ok(out.outputs[0].text), out.outputs[0].text


@pytest.mark.parametrize("so, needle", [
    (StructuredOutput(json_schema={"type": "bogus"}), "invalid json_schema"),
    (StructuredOutput(grammar='start: "a" ('), "invalid grammar"),
    (StructuredOutput(regex="(unclosed"), "invalid regex"),
])
def test_invalid_constraint_is_rejected_before_queueing(smol_llm, so, needle):
    with pytest.raises(InvalidStructuredOutput, match=needle) as e:
        smol_llm.generate("hi", SamplingParams(max_tokens=4, structured_output=so))
    assert "\n" not in str(e.value)
    assert not smol_llm.engine.has_unfinished()


def test_exactly_one_constraint():
    with pytest.raises(InvalidSamplingParams, match="exactly one"):
        StructuredOutput(json_object=True, regex="a")


@pytest.mark.parametrize("mode", ["plain", "grammar drafts", "draft tree"])
def test_min_tokens_past_the_grammar_s_end_ends_where_the_grammar_does(tmp_path, mode, request):
    """min_tokens holds back end-of-generation and stop ids only (vLLM): where the grammar allows
    nothing but its end, the grammar wins. The ban left no token: garbage ids with NaN logprobs."""
    import math

    if mode != "plain":
        request.getfixturevalue("native_speculation")
    from hearth import LLM
    from tests.gguf_factory import SPECULATES, write_tiny_gguf

    path = tmp_path / "tiny.gguf"
    # Q8_0: native rows, drafts verified
    write_tiny_gguf(path, "llama", qtype="F32" if mode == "plain" else "Q8_0", **SPECULATES)
    spec = {"method": "draft", "model": str(path), "num_speculative_tokens": 4, "tree_budget": 8, "cost_aware": False}
    llm = LLM(str(path), max_model_len=128, progress=False, speculative_config=spec if mode == "draft tree" else None)
    eos = set(llm.tokenizer.eog_ids)
    for schema, text in [({"enum": ["abcdef"]}, '"abcdef"'), ({"type": "boolean"}, None)]:
        for t in (0, 1.0):
            p = SamplingParams(temperature=t, seed=1, max_tokens=20, min_tokens=15, logprobs=1,
                               structured_output=StructuredOutput(json_schema=schema))
            comp = llm.generate({"prompt_token_ids": [1, 2, 3]}, p)[0].outputs[0]
            assert comp.finish_reason == "stop" and comp.token_ids[-1] in eos and len(comp.token_ids) < 15, comp
            assert comp.text == text if text else comp.text in ("true", "false")
            assert all(math.isfinite(v) for row in comp.logprobs for v in row.values()), comp.logprobs
    if mode == "grammar drafts":
        assert llm.engine.grammar_drafts.drafted > 0  # the verify rows were the ones masked
    # where the grammar allows more, min_tokens still holds: `a+` may end after one `a`, and the bias wants it to
    for k, n in [(0, 1), (9, 9)]:
        p = SamplingParams(temperature=0, max_tokens=12, min_tokens=k, logit_bias={e: 100.0 for e in eos},
                           structured_output=StructuredOutput(regex="a+"))
        comp = llm.generate({"prompt_token_ids": [1, 2, 3]}, p)[0].outputs[0]
        assert comp.text == "a" * n and comp.finish_reason == "stop", comp


def test_a_grammar_the_engine_gives_up_on_raises_and_the_engine_goes_on(smol_llm):
    """llguidance's parser stops after the `w` (a row of 2,002 items, its limit 2,000); the mask then
    allowed only the end, and generate returned "w" finished as "stop"."""
    from hearth.sample.grammar import GrammarStopped

    wide = "root ::= " + " | ".join(f'"w{i}"' for i in range(2001))
    params = SamplingParams(temperature=0, max_tokens=8, structured_output=StructuredOutput(grammar=wide))
    with pytest.raises(GrammarStopped, match="gave up mid-answer, the grammar .*max is 2000"):
        smol_llm.generate("Pick one:", params)
    ok = replace(params, structured_output=StructuredOutput(grammar='root ::= "w1"'))
    assert smol_llm.generate("Pick one:", ok)[0].outputs[0].text == "w1"
