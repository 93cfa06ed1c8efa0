"""hearth.llm.LLM.chat reads messages as the server does (hearth.api.messages): a role the server
answers with a 400 is a ValueError naming it and the roles allowed, before anything renders. The
engine's max_logprobs caps LLM.generate and LLM.chat as it caps the server (vLLM's LLM(max_logprobs=))."""

from __future__ import annotations

import re

import pytest

from hearth import SamplingParams
from hearth.api.messages import ROLES
from hearth.errors import HearthError
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", chat_template=TEMPLATE)
    return LLM(str(path), max_model_len=256, max_num_seqs=1, progress=False)


def test_an_unknown_role_names_it_and_the_allowed_ones(llm):
    messages = [{"role": "user", "content": "hi"}, {"role": "robot", "content": "beep"}]
    allowed = ", ".join(sorted(ROLES))  # the server's set, not a copy of it
    for call in (lambda: llm.chat(messages, SamplingParams(max_tokens=1)), lambda: llm.encode_chat(messages)):
        expected = f"messages[1].role: unknown role 'robot'; expected one of {allowed}"
        with pytest.raises(ValueError, match=re.escape(expected)):
            call()
    assert not llm.engine.has_unfinished()


@pytest.mark.parametrize("tools, expected", [
    ([{"type": "function"}], "tools[0].function.name: is required (a string)"),  # was rendered, nameless
    ([{"type": "function", "function": {"name": "f", "parameters": 3}}], "tools[0].function.parameters"),
])
def test_a_malformed_tool_is_named_as_the_server_names_it(llm, tools, expected):
    messages = [{"role": "user", "content": "hi"}]
    for call in (lambda: llm.chat(messages, SamplingParams(max_tokens=1), tools=tools),
                 lambda: llm.encode_chat(messages, tools)):
        with pytest.raises(ValueError, match=re.escape(expected)):
            call()
    assert not llm.engine.has_unfinished()


def test_roles_map_as_the_server_maps_them(llm):
    """developer is a system prompt, as /v1/chat/completions renders it."""
    same = llm.encode_chat([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert same == llm.encode_chat([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]  # content parts, as the server takes
    out = llm.chat(parts, SamplingParams(max_tokens=2, temperature=0))[0]
    assert len(out.outputs[0].token_ids) == 2


def test_hugging_face_tool_messages_render_and_unknown_keys_reach_the_template(tmp_path):
    """apply_chat_template's convention: a tool message answers by name (no tool_call_id, an OpenAI
    wire rule the server keeps), arguments may be a dict, and a key hearth does not read (here
    `images`) is still the template's to read."""
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                "{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}{% endif %}"
                "{% if m.name %}({{ m.name }}){% endif %}{% if m.images %}[img]{% endif %}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", chat_template=template)
    llm = LLM(str(path), max_model_len=256, max_num_seqs=1, progress=False)
    hf = [{"role": "user", "content": "w?", "images": ["x.png"]},
          {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"city": "Oslo"}}}]},
          {"role": "tool", "name": "f", "content": "cold"}]
    text = llm.tokenizer.decode(llm.encode_chat(hf))
    assert "w?[img]" in text and '{"city": "Oslo"}' in text and "cold(f)" in text
    out = llm.chat(hf, SamplingParams(max_tokens=1, temperature=0))[0]
    assert len(out.outputs[0].token_ids) == 1


@pytest.mark.parametrize("field", ["logprobs", "prompt_logprobs"])
def test_max_logprobs_caps_generate_and_chat_with_a_value_error_naming_the_field(llm, field):
    """vLLM's default of 20 (its _validate_logprobs: a ValueError naming the count and the cap): the
    library had no cap, only the HTTP API."""
    over = SamplingParams(max_tokens=1, **{field: 21})
    expected = f"{field} must be at most 20 (max_logprobs), got 21"
    for call in (lambda: llm.generate("hi", over), lambda: llm.chat([{"role": "user", "content": "hi"}], over)):
        with pytest.raises(ValueError, match=re.escape(expected)):
            call()
    assert not llm.engine.has_unfinished()
    out = llm.generate("hi", SamplingParams(max_tokens=1, temperature=0, **{field: 20}))[0]
    got = out.outputs[0].logprobs[0] if field == "logprobs" else out.prompt_logprobs[1]
    assert len(got) >= 20


def test_max_logprobs_is_the_engines_setting_and_minus_one_lifts_it(tmp_path):
    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama")
    five = LLM(str(path), max_model_len=64, max_num_seqs=1, max_logprobs=5, progress=False)
    with pytest.raises(ValueError, match=re.escape("logprobs must be at most 5 (max_logprobs), got 6")):
        five.generate("hi", SamplingParams(max_tokens=1, logprobs=6))
    uncapped = LLM(str(path), max_model_len=64, max_num_seqs=1, max_logprobs=-1, progress=False)
    vocab = uncapped.model_config.vocab_size
    out = uncapped.generate("hi", SamplingParams(max_tokens=1, temperature=0, logprobs=vocab))[0]
    assert len(out.outputs[0].logprobs[0]) == vocab
    with pytest.raises(HearthError, match=re.escape("--max-logprobs must be a number of logprobs per token "
                                                    "(-1: no cap), not -2")):
        LLM(str(path), max_logprobs=-2, progress=False)


def test_more_threads_than_cpus_is_a_warning(llm, caplog):
    """--threads 999 on a 2-CPU machine was taken without a word (and runs slower than --threads 2)."""
    import os

    import torch

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    before = torch.get_num_threads()
    try:
        with caplog.at_level("WARNING", logger="hearth"):
            LLM(str(llm.path), max_model_len=64, max_num_seqs=1, progress=False, threads=cpus + 1)
    finally:
        torch.set_num_threads(before)
    assert f"--threads {cpus + 1} is more than the {cpus} CPUs this process may use" in caplog.text
