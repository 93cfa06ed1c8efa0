"""llama-server's built-in template names (--chat-template llama3, ...): each renders a two-turn conversation as its
model family's published chat format does (the text below is that format, written out by hand)."""

import argparse

import pytest

from hearth.api.chat_template import ChatTemplate, template_text

CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "How are you?"}]
DS_BOS, DS_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

EXPECTED = {
    "llama2": ("<s>", "</s>", "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? "
                              "[/INST]"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>",
               "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
               "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "mistral-v7": ("<s>", "</s>", "<s>[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>"
                                  "[INST] How are you?[/INST]"),
    "phi3": ("<s>", "<|endoftext|>", "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
                                     "<|user|>\nHow are you?<|end|>\n<|assistant|>\n"),
    "deepseek": (DS_BOS, DS_EOS, f"{DS_BOS}Be brief.\n\nUser: Hi\n\nAssistant: Hello!{DS_EOS}User: How are you?\n\n"
                                 "Assistant:"),
    "deepseek3": (DS_BOS, DS_EOS, f"{DS_BOS}Be brief.<｜User｜>Hi<｜Assistant｜>Hello!{DS_EOS}<｜User｜>How are "
                                  "you?<｜Assistant｜>"),
}


@pytest.mark.parametrize("name", EXPECTED)
def test_a_named_template_renders_its_family_s_format(name):
    bos, eos, text = EXPECTED[name]
    assert ChatTemplate(template_text(name), bos, eos, "llama").render(CONVERSATION) == text


@pytest.mark.parametrize("name", EXPECTED)
def test_a_named_template_reads_a_message_s_text_parts(name):
    bos, eos, text = EXPECTED[name]
    parts = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in CONVERSATION]
    assert ChatTemplate(template_text(name), bos, eos, "llama").render(parts) == text


@pytest.mark.parametrize("name", EXPECTED)
def test_chat_template_flag_takes_the_name(name):
    """--chat-template llama3 was "not a file, a Jinja template nor a built-in (chatml, gemma)"."""
    from hearth.commands.template_flags import chat_template

    assert chat_template(argparse.Namespace(chat_template=name, chat_template_file=None)) == template_text(name)
