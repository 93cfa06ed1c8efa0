"""Chat templates render like transformers' apply_chat_template (render_jinja_template is the
reference), fall back to a built-in template by architecture, and stay inside the sandbox."""

from __future__ import annotations

import dataclasses

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from hearth.api.chat_template import ChatTemplate, ChatTemplateError
from hearth.loader.gguf_loader import GGUFFile


def hf_render(template: str, messages, **kwargs) -> str:
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, **kwargs)
    return rendered[0]


@pytest.fixture(scope="module")
def smollm_template(model_path) -> str:
    g = GGUFFile(model_path("smollm2-135m"))
    return g.get("tokenizer.chat_template")


def test_smollm2_template_from_gguf(smollm_template):
    chat = ChatTemplate(smollm_template, "<|im_start|>", "<|im_end|>", "llama")
    assert not chat.is_fallback
    messages = [{"role": "system", "content": "You are concise."}, {"role": "user", "content": "What is 2+2?"}]
    expected = ("<|im_start|>system\nYou are concise.<|im_end|>\n"
                "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                "<|im_start|>assistant\n")  # checked by hand against the template text
    assert chat.render(messages) == expected
    assert expected == hf_render(smollm_template, messages, add_generation_prompt=True,
                                 bos_token="<|im_start|>", eos_token="<|im_end|>")
    # without a system message the template supplies SmolLM's own
    user_only = [{"role": "user", "content": "Hi"}]
    assert chat.render(user_only, add_generation_prompt=False) == hf_render(smollm_template, user_only)
    assert chat.render(user_only).startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


# templates exercising what HF provides: tojson options, loop controls, namespace, generation
# blocks, strftime_now, dict(), tools and extra kwargs
HF_FEATURES = [
    "{{ messages | tojson }}|{{ messages[0] | tojson(indent=2, sort_keys=True) }}|{{ tools | tojson }}",
    "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
    "{% if m.role == 'system' %}{% continue %}{% endif %}[{{ m.role }}:{{ m.content }}]{% endfor %}",
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content | length %}"
    "{% endfor %}{{ ns.n }}",
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
    "{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
    "{{ strftime_now('%Y') | length }} {{ dict(a=1) | tojson }} {{ enable_thinking }}",
    "  {% if add_generation_prompt %}\n    <gen>\n  {% endif %}\n{{ bos_token }}{{ eos_token }}",
]
MESSAGES = [{"role": "system", "content": "Sé breve — 简洁"}, {"role": "user", "content": "Hi \"there\""},
            {"role": "assistant", "content": "Hello!"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("template", HF_FEATURES)
def test_renders_like_transformers(template):
    chat = ChatTemplate(template, "<s>", "</s>", "llama")
    ours = chat.render(MESSAGES, tools=TOOLS, enable_thinking=False)
    assert ours == hf_render(template, MESSAGES, tools=TOOLS, add_generation_prompt=True,
                             bos_token="<s>", eos_token="</s>", enable_thinking=False)


def test_gemma_fallback_when_the_gguf_has_no_template():
    # gemma-3-270m's GGUF carries no template (checked in tests/loader/test_tokenizer.py)
    chat = ChatTemplate(None, "<bos>", "<eos>", "gemma3")
    assert chat.is_fallback
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": [{"type": "text", "text": "Why?"}]}]
    # Gemma 3's own format: system text folded into the first user turn, assistant -> model
    assert chat.render(messages) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nWhy?<end_of_turn>\n"
        "<start_of_turn>model\n")
    with pytest.raises(ChatTemplateError, match="alternate"):
        chat.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_chatml_is_the_general_fallback():
    chat = ChatTemplate(None, "<s>", "</s>", "qwen3")
    assert chat.render([{"role": "user", "content": "Hi"}], add_generation_prompt=False) == \
        "<|im_start|>user\nHi<|im_end|>\n"


def test_raise_exception_carries_the_template_message():
    template = "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
    chat = ChatTemplate(template, "", "", "llama")
    with pytest.raises(ChatTemplateError) as e:
        chat.render([{"role": "assistant", "content": "x"}])
    assert str(e.value) == "first must be user"


@pytest.mark.parametrize("template", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__ }}{{ cycler.__init__.__globals__ }}",
    "{% set x = [] %}{{ x.append(1) }}",
    "{{ raise_exception.__globals__ }}",
    "{{ ''.__class__ }}",
    "{% set ns = namespace() %}{% set ns._private = 1 %}",
])
def test_sandbox_refuses_internals(template):
    with pytest.raises(ChatTemplateError):
        ChatTemplate(template, "", "", "llama").render([{"role": "user", "content": "x"}])


def test_template_errors_are_hearth_errors():
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for m in messages %}", "", "", "llama")
    with pytest.raises(ChatTemplateError, match="undefined"):
        ChatTemplate("{{ foo.bar }}", "", "", "llama").render([])
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ 1 + 'a' }}", "", "", "llama").render([])


def test_message_objects_are_reduced_to_plain_data():
    @dataclasses.dataclass
    class Message:
        role: str
        content: str

    chat = ChatTemplate("{% for m in messages %}{{ m.role }}={{ m['content'] }};{% endfor %}", "", "", "x")
    messages = [Message("user", "hi"), {"role": "assistant", "content": "yo"}]
    assert chat.render(messages) == "user=hi;assistant=yo;"


# harmony-like (gpt-oss's format), written for this test: the constructs gpt-oss's own GGUF template uses --
# recursive macros rendering JSON schemas as TypeScript, strftime_now, a reasoning_effort kwarg, namespace
# state across the loop, dict .items(), map("tojson") | join, the assistant's `thinking` and tool calls
HARMONY_LIKE = """
{%- macro ts_type(p) -%}
{%- if p.enum is defined -%}{{ p.enum | map("tojson") | join(" | ") }}
{%- elif p.type == "array" -%}{{ ts_type(p["items"]) }}[]
{%- elif p.type in ["integer", "number"] -%}number
{%- else -%}{{ p.type | default("any") }}{%- endif -%}
{%- endmacro -%}
{%- macro tool_namespace(name, tools) -%}
namespace {{ name }} {
{% for t in tools %}{% set f = t.function %}
// {{ f.description | default("") }}
type {{ f.name }} = (_: {
{%- for key, p in f.parameters.properties.items() %}
{{ key }}{{ "" if key in (f.parameters.required or []) else "?" }}: {{ ts_type(p) }},
{%- endfor %}
}) => any;
{% endfor %}
} // namespace {{ name }}
{%- endmacro -%}
<|start|>system<|message|>Current date: {{ strftime_now("%Y-%m-%d") }}

Reasoning: {{ reasoning_effort | default("medium") }}

# Valid channels: analysis, commentary, final.<|end|>
{%- set ns = namespace(developer=none, last_call=none) -%}
{%- if messages[0].role in ["system", "developer"] %}{% set ns.developer = messages[0].content %}{% endif -%}
{%- if ns.developer or tools -%}
<|start|>developer<|message|>{% if ns.developer %}# Instructions

{{ ns.developer }}
{% endif %}{% if tools %}
# Tools

{{ tool_namespace("functions", tools) }}{% endif %}<|end|>
{%- endif -%}
{%- for m in messages if m.role not in ["system", "developer"] -%}
{%- if m.role == "user" -%}<|start|>user<|message|>{{ m.content }}<|end|>
{%- elif m.role == "assistant" and m.tool_calls -%}
{%- if m.thinking %}<|start|>assistant<|channel|>analysis<|message|>{{ m.thinking }}<|end|>{% endif -%}
{%- for tc in m.tool_calls %}{% set ns.last_call = tc.function.name -%}
<|start|>assistant to=functions.{{ tc.function.name }}<|channel|>commentary json<|message|>
{{- tc.function.arguments | tojson }}<|call|>
{%- endfor -%}
{%- elif m.role == "assistant" -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>
{%- elif m.role == "tool" -%}
{%- if ns.last_call is none %}{{ raise_exception("a tool result must follow a tool call") }}{% endif -%}
<|start|>functions.{{ ns.last_call }} to=assistant<|channel|>commentary<|message|>{{ m.content | tojson }}<|end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|start|>assistant{% endif -%}
"""
HARMONY_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "array", "items": {"type": "integer"}}}}}}]
HARMONY_MESSAGES = [
    {"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "thinking": "Need the tool.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "18 C, sunny"}, {"role": "assistant", "content": "18 °C et soleil."},
    {"role": "user", "content": "Merci"}]


def test_a_harmony_like_template_renders_like_transformers():
    chat = ChatTemplate(HARMONY_LIKE, "<|startoftext|>", "<|return|>", "gpt-oss")
    ours = chat.render(HARMONY_MESSAGES, tools=HARMONY_TOOLS, reasoning_effort="high")
    assert ours == hf_render(HARMONY_LIKE, HARMONY_MESSAGES, tools=HARMONY_TOOLS, add_generation_prompt=True,
                             reasoning_effort="high")
    assert "Reasoning: high" in ours and ours.endswith("<|start|>user<|message|>Merci<|end|><|start|>assistant")
    assert 'type get_weather = (_: {city: string,unit?: "c" | "f",days?: number[],}) => any;' in ours
    assert ('<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant to=functions.'
            'get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>') in ours
    # OpenAI-style clients send the reasoning as reasoning_content: the template reads it as `thinking`
    aliased = [{k: v for k, v in m.items() if k != "thinking"} | ({"reasoning_content": m["thinking"]}
                                                                  if "thinking" in m else {}) for m in HARMONY_MESSAGES]
    assert chat.render(aliased, tools=HARMONY_TOOLS, reasoning_effort="high") == ours
    with pytest.raises(ChatTemplateError, match="a tool result must follow a tool call"):
        chat.render([{"role": "tool", "content": "x"}])
