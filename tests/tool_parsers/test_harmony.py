"""gpt-oss's harmony output through OutputParser: the analysis channel as reasoning, final and
commentary as content, messages to functions.NAME as calls; with and without tools, whole and split
at every position, never a marker in a content or reasoning delta. (The table of
tests/tool_parsers/cases.py checks content and calls for the format too.)"""

from __future__ import annotations

import json

import pytest
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper

from hearth.tool_parsers import (ContentDelta, OutputParser, ReasoningDelta, ToolCallArgumentsDelta, ToolCallEvent,
                                 ToolCallStart, call_constraint, collect, detect_channels, detect_format,
                                 detect_reasoning, supports_tools)
from tests.tool_parsers import templates as t
from tests.tool_parsers.cases import ADD, PARIS, THOUGHT, TOOLS, harmony_call
from tests.tool_parsers.splits import splits
from tests.tool_parsers.test_schema import _accepts, _Bytes

MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|constrain|>", "<|call|>", "<|return|>")
REASONS = "The user wants the weather."

# text -> (reasoning, content, calls) with tools offered
OUTPUTS = [
    (THOUGHT + "<|channel|>final<|message|>It is sunny in Paris.<|return|>", REASONS, "It is sunny in Paris.", []),
    (THOUGHT + harmony_call("get_weather", '{"city": "Paris"}'), REASONS, "", [PARIS]),
    (THOUGHT + harmony_call("get_weather", '{"city": "Paris"}', "<|call|>", role=True), REASONS, "", [PARIS]),
    (harmony_call("get_weather", '{"city": "Paris"}') + "<|start|>assistant" + harmony_call("add", '{"a": 1, "b": 2}'),
     "", "", [PARIS, ADD]),
    (THOUGHT + "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant"
     + harmony_call("add", '{"a": 1, "b": 2}', ""), REASONS, "Checking.", [ADD]),
    ("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
     "<|start|>assistant<|channel|>final<|message|>c", "ab", "c", []),
    ("Plain text, no channels.", "", "Plain text, no channels.", []),
    ("<|channel|>analysis<|message|>cut in the middle of a thou", "cut in the middle of a thou", "", []),
]


def run(parser: OutputParser, deltas: list[str]) -> list:
    return [e for d in deltas for e in parser.feed(d)] + parser.finish()


@pytest.mark.parametrize("text, reasoning, content, calls", OUTPUTS)
def test_channels_whole_and_at_every_split(text, reasoning, content, calls):
    for announce in (False, True):
        for deltas in splits(text, n_random=5):
            events = run(OutputParser("harmony", TOOLS, announce=announce, channels="harmony"), deltas)
            got = collect(events)
            assert (got.reasoning, got.content) == (reasoning, content), deltas
            assert [(c.name, json.loads(c.arguments)) for c in got.tool_calls] == calls, deltas
            texts = [e.text for e in events if isinstance(e, (ContentDelta, ReasoningDelta))]
            assert all(x and not any(m in x for m in MARKERS) for x in texts), deltas


def test_without_tools_the_channels_split_and_a_call_is_its_body():
    """A request without tools has no tool format (tool_format None), only the channels."""
    text = THOUGHT + harmony_call("get_weather", '{"city": "Paris"}')
    got = OutputParser(None, None, channels="harmony").parse(text)
    assert (got.reasoning, got.content, got.tool_calls) == (REASONS, '{"city": "Paris"}', [])
    final = OutputParser(None, None, channels="harmony").parse(THOUGHT + "<|channel|>final<|message|>Hi")
    assert (final.reasoning, final.content) == (REASONS, "Hi")


def test_without_channels_the_markers_are_text():
    """What the channels argument does: without it (a template that is no harmony one) nothing is read."""
    text = THOUGHT + "<|channel|>final<|message|>Hi"
    assert OutputParser(None, None).parse(text).content == text


def test_arguments_stream_as_written_in_openai_shape():
    parser = OutputParser("harmony", TOOLS, channels="harmony")
    head = "<|channel|>commentary to=functions.add <|constrain|>json<|message|>"
    got = [parser.feed(d) for d in ["<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant", head,
                                    '{"a": 1', '2, "b": ', "3}"]]
    assert got[0] == [ReasoningDelta("Add them.")] and got[1] == [] and got[2] == []
    start, piece = got[3]
    assert isinstance(start, ToolCallStart) and start.name == "add" and piece == ToolCallArgumentsDelta(0, '{"a": 12')
    assert got[4] == [ToolCallArgumentsDelta(0, ', "b": 3}')]
    [done] = parser.finish()  # <|call|> stopped generation: it never reaches the text
    assert isinstance(done, ToolCallEvent) and done.call.id == start.id and done.call.arguments == '{"a": 12, "b": 3}'


def test_detected_from_the_template():
    assert detect_format(t.HARMONY) == detect_channels(t.HARMONY) == "harmony"
    assert supports_tools(t.HARMONY) and detect_reasoning(t.HARMONY) == (False, False)
    assert detect_channels(t.QWEN3) is None and detect_channels(None) is None


def test_a_forced_call_may_follow_one_analysis_message():
    tokenizer = LLTokenizer(TokenizerWrapper(_Bytes()))
    grammar = call_constraint("harmony", TOOLS, {"type": "function", "function": {"name": "add"}}).lark()
    call = harmony_call("add", '{"a": 1, "b": 2}', "")
    assert _accepts(tokenizer, grammar, call)
    assert _accepts(tokenizer, grammar, "<|channel|>analysis<|message|>a < b<|end|><|start|>assistant" + call)
    assert not _accepts(tokenizer, grammar, harmony_call("search", '{"query": "x"}', ""))  # named: add only
    assert not _accepts(tokenizer, grammar, "<|channel|>final<|message|>No.")
    assert LLMatcher.validate_grammar(grammar, tokenizer) == ""


def test_llm_chat_reads_the_channels_with_and_without_tools():
    """LLM.chat's reading of an answer (hearth.tool_guard.offline.chat_message), from the template alone."""
    from hearth.tool_guard.offline import chat_message
    text = THOUGHT + harmony_call("get_weather", '{"city": "Paris"}', "")
    message = chat_message(t.HARMONY, TOOLS, None, "", text, False)
    assert message["reasoning_content"] == REASONS and message["content"] == ""
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    plain = chat_message(t.HARMONY, None, None, "", THOUGHT + "<|channel|>final<|message|>Hi", False)
    assert (plain["reasoning_content"], plain["content"]) == (REASONS, "Hi")


def test_the_guard_s_lazy_grammar_holds_a_call_once_its_opener_is_written():
    """tool_choice auto under the tool guard: free text (the analysis channel, a final answer) until
    `<|channel|>commentary to=functions.` (or the recipient in the role: `<|start|>assistant to=functions.`,
    or ` to=functions.` first in the output), then an offered tool with its own arguments' schema."""
    from hearth.tool_guard import lazy_tool_grammar
    tokenizer = LLTokenizer(TokenizerWrapper(_Bytes()))
    grammar = lazy_tool_grammar("harmony", TOOLS)
    assert LLMatcher.validate_grammar(grammar, tokenizer) == ""
    assert _accepts(tokenizer, grammar, THOUGHT + harmony_call("add", '{"a": 1, "b": 2}', ""))
    assert _accepts(tokenizer, grammar, THOUGHT + harmony_call("add", '{"a": 1, "b": 2}', "", role=True))
    assert _accepts(tokenizer, grammar, harmony_call("add", '{"a": 1, "b": 2}', "", role=True))  # the output's first
    assert not _accepts(tokenizer, grammar, THOUGHT + harmony_call("rm_rf", "{}", "", role=True))
    assert not _accepts(tokenizer, grammar, harmony_call("rm_rf", "{}", "", role=True))
    assert _accepts(tokenizer, grammar, THOUGHT + "<|channel|>final<|message|>No call needed.")
    assert not _accepts(tokenizer, grammar, THOUGHT + harmony_call("rm_rf", "{}", ""))
    assert not _accepts(tokenizer, grammar, THOUGHT + harmony_call("add", '{"a": "x", "b": 2}', ""))
