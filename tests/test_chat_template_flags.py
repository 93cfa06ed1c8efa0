"""A chat template in place of the GGUF's: vLLM's --chat-template (the template or a file) and
llama-server's --chat-template NAME / --chat-template-file FILE on `hearth run` and `hearth serve`
(EngineConfig.chat_template, LLM(chat_template=...)); a bad one is one line naming its flag, before
any load."""

from __future__ import annotations

import pytest

from hearth.cli import main
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf

MARKED = "{% for m in messages %}[[{{ m['role'] }}]]{{ m['content'] }}{% endfor %}[[assistant]]"


@pytest.fixture
def no_model_load(monkeypatch):
    import hearth.llm

    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: pytest.fail("loaded a model for bad input"))


BAD = [
    (["--chat-template", "{% for m in messages %}{{ m"], "--chat-template: the chat template does not parse: "),
    (["--chat-template", "nosuch"], "--chat-template: 'nosuch' is not a file, a Jinja template nor a built-in "
                                    "(chatml, gemma, llama2, llama3, mistral-v7, phi3, deepseek, deepseek3)"),
    # was "--chat-template-file: [Errno 2] No such file or directory: '/no/such/file.jinja'"
    (["--chat-template-file", "/no/such/file.jinja"], "--chat-template-file /no/such/file.jinja: No such file or "
                                                      "directory"),
    (["--chat-template", "chatml", "--chat-template-file", "x.jinja"],
     "--chat-template and --chat-template-file both give the template: give one of them"),
]


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize("flags, line", BAD, ids=[" ".join(f) for f, _ in BAD])
def test_a_bad_template_is_one_line_before_the_load(command, flags, line, capsys, no_model_load):
    argv = [command, "no-such-model.gguf", *(["hi"] if command == "run" else ["--port", "0"]), *flags]
    assert main(argv) == 1
    assert capsys.readouterr().err.strip().startswith(f"hearth: error: {line}")


def test_the_template_replaces_the_files(tmp_path):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, "llama", chat_template="{% for m in messages %}<{{ m['content'] }}>{% endfor %}")
    messages = [{"role": "user", "content": "hi"}]
    own = LLM(str(path), max_model_len=64, progress=False)
    assert own.chat_template.render(messages) == "<hi>"
    given = LLM(str(path), max_model_len=64, progress=False, chat_template=MARKED)
    assert given.chat_template.render(messages) == "[[user]]hi[[assistant]]" and not given.chat_template.is_fallback


@pytest.mark.parametrize("flag, value", [("--chat-template", "chatml"), ("--chat-template", "FILE"),
                                         ("--chat-template-file", "FILE"), ("--chat-template", MARKED)])
def test_each_spelling_reaches_the_engine(flag, value, tmp_path, monkeypatch):
    import argparse

    from hearth.commands import serve

    file = tmp_path / "t.jinja"
    file.write_text(MARKED)
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["m.gguf", flag, str(file) if value == "FILE" else value])
    text = serve.engine_args(args)["chat_template"]
    assert text.startswith("\n{%- for message in messages") if value == "chatml" else text == MARKED


def test_chat_template_kwargs_are_every_render_s_defaults_a_request_s_own_win(tmp_path):
    """llama-server's --chat-template-kwargs '{"enable_thinking": false}' (Qwen3's switch, as model cards give
    it): every chat renders with it; a request's chat_template_kwargs still set their own."""
    from hearth.api.chat_template import ChatTemplate
    from hearth.cli import command_parser
    from hearth.commands.template_flags import chat_template_kwargs
    from hearth.errors import HearthError

    args = command_parser("serve").parse_args(["m", "--chat-template-kwargs", '{"enable_thinking": false}'])
    defaults = chat_template_kwargs(args)
    assert defaults == {"enable_thinking": False}
    t = ChatTemplate("{{ 'think' if enable_thinking | default(true) else 'no' }}", None, None, "", defaults)
    assert t.render([]) == "no" and t.render([], enable_thinking=True) == "think"
    for bad, why in [("{", "not JSON"), ("[1]", "a JSON object")]:
        with pytest.raises(HearthError, match=f"--chat-template-kwargs.*{why}"):
            chat_template_kwargs(command_parser("serve").parse_args(["m", "--chat-template-kwargs", bad]))


def test_an_llm_renders_with_the_server_s_template_kwargs(tmp_path):
    from hearth import LLM
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path / "t.gguf"
    write_tiny_gguf(path, "llama")
    template = "{{ messages[0]['content'] }}{{ ' /no_think' if not enable_thinking | default(true) else '' }}"
    llm = LLM(str(path), progress=False, chat_template=template, chat_template_kwargs={"enable_thinking": False})
    assert llm.chat_template.render([{"role": "user", "content": "hi"}]) == "hi /no_think"
