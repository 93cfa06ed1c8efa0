"""Drafts after a grammar's end (found by tests/spec_decode/test_fuzz_equivalence.py). With ignore_eos a
constrained answer goes on after its grammar is complete, each row masked to the end tokens, which the
matcher takes again and again. llguidance's validate_tokens counts no token past its stop, though: an EOS
draft there counted as forbidden, so the verify rows after it went unmasked, the target's own choice was
taken as the bonus token, and the matcher (which refused it) ended the request with "the grammar engine gave
up". And llguidance records no end token taken after its stop, so rolling such tokens back undid real ones."""

from __future__ import annotations

import pytest

from hearth import LLM, SamplingParams
from hearth.runner.grammar_rows import allowed_of
from hearth.sample.grammar import GrammarCompiler
from hearth.sampling_params import StructuredOutput
from tests.gguf_factory import SPECULATES, write_tiny_gguf
from tests.tool_guard.tiny_vocab import TinyTokenizer

TOK = TinyTokenizer()
COMPILER = GrammarCompiler(TOK, TOK.vocab_size)


def allowed(m) -> list[int]:
    return allowed_of(m, TOK.vocab_size).nonzero().flatten().tolist()


@pytest.mark.parametrize("regex", ["ab", "ab|abc"])  # stopped at its last token, or only by the EOS
def test_end_tokens_after_the_end_are_valid_drafts_and_roll_back_alone(regex):
    m = COMPILER.matcher(StructuredOutput(regex=regex))
    a, b = TOK.encode("ab")
    eos = TOK.eos_id
    assert m.valid_prefix([a, b, eos, eos, eos]) == 5  # as bitmask and accept say: the end, again and again
    assert m.valid_prefix([a, b, eos, a]) == 3
    assert m.accept(a) and m.accept(b) and m.accept(eos)
    assert allowed(m) == [eos] and m.valid_prefix([eos, eos]) == 2
    assert m.accept(eos) and m.accept(eos)
    m.rollback(2)  # the two past the stop: the state is still after "ab" and its end
    assert allowed(m) == [eos] and m.error is None
    m.rollback(2)  # the end and "b"
    assert allowed(m) == [b]


@pytest.mark.usefixtures("native_speculation")
def test_an_ignore_eos_answer_past_its_grammars_end_equals_plain(tmp_path):
    """A second, unconstrained request in the batch makes the head score every token (one constrained
    request alone scores only what its grammar allows, where an unmasked row held only EOS too)."""
    path = tmp_path / "q8.gguf"
    write_tiny_gguf(path, "llama", qtype="Q8_0", **SPECULATES)  # the native kernels: speculation runs
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "cost_aware": False}
    params = [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, logprobs=0,
                             structured_output=StructuredOutput(regex="delta")),
              SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)]
    prompts = [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [5, 6, 7]}]
    plain = LLM(str(path), progress=False, grammar_drafts=False).generate(prompts, params)
    llm = LLM(str(path), progress=False, speculative_config=spec)
    got = llm.generate(prompts, params)  # raised GrammarStopped ("the grammar engine gave up mid-answer")
    eos = llm.tokenizer.eog_ids
    for g, w in zip(got, plain):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids and g.outputs[0].logprobs == w.outputs[0].logprobs
    answer = got[0].outputs[0]
    assert answer.text == "delta" and set(answer.token_ids[5:]) <= eos and len(answer.token_ids) == 30
    assert llm.engine.spec.stats.num_accepted_tokens >= 10  # the EOS run was drafted and accepted
