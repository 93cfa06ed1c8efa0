"""Bad input to `hearth bench`: one line `hearth: error: ...` on stderr and exit status 1, before
any model loads or request is sent."""

from __future__ import annotations

import json
import socket

import pytest

from hearth.cli import main
from tests.bench.fake_openai import FakeServer


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "broken.json").write_text("{not json")
    (d / "other.json").write_text(json.dumps({"a": 1}))
    (d / "seed1.json").write_text(json.dumps({"hearth_bench_reference": 1, "workload": "chat", "seed": 1,
                                              "max_tokens": 128, "outputs": {}}))
    (d / "a-file").write_text("")
    return d


CASES = [
    (["--workload", "poetry"], "unknown workload 'poetry'; known: chat, long-prompt, code-edit, shared-prefix, concurrency-sweep"),
    (["--concurrency", "0"], "--concurrency must be between 1 and 1024, got 0"),
    (["--requests", "0"], "--requests must be at least 1, got 0"),
    (["--max-tokens", "-3"], "--max-tokens must be at least 1, got -3"),
    (["--warmup", "-1"], "--warmup must be 0 or more, got -1"),
    (["--ctx", "-1"], "--ctx must be a number of tokens (0: the model's own), got -1"),
    (["--threads", "-2"], "--threads must be 0 (all cores) or more, got -2"),
    (["--model", "{d}/missing.gguf"], "missing.gguf"),
    (["--device", "tpu9000", "--model", "{d}/a-file"], "unknown device 'tpu9000'"),
    (["--reference", "{d}/broken.json"], "cannot be read as JSON"),
    (["--reference", "{d}/other.json"], "is not a hearth bench reference"),
    (["--reference", "{d}/seed1.json"], "was made with seed 1, this run has 0"),
    (["--output", "{d}/a-file"], "is a file; give a folder"),
    (["--url", "ftp://example.com/v1"], "--url must be an http:// or https:// address"),
    (["--url", "http://127.0.0.1:{closed}"], "cannot reach http://127.0.0.1:{closed}: "),
    (["--url", "{fake}", "--model", "./nowhere/model.gguf"], "--model ./nowhere/model.gguf: no such file"),
    (["--levels", "1,x"], "--levels must be comma-separated numbers such as 1,8,32, got '1,x'"),
    (["--levels", "0,2"], "--levels must each be between 1 and 1024, got [0, 2]"),
    (["--levels", "1,2", "--concurrency", "2"], "give --concurrency or --levels, not both"),
    (["--server-pid", "3"], "--server-pid goes with --url; an in-process run measures its own memory"),
    (["--url", "{fake}", "--server-pid", "0"], "--server-pid must be a process id, got 0"),
    (["--url", "{fake}", "--server-pid", "99999999"], "--server-pid 99999999: no such process"),
    (["--report", "{d}/missing.json"], "--report {d}/missing.json: no such file"),
    (["--report", "{d}/broken.json"], "--report {d}/broken.json cannot be read as JSON"),
    (["--report", "{d}/other.json"], "--report {d}/other.json is not a hearth bench results.json"),
    (["--report", "{d}/other.json", "--url", "{fake}"], "--report renders earlier results and measures nothing"),
    (["--report", "{d}", "--plan", "{d}/other.json"],
     "--plan {d}/other.json is not the output of `hearth plan --json`"),
]


@pytest.mark.parametrize("argv, needle", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_one_line_error(argv, needle, files, capsys):
    closed = _closed_port()
    with FakeServer() as fake:
        fill = {"d": files, "closed": closed, "fake": fake.url}
        code = main(["bench", *(a.format(**fill) for a in argv)])
    err = capsys.readouterr().err.strip()
    assert code == 1, err
    assert len(err.splitlines()) == 1 and err.startswith("hearth: error: "), err
    assert needle.format(**fill) in err


@pytest.mark.parametrize("ctx, remedy", [("64", "lower --max-tokens or raise --ctx"),
                                         ("1000", "lower --max-tokens")])  # past the model's 256: its own runs
def test_max_tokens_past_the_context_is_one_line_before_the_load(tmp_path, capsys, monkeypatch, ctx, remedy):
    """`hearth run --max-tokens` past the context is one line before any prompt; bench's failed each prompt
    after the model loaded (in its own words). It is run's check now, on the file's header."""
    from tests.gguf_factory import write_tiny_gguf

    import hearth.llm
    dims = write_tiny_gguf(tmp_path / "m.gguf", "llama")
    context = min(int(ctx), dims.context)
    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **kw: pytest.fail("the model loaded"))
    assert main(["bench", "--model", str(tmp_path / "m.gguf"), "--ctx", ctx, "--max-tokens", str(context),
                 "--output", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (f"hearth: error: --max-tokens {context} leaves no room for a prompt in the "
                                       f"context of {context} tokens (--ctx); {remedy}\n")


@pytest.mark.parametrize("argv, context", [(["--ctx", "0"], 256), (["-c", "auto"], 256), (["--ctx-size", "0.1k"], 100)])
def test_the_context_as_run_spells_it(tmp_path, capsys, monkeypatch, argv, context):
    """bench's --ctx took a plain positive int: 0 (the model's own), auto, 32k and -c were errors, unlike run's."""
    from tests.gguf_factory import write_tiny_gguf

    import hearth.llm
    write_tiny_gguf(tmp_path / "m.gguf", "llama")  # its own context: 256
    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **kw: pytest.fail("the model loaded"))
    assert main(["bench", "--model", str(tmp_path / "m.gguf"), *argv, "--max-tokens", str(context),
                 "--output", str(tmp_path / "out")]) == 1
    assert f"leaves no room for a prompt in the context of {context} tokens" in capsys.readouterr().err


@pytest.mark.parametrize("ctx, max_tokens, remedy", [("128", "120", "lower --max-tokens or raise --ctx"),
                                                     ("1000", "250", "lower --max-tokens (--ctx is the model's own)")])
def test_a_prompt_past_the_context_names_a_remedy_that_helps(tmp_path, capsys, ctx, max_tokens, remedy):
    """A prompt that does not fit with its output: raising --ctx helps only below the model's own (256)."""
    from tests.gguf_factory import write_tiny_gguf

    write_tiny_gguf(tmp_path / "m.gguf", "llama")
    assert main(["bench", "--model", str(tmp_path / "m.gguf"), "--ctx", ctx, "--max-tokens", max_tokens,
                 "--requests", "1", "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("hearth: error: chat prompt ") and err.endswith(remedy), err
