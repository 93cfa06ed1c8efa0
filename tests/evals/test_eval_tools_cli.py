"""`hearth eval tools` refuses bad input in one line, before it loads a model or fetches data."""

from __future__ import annotations

import json

import pytest

from hearth.cli import main
from tests.evals.test_tool_report import ROWS


@pytest.mark.parametrize("argv,needle", [
    (["--mode", "nope"], "--mode 'nope': unknown"),
    (["--categories", "simple_python,simple_java"], "--categories: unknown simple_java"),
    (["--limit", "-1"], "--limit must be 0"),
    (["--url", "ftp://host:21"], "--url 'ftp://host:21': give http://HOST:PORT"),
    (["--url", "http://host:abc"], "--url 'http://host:abc': give http://HOST:PORT"),
    (["--router", "small.gguf", "--url", "http://host:8080"], "--router needs the models loaded here"),
    (["--router-threshold", "0.5"], "--router-threshold needs --router SMALL"),
    (["--router-tool-floor", "0.9"], "--router-tool-floor needs --router SMALL"),
    (["--router", "small.gguf", "--router-tool-floor", "1.5"], "--router-tool-floor: must be a number in [0, 1]"),
    (["--decline-below", "2"], "--decline-below must be in [0, 1]"),
    (["--alone-out", "alone.jsonl"], "--alone-out needs --router SMALL"),
    (["--offset", "3"], "--offset needs --limit N"),
    (["--limit", "5", "--offset", "-1"], "--offset must be 0 or more"),
    (["--concurrency", "0"], "--concurrency must be 1 or more"),
    (["--compare", "missing-a.jsonl", "missing-b.jsonl"], "cannot read missing-a.jsonl"),
])
def test_bad_input_is_one_line(capsys, monkeypatch, argv, needle):
    import hearth.evals.bfcl_data as data

    monkeypatch.setattr(data, "fetch_wheel", lambda *a, **k: pytest.fail("fetched data for bad input"))
    assert main(["eval", "tools", "no-such-model.gguf", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: ") and needle in err, err


def test_compare_prints_mcnemar(capsys, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    b.write_text("".join(json.dumps({**r, "result": "fail"}) + "\n" for r in ROWS))
    assert main(["eval", "tools", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "McNemar's exact test" in out
    overall = next(line for line in out.splitlines() if line.startswith("overall"))
    assert overall.split() == ["overall", "5", "3", "0", "3", "0", "0.2500"]  # 3 discordant pairs: p = 2/8


def test_router_tool_floor_reaches_the_in_process_router(monkeypatch):
    import hearth.evals.server as server
    import hearth.llm
    import hearth.loader.fingerprint as fingerprint
    from hearth.cli import command_parser
    from hearth.commands import eval_tools

    class FakeLLM:
        def __init__(self, model, **kw):
            self.path = model

    seen = {}
    monkeypatch.setattr(hearth.llm, "LLM", FakeLLM)
    monkeypatch.setattr(fingerprint, "model_fingerprint", lambda path: "sha")
    monkeypatch.setattr(server, "InProcessServer", lambda *a: seen.setdefault("args", a))
    monkeypatch.setattr(eval_tools, "_context", lambda model, asked: 16384)
    args = command_parser("eval", "tools").parse_intermixed_args(["big.gguf", "--router", "small.gguf",
                                                         "--router-threshold", "0.3", "--router-tool-floor", "0.9"])
    _, meta = eval_tools._load(args)
    assert seen["args"][2:] == (0.3, 0.9) and meta["router_tool_floor"] == 0.9


def test_limit_help_and_error_say_the_same_thing(capsys):
    """The help once said only "(default: all)" while -1's error said "0 (all) or more"."""
    from hearth.cli import command_parser

    help_text = " ".join(command_parser("eval", "tools").format_help().split())
    assert "0 (all) or more" in help_text
    assert main(["eval", "tools", "no-such-model.gguf", "--limit", "-1"]) == 1
    assert "--limit must be 0 (all) or more, not -1" in capsys.readouterr().err


def test_mode_off_is_bare_as_serve_tool_guard_calls_it(capsys, monkeypatch):
    """`serve --tool-guard off` and `eval tools --mode bare` are one mode: both names are taken."""
    import hearth.evals.bfcl_data as data
    from hearth.cli import command_parser
    from hearth.errors import HearthError
    from hearth.evals.chat_loop import ChatClient

    client = ChatClient(lambda body: (200, {}), "off")
    assert client.mode == "bare" and client.extensions == {"tool_guard": "off"}
    assert "off" in command_parser("eval", "tools").format_help()

    def fetched(*a, **k):
        raise HearthError("past the flag checks")

    monkeypatch.setattr(data, "fetch_wheel", fetched)
    assert main(["eval", "tools", "no-such-model.gguf", "--mode", "off"]) == 1
    assert capsys.readouterr().err.strip() == "hearth: error: past the flag checks"


def test_the_default_context_is_the_model_s_own_when_shorter(monkeypatch, tmp_path):
    """The default 16,384 on SmolLM2 (8,192) loaded with "using that, not the 16,384 asked for": nobody
    asked. The default is the model's own when shorter, without a word; a --max-model-len is passed as given."""
    import hearth.evals.server as server
    import hearth.llm
    import hearth.loader.fingerprint as fingerprint
    from hearth.cli import command_parser
    from hearth.commands import eval_tools
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.gguf_shape import shape_from_gguf
    from tests.gguf_factory import write_tiny_gguf

    tiny = tmp_path / "tiny.gguf"
    write_tiny_gguf(tiny, "llama")
    trained = shape_from_gguf(GGUFFile(str(tiny))).context_length
    assert trained < eval_tools.EVAL_CONTEXT
    seen = []

    class FakeLLM:
        def __init__(self, model, **kw):
            self.path = model
            seen.append(kw["max_model_len"])

    monkeypatch.setattr(hearth.llm, "LLM", FakeLLM)
    monkeypatch.setattr(fingerprint, "model_fingerprint", lambda path: "sha")
    monkeypatch.setattr(server, "InProcessServer", lambda *a: None)
    parse = command_parser("eval", "tools").parse_intermixed_args
    eval_tools._load(parse([str(tiny)]))
    eval_tools._load(parse([str(tiny), "--max-model-len", "64"]))
    assert seen == [trained, 64]
