"""A step whose grammars allow few tokens scores only those (hearth.runner.grammar_rows
SCORED_SHARE): the same tokens, logprobs and top alternatives as the whole head, on the real SmolLM2;
a row that must report a raw logprob (raw_logprobs_at matches the text so far) scores every token."""

import pytest
import torch

from hearth import SamplingParams
from hearth.backends.cpu_linear import native_part
from hearth.kernels import native
from hearth.runner import grammar_rows
from hearth.sampling_params import InvalidSamplingParams, StructuredOutput, raw_pattern
from hearth.tool_guard.declined import NAME_OPENING

CALL = {
    "type": "object",
    "properties": {
        "name": {"enum": ["get_weather", "set_alarm", "calculate_area"]},
        "arguments": {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 30},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]},
                                                        "city": {"type": "string", "maxLength": 12}},
                      "required": ["days", "unit", "city"], "additionalProperties": False},
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llm(model_path):
    """SmolLM2 without prefix caching: a prompt found in the cache computes fewer rows, in another
    kernel regime, so two runs of one prompt would differ for that reason alone."""
    from hearth import LLM

    return LLM(str(model_path("smollm2-135m")), progress=False, max_model_len=1024, enable_prefix_caching=False)


def _generate(llm, monkeypatch, share: float, params: list[SamplingParams]):
    """Outputs at this SCORED_SHARE, and per step (rows, whether the head scored only some tokens)."""
    model = llm.engine.runner.model
    scored: list[tuple[int, bool]] = []
    whole = type(model).compute_logits

    def spy(hidden, ids=None):
        scored.append((hidden.shape[0], ids is not None))
        return whole(model, hidden, ids)

    monkeypatch.setattr(grammar_rows, "SCORED_SHARE", share)
    monkeypatch.setattr(model, "compute_logits", spy)
    prompt = {"prompt_token_ids": llm.encode_chat([{"role": "user", "content": "Call a tool as JSON."}])}
    outs = llm.generate([prompt] * len(params), params)
    monkeypatch.undo()
    return [o.outputs[0] for o in outs], scored


def test_few_allowed_tokens_are_all_the_head_scores_and_nothing_changes(llm, monkeypatch):
    so = StructuredOutput(json_schema=CALL)
    params = [SamplingParams(temperature=0, max_tokens=60, logprobs=3, structured_output=so),
              SamplingParams(temperature=0.9, seed=7, max_tokens=60, logprobs=2, structured_output=so)]
    few, steps = _generate(llm, monkeypatch, grammar_rows.SCORED_SHARE, params)
    every, whole_steps = _generate(llm, monkeypatch, 0.0, params)
    assert any(f for _, f in steps) and not any(f for _, f in whole_steps)  # taken, and never by the control
    assert not all(f for _, f in steps)  # a free string (the city): every token scored
    if llm.engine.runner.forced_drafts:  # grammar drafts (not on the torch tier): verify steps scored too
        assert any(rows > len(params) and f for rows, f in steps)
    for a, b in zip(few, every):
        assert a.finish_reason == "stop"
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.logprobs == b.logprobs  # the sampled token's and the top alternatives, bit for bit


def test_a_row_without_a_grammar_or_wanting_a_raw_logprob_scores_every_token(llm, monkeypatch):
    so = StructuredOutput(json_schema=CALL)
    free = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    _, steps = _generate(llm, monkeypatch, grammar_rows.SCORED_SHARE,
                         [SamplingParams(temperature=0, max_tokens=60, structured_output=so), free])
    assert not any(f for _, f in steps[:20])  # batched with an unconstrained row: the whole head while it runs
    raw_everywhere = SamplingParams(temperature=0, max_tokens=60, logprobs=0, raw_logprobs=True, structured_output=so)
    _, steps = _generate(llm, monkeypatch, grammar_rows.SCORED_SHARE, [raw_everywhere])
    assert not any(f for _, f in steps)


def test_a_raw_logprob_where_the_call_name_opens_and_none_where_few_tokens_were_scored(llm):
    so = StructuredOutput(json_schema=CALL)
    params = SamplingParams(temperature=0, max_tokens=60, logprobs=0, raw_logprobs=True,
                            raw_logprobs_at=NAME_OPENING, structured_output=so)
    prompt = {"prompt_token_ids": llm.encode_chat([{"role": "user", "content": "Call a tool as JSON."}])}
    text, raws = b"", []
    for out in llm.stream(prompt, params):
        for t, raw in zip(out.new_token_ids, out.new_raw_logprobs or [None] * len(out.new_token_ids)):
            raws.append((text, raw))
            text += llm.tokenizer.token_to_bytes(t)
    at_name = [raw for before, raw in raws if raw_pattern(NAME_OPENING).search(before)]
    assert at_name and all(raw is not None for raw in at_name)  # the decline gate's reading is there
    assert any(raw is None for before, raw in raws if b'"days"' in before)  # past the name: few scored


def test_raw_logprobs_at_a_call_name_s_tokens_only(llm):
    """The matcher's text so far decides: the tool guard's pattern matches however the tokens split
    `"name": "`, before each of the name's tokens (the decline gate reads the lowest of them), and
    stops matching once the name's closing quote is out."""
    runner = llm.engine.runner
    m = runner.grammar.matcher(StructuredOutput(json_schema=CALL))
    pattern = raw_pattern(NAME_OPENING)
    assert not m.ends_with(pattern)
    opening = llm.tokenizer.encode('{"name":"', add_special_tokens=False)  # compact, as the grammar writes it
    for t in opening:
        assert m.accept(t)
    seen = [m.ends_with(pattern)]
    name = llm.tokenizer.encode("get_weather", add_special_tokens=False)
    assert len(name) > 1  # a name of several tokens: each one's row is read
    for t in name:
        assert m.accept(t)
        seen.append(m.ends_with(pattern))
    close = llm.tokenizer.encode('"', add_special_tokens=False)
    assert len(close) == 1 and m.accept(close[0])
    seen.append(m.ends_with(pattern))
    m.rollback(1)
    seen.append(m.ends_with(pattern))
    assert seen == [True] * len(name) + [True, False, True]


@pytest.mark.parametrize("regex", ["(unclosed", r"\u00e9"])  # the second: valid as str, not as bytes
def test_raw_logprobs_at_must_be_a_regular_expression_over_bytes(regex):
    with pytest.raises(InvalidSamplingParams, match="raw_logprobs_at"):
        SamplingParams(logprobs=0, raw_logprobs=True, raw_logprobs_at=regex)


def test_raw_pattern_matches_at_the_end_whatever_its_alternatives():
    assert raw_pattern("a|b").search(b"xb") and not raw_pattern("a|b").search(b"ax")


def test_the_scored_rows_are_the_whole_head_s_bits(llm, monkeypatch):
    model = llm.engine.runner.model
    hidden = torch.randn(3, model.cfg.hidden_size)
    ids = torch.tensor([0, 5, 17, 1000, 30000, model.cfg.vocab_size - 1])
    made = []
    if native_part(model.lm_head) is not None:  # the C++ GEMV over the rows of ids, not the whole head indexed
        real = native.NativeMatmul
        monkeypatch.setattr(native, "NativeMatmul", lambda w, *a, **k: made.append(w[0][0].shape[0]) or real(w, *a, **k))
    for rows in (1, 3):
        whole = model.compute_logits(hidden[:rows])
        few = model.compute_logits(hidden[:rows], ids)
        assert torch.equal(few[:, ids], whole[:, ids])
        assert bool(torch.isinf(few).sum(1).eq(model.cfg.vocab_size - len(ids)).all())
    assert made == ([len(ids)] * 2 if native_part(model.lm_head) is not None else [])


def test_each_grammar_state_s_mask_is_computed_once_a_step(llm, monkeypatch):
    """A verify step's chain rows: the masks the head's choice of tokens read (grammar_rows.reached)
    are the ones the rows are masked with (_constrain_rows), not computed again."""
    from hearth.sample.grammar import GrammarMatcher

    runner = llm.engine.runner
    step, seen, repeats = [0], set(), []
    bitmask, execute = GrammarMatcher.bitmask, runner.execute

    def counted(m):
        key = (step[0], id(m), len(m._ids), tuple(m._ids))  # a matcher's state within one step
        if key in seen:
            repeats.append(key)
        seen.add(key)
        return bitmask(m)

    def stepped(so):
        step[0] += 1
        return execute(so)

    monkeypatch.setattr(GrammarMatcher, "bitmask", counted)
    monkeypatch.setattr(runner, "execute", stepped)
    params = [SamplingParams(temperature=0, max_tokens=60, structured_output=StructuredOutput(json_schema=CALL))]
    outs, steps = _generate(llm, monkeypatch, grammar_rows.SCORED_SHARE, params)
    assert outs[0].finish_reason == "stop" and len(seen) > 0
    if runner.forced_drafts:  # grammar drafts (not on the torch tier): verify steps were taken
        assert any(rows > 1 for rows, _ in steps)
    assert repeats == []
