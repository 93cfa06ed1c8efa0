"""Where calls are in an output, and the lowest token probability inside each."""

from __future__ import annotations

import math

from hearth.tool_guard import TokenTrace, call_spans, triggers_for
from hearth.tool_guard.feedback import retry_messages
from hearth.tool_guard.checks import Problem
from hearth.tool_parsers import ToolCall

CLOSERS = ("</tool_call>", "</function>")


def test_spans_of_tagged_and_leading_calls():
    call = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    text = "Sure. " + call + " and " + call + " done"
    spans = call_spans(text, triggers_for("hermes"), CLOSERS)
    first = text.index("<tool_call>")
    second = text.index("<tool_call>", first + 1)
    assert spans == [(first, first + len(call)), (second, second + len(call))]
    assert call_spans('  {"name": "f", "arguments": {}}', triggers_for("hermes"), CLOSERS) == [(0, 32)]
    assert call_spans('text {"name": "f"}', triggers_for("hermes"), CLOSERS) == []  # a lead only opens an output
    assert call_spans("<think>no</think> text", triggers_for("hermes"), CLOSERS) == []


def test_a_leading_region_has_a_span_per_call():
    """Doubled braces, fences or bare objects opening the output: the parser reads every call there,
    each gets its own span (its fence and layout before it); a nested "name" key, a brace in a
    string or a call after other text starts none."""
    def pieces(text: str) -> list[str]:
        return [text.encode()[a:b].decode() for a, b in call_spans(text, triggers_for("hermes"), CLOSERS)]

    f = '{"name": "f", "arguments": {"p": {"name": "Bo"}, "q": "}} {\\"name\\": 1"}}'
    g = '{"name": "g", "arguments": {}}'
    assert pieces("{" + f + "}\n{" + g + "}") == ["{" + f + "}", "\n{" + g + "}"]
    assert pieces(f + "\n\n" + g + "\n") == [f, "\n\n" + g + "\n"]
    fenced = "```json\n" + f + "\n```"
    assert pieces(fenced + "\n" + fenced.replace(f, g)) == [fenced, "\n" + fenced.replace(f, g)]
    tagged = "<tool_call>\n" + g + "\n</tool_call>"
    assert pieces("{" + f + "}\n" + tagged) == ["{" + f + "}\n", tagged]
    assert pieces("{" + f + "} then {" + g + "}") == ["{" + f + "} then {" + g + "}"]  # the parser reads one
    assert pieces("{" + f + "}") == ["{" + f + "}"]


def test_min_prob_inside_the_call_only():
    pieces = {1: b"Hi ", 2: b"<tool_call>", 3: b'{"name"}', 4: b"</tool_call>", 5: b" bye"}
    trace = TokenTrace(pieces.__getitem__)
    lps = {1: -5.0, 2: -0.1, 3: -0.7, 4: -0.2, 5: -9.0}
    for t in pieces:
        trace.add(pieces[t].decode(), [t], [{t: lps[t]}])
    (span,) = call_spans(trace.text, triggers_for("hermes"), CLOSERS)
    assert trace.min_prob(*span) == round(math.exp(-0.7), 6)  # not the text's -5 or -9
    assert trace.prefix_tokens(span[0]) == [1]


def test_tokens_that_do_not_add_up_share_their_piece():
    trace = TokenTrace(lambda t: b"x")  # a tokenizer whose bytes do not add up to the text
    trace.add("Hi <tool_call>", [1, 2], [{1: -1.0}, {2: -3.0}])
    assert trace.spans == [(0, 14, -1.0), (0, 14, -3.0)]
    assert trace.min_prob(3, 14) == round(math.exp(-3.0), 6) and trace.prefix_tokens(3) == []


def test_retry_messages_put_the_error_in_the_tool_channel():
    call = ToolCall("call_1", "get_weather", '{"town": "Oslo"}')
    msgs = retry_messages("", Problem("invalid_arguments", "get_weather: missing 'city'", call), ["get_weather"])
    assert msgs[0]["tool_calls"][0]["id"] == msgs[1]["tool_call_id"] == "call_1" and msgs[1]["role"] == "tool"
    assert "missing 'city'" in msgs[1]["content"] and "get_weather" in msgs[1]["content"]
    msgs = retry_messages("It is sunny.", Problem("no_call", "a tool call was required"), ["get_weather"])
    assert msgs[0] == {"role": "assistant", "content": "It is sunny."} and msgs[1]["role"] == "user"


def test_the_decline_gate_reads_every_name_token_s_allowed_share():
    """name_prob: the lowest over the name's tokens of raw / masked probability (the share of the
    model's probability on what the grammar allowed); tokens before the name or after its closing
    quote are not read, nor a token with no raw logprob."""
    from hearth.tool_guard.declined import name_prob

    pieces = {1: b'{"name": "', 2: b"get", 3: b"_dom", 4: b"inant", 5: b'", "arguments": {}}'}
    rows = {1: (-9.0, -0.01), 2: (-0.2, -0.05), 3: (-1.4, -0.01), 4: (None, -0.01), 5: (-8.0, -0.01)}

    def trace_of(rows):
        trace = TokenTrace(pieces.__getitem__)
        for t in pieces:
            raw, lp = rows[t]
            trace.add(pieces[t].decode(), [t], [{t: lp}], [raw])
        return trace

    # bent where the name went on (the first token alone read 0.86): exp(-1.4 + 0.01)
    assert name_prob(trace_of(rows), (0, len(trace_of(rows).text.encode()))) == float(f"{math.exp(-1.39):.3g}")
    torn = {**rows, 3: (-1.2, -0.7)}  # raw 0.30, but 0.61 of it on allowed tokens: the model's own choice
    assert name_prob(trace_of(torn), (0, 40)) == float(f"{math.exp(-0.5):.3g}")
    sure = {**rows, 3: (-0.01, -0.01)}  # nothing removed there: the first token's share is the lowest
    assert name_prob(trace_of(sure), (0, 40)) == float(f"{math.exp(-0.15):.3g}")
