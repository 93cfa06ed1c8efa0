"""LLM.chat(tool_guard=...): the call grammar offline, on a tiny random llama given a template
that takes tools: a forced call holds even for random weights; off leaves the output free."""

from __future__ import annotations

import json

import pytest

from hearth import SamplingParams
from hearth.api.chat_template import ChatTemplate
from hearth.llm import LLM
from hearth.tool_guard import ToolGuardError
from hearth.tool_guard.offline import chat_constraint, chat_message
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import CHATML_NO_TOOLS, TEMPLATE

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
    "additionalProperties": False}}}
MESSAGES = [{"role": "user", "content": "weather in paris"}]


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", context=1024)
    llm = LLM(str(path), max_model_len=1024, progress=False)
    llm.chat_template = ChatTemplate(TEMPLATE, None, "<|im_end|>", "llama")
    return llm


def test_forced_call_holds_on_random_weights(llm):
    out = llm.chat(MESSAGES, SamplingParams(temperature=0, max_tokens=300), tools=[WEATHER], tool_choice="required")[0]
    text = out.outputs[0].text
    assert text.startswith("<tool_call>\n") and text.rstrip().endswith("</tool_call>"), text
    call = json.loads(text[len("<tool_call>"):text.rindex("</tool_call>")])
    assert call["name"] == "get_weather" and set(call["arguments"]) == {"city"}
    # the same answer as the message to append for the next turn: the call parsed, no markup left
    message = out.outputs[0].message
    assert message["role"] == "assistant" and message["content"] == ""
    [parsed] = message["tool_calls"]
    assert parsed["function"]["name"] == "get_weather" and json.loads(parsed["function"]["arguments"]) == call["arguments"]
    again = llm.chat([*MESSAGES, message, {"role": "tool", "content": "sunny"}], SamplingParams(max_tokens=2))[0]
    assert again.outputs[0].message["role"] == "assistant"  # it renders back as a turn


def test_chat_message_reads_answers_as_the_server_does():
    """Calls of offered tools in the template's format or a fenced near-miss; text stays content; no
    tools (or tool_choice none): no calls parsed, whatever the text says."""
    fenced = '```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```'
    tagged = 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    for text, content in ((fenced, ""), (tagged, "Sure.")):
        m = chat_message(TEMPLATE, [WEATHER], None, "", text, cut=False)
        assert m["content"] == content and m["tool_calls"][0]["function"] == {
            "name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert chat_message(TEMPLATE, None, None, "", tagged, cut=False) == {"role": "assistant", "content": tagged}
    assert chat_message(TEMPLATE, [WEATHER], "none", "", tagged, cut=False) == {"role": "assistant", "content": tagged}


def test_modes_pick_the_grammar():
    prompt = "<|im_start|>assistant\n"
    lazy = chat_constraint(TEMPLATE, [WEATHER], None, "guard", prompt)
    assert "trig_0[lazy]" in lazy.grammar and chat_constraint(TEMPLATE, [WEATHER], "auto", "grammar", prompt) == lazy
    assert "TEXT" not in chat_constraint(TEMPLATE, [WEATHER], "required", "guard", prompt).grammar
    assert chat_constraint(TEMPLATE, [WEATHER], None, "off", prompt) is None
    assert chat_constraint(TEMPLATE, [WEATHER], "none", "guard", prompt) is None
    assert chat_constraint(CHATML_NO_TOOLS, [WEATHER], None, "guard", prompt) is None  # no call format shown


def test_bad_mode_is_named(llm):
    with pytest.raises(ToolGuardError, match="tool_guard: unknown mode 'strict'"):
        llm.chat(MESSAGES, tools=[WEATHER], tool_guard="strict")
