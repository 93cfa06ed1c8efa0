"""vLLM's bad_words on a real model (SmolLM2-135M): a word its greedy answer holds is never generated once
banned, a word of two tokens too (its last token banned right after the first), through LLM.generate and
LLM.chat; with prompt-lookup speculation, whose drafts copy the banned words from the prompt, the output is
token for token the output without speculation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hearth import LLM, SamplingParams

PROMPT = "Paris is the capital of France. Rome is the capital of Italy. Madrid is the capital of Spain. Berlin is the"


def greedy(llm, prompt: str, bad_words=(), n: int = 24) -> list[int]:
    params = SamplingParams(temperature=0, max_tokens=n, bad_words=list(bad_words))
    return llm.generate([prompt], params)[0].outputs[0].token_ids


def holds(ids: list[int], seq: list[int]) -> bool:
    return any(ids[i:i + len(seq)] == seq for i in range(len(ids) - len(seq) + 1))


def test_a_word_of_the_greedy_answer_is_never_generated_once_banned(smol_llm):
    out = smol_llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=12))[0].outputs[0]
    assert out.text.startswith(" Paris")
    paris = smol_llm.engine.bad_word_ids(SamplingParams(bad_words=["Paris"]))  # "Paris" and " Paris"
    assert len(paris) == 2 and all(len(s) == 1 for s in paris)
    banned = smol_llm.generate(["The capital of France is"],
                               SamplingParams(temperature=0, max_tokens=12, bad_words=["Paris"]))[0].outputs[0]
    assert "Paris" not in banned.text and not any(s[0] in banned.token_ids for s in paris)
    chat = [{"role": "user", "content": "What is the capital of France? One word."}]
    assert "Paris" in smol_llm.chat(chat, SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].text
    assert "Paris" not in smol_llm.chat(chat, SamplingParams(temperature=0, max_tokens=8,
                                                             bad_words=["Paris"]))[0].outputs[0].text


def test_a_two_token_word_is_banned_after_its_first_token(smol_llm):
    plain, seq = smol_llm.engine.bad_word_ids(SamplingParams(bad_words=["capital of"]))  # seq: " capital of"
    assert len(plain) == len(seq) == 2 and plain[0] != seq[0]
    assert holds(greedy(smol_llm, PROMPT), seq)
    out = greedy(smol_llm, PROMPT, ["capital of"])
    assert not holds(out, seq) and seq[0] in out  # its first token alone is no bad word


@pytest.fixture(scope="module")
def spec_llm(model_path):
    llm = LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=2048,
              speculative_config={"method": "ngram", "num_speculative_tokens": 6})
    if llm.speculation_off:  # the torch tier: verify rows are not decode rows, so hearth keeps speculation off
        pytest.skip(llm.speculation_off)
    return llm


LINE = "one two three four five six seven eight nine ten."
COUNTING = f"{LINE} {LINE} {LINE} one two"
"""Prompt lookup drafts the count from the prompt: " five six" as drafts, whose rows must ban " seven"."""


@pytest.mark.parametrize("bad_words", [[], ["six seven"], ["six seven eight"], ["seven"], ["capital of"]])
def test_speculation_is_lossless_with_bad_words(smol_llm, spec_llm, bad_words):
    """A verify row's history holds the drafts before it: a word begun in the drafts is banned on the rows
    after them (the drafted " seven", or the bonus token after a drafted " six", rejected)."""
    for prompt in (COUNTING, PROMPT):
        out = greedy(spec_llm, prompt, bad_words, n=16)
        assert out == greedy(smol_llm, prompt, bad_words, n=16)
        assert not any(holds(out, seq) for seq in smol_llm.engine.bad_word_ids(SamplingParams(bad_words=bad_words)))
    assert spec_llm.engine.spec.stats.num_accepted_tokens > 0  # drafts were verified


def test_sequences_outside_the_vocabulary_are_refused_by_name(smol_llm):
    from hearth.sampling_params import InvalidSamplingParams

    params = SamplingParams(temperature=0, max_tokens=2, bad_words=["x"], bad_words_token_ids=[[10**7]])
    with pytest.raises(InvalidSamplingParams) as e:
        smol_llm.generate(["hi"], params)
    assert e.value.field == "bad_words" and e.value.why.startswith("token id 10000000 is outside the vocabulary")


def test_bad_words_are_tokenized_once_per_request(smol_llm, monkeypatch):
    """check_request finds the words' ids and the params it returns carry them: add_request does not
    tokenize them again (LLM.generate checks, then queues checked; EngineCore.add_request checks itself)."""
    import hearth.engine.engine_core as engine_core
    calls = []
    real = engine_core.word_token_ids
    monkeypatch.setattr(engine_core, "word_token_ids", lambda words, encode: calls.append(words) or real(words, encode))
    params = SamplingParams(temperature=0, max_tokens=2, bad_words=["Paris"])
    smol_llm.generate(["The capital of France is"], params)
    assert calls == [["Paris"]] and params.bad_words_token_ids == []  # the caller's params stay as given
    calls.clear()
    rid = smol_llm.engine.add_request([1, 2, 3], params)
    smol_llm.engine.abort(rid)
    assert calls == [["Paris"]]


def test_bad_words_that_leave_a_grammar_no_token_end_the_request_naming_them(smol_llm):
    """Banning every token that opens a JSON object (those starting with `{` or whitespace) under json_object
    left the first row no finite logit: the sampler took token 0 and the grammar then blamed the constraint
    ("too complex"). The request ends with a bad_words error (a 400 on the API), and no token is sent."""
    from hearth.api.errors import from_hearth_error
    from hearth.sample.grammar import GrammarStopped
    from hearth.sampling_params import InvalidSamplingParams, StructuredOutput

    tok = smol_llm.engine.tokenizer
    opening = [[t] for t in range(smol_llm.engine.vocab_size)
               if (s := tok.decode([t])) and (s[0] == "{" or s[0].isspace())]
    params = SamplingParams(temperature=0, max_tokens=8, structured_output=StructuredOutput(json_object=True),
                            bad_words_token_ids=opening)
    with pytest.raises(InvalidSamplingParams) as e:
        smol_llm.generate(["Give me a JSON object:"], params)
    assert not isinstance(e.value, GrammarStopped)
    assert str(e.value) == "bad_words left no token the json_object allows at this point of the answer (ban fewer words)"
    err = from_hearth_error(e.value, "/v1/chat/completions")
    assert (err.status, err.param) == (400, "bad_words") and err.message.startswith("bad_words: left no token")
    engine = smol_llm.engine
    rid, outs = engine.add_request(tok.encode("Give me a JSON object:"), params), []
    while engine.has_unfinished():
        outs += [o for o in engine.step() if o.request_id == rid]
    assert outs[-1].finished and isinstance(outs[-1].error, InvalidSamplingParams)
    assert not any(o.new_token_ids for o in outs)  # token 0, sampled from no finite logit, is never sent
    # a ban that leaves the grammar a token still answers, and the engine runs on
    few = replace(params, bad_words_token_ids=opening[:10], max_tokens=4)
    assert smol_llm.generate(["Give me a JSON object:"], few)[0].outputs[0].text.lstrip().startswith("{")


def test_a_dead_end_on_a_verify_row_ends_the_request_too(spec_llm, monkeypatch):
    """With drafts, the row after `{` (the only opening token left) is a verify row: its grammar allows
    whitespace, `"` or `}`, all banned; the drafted `"a` is rejected there and the resample had no finite
    logit. The request ends with the bad_words error; `{` stays its only token sent."""
    from hearth.sampling_params import InvalidSamplingParams, StructuredOutput

    engine, tok = spec_llm.engine, spec_llm.engine.tokenizer
    (brace,) = tok.encode("{", add_special_tokens=False)
    ban = [[t] for t in range(engine.vocab_size)
           if t != brace and (s := tok.decode([t])) and (s[0] in '{"}' or s[0].isspace())]
    draft = tok.encode('"a": 1}', add_special_tokens=False)
    monkeypatch.setattr(engine.spec, "propose", lambda decoding, n: {r.request_id: list(draft) for r in decoding})
    verified = []
    real = engine.runner._verify
    monkeypatch.setattr(engine.runner, "_verify", lambda seqs, *a, **k: verified.append(1) or real(seqs, *a, **k))
    params = SamplingParams(temperature=0, max_tokens=8, structured_output=StructuredOutput(json_object=True),
                            bad_words_token_ids=ban)
    rid, outs = engine.add_request(tok.encode("Copy: {\"a\": 1}. Copy: ", add_special_tokens=False), params), []
    while engine.has_unfinished():
        outs += [o for o in engine.step() if o.request_id == rid]
    assert verified and [t for o in outs for t in o.new_token_ids] == [brace]
    assert outs[-1].finished and isinstance(outs[-1].error, InvalidSamplingParams)
    assert "left no token the json_object allows" in str(outs[-1].error)
