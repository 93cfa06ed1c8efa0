"""`hearth run-batch`: an OpenAI batch file answered through the server's routes in process."""

import asyncio
import json

import pytest

from hearth.api.batch_file import read_lines
from hearth.cli import main
from hearth.errors import HearthError
from tests.test_cli import TEMPLATE


def _line(custom_id, url="/v1/chat/completions", method="POST", **body):
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def instruct(tmp_path_factory):
    from tests.gguf_factory import write_tiny_gguf

    path = tmp_path_factory.mktemp("batch") / "instruct.gguf"
    write_tiny_gguf(path, "llama", chat_template=TEMPLATE)
    return path


def test_a_batch_is_answered_in_its_order_each_line_as_the_server_answers_it(instruct, tmp_path, capsys):
    lines = [_line("chat", model="instruct", **CHAT),
             _line("text", "/v1/completions", model="instruct", prompt="the capital of", max_tokens=3),
             "",  # blank lines are skipped, as OpenAI's reader does
             _line("vector", "/v1/embeddings", model="instruct", input="hello"),
             _line("unknown model", model="nope", **CHAT),
             _line("no messages", model="instruct", messages=[]),
             _line("answer", "/v1/responses", model="instruct", input="hi", max_output_tokens=3)]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n")
    assert main(["run-batch", "-i", str(src), "-o", str(out), str(instruct), "--ctx", "256"]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert [r["custom_id"] for r in rows] == ["chat", "text", "vector", "unknown model", "no messages", "answer"]
    assert [r["response"]["status_code"] for r in rows] == [200, 200, 200, 404, 400, 200]
    assert all(r["id"].startswith("batch_req_") and r["error"] is None for r in rows)
    chat, text, vector, unknown, empty, answer = (r["response"]["body"] for r in rows)
    assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 4
    assert rows[0]["response"]["request_id"] == chat["id"]
    assert text["object"] == "text_completion" and text["usage"]["completion_tokens"] == 3
    assert len(vector["data"][0]["embedding"]) > 0
    assert unknown["error"]["code"] == "model_not_found" and "'nope'" in unknown["error"]["message"]
    assert empty["error"]["param"] == "messages"
    assert answer["object"] == "response"
    assert capsys.readouterr().err.endswith(
        f"hearth: 6 requests answered to {out}; 2 of them with an error (1 x 400, 1 x 404)\n")


@pytest.mark.parametrize("text,why", [
    ("{", "not JSON"),
    ("[1]", "not a JSON object"),
    (_line(""), "custom_id must be a non-empty string"),
    (_line("a", method="GET"), "method must be \"POST\", not 'GET'"),
    (_line("a", url="/v1/models"), "url '/v1/models' is not one a batch may name (/v1/chat/completions, "),
    (json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": "x"}),
     "body must be a JSON object"),
    (_line("a", stream=True), "body.stream: a batch's answers are whole; leave stream out"),
])
def test_each_bad_line_is_named(text, why):
    with pytest.raises(HearthError) as e:
        read_lines([_line("ok", **CHAT), text], "in.jsonl")
    assert str(e.value).startswith(f"in.jsonl line 2: {why}")


def test_a_repeated_custom_id_is_refused():
    with pytest.raises(HearthError, match=r"^f line 3: custom_id 'x' repeats line 1's$"):
        read_lines([_line("x"), "", _line("x")], "f")


def test_an_empty_file_is_an_empty_output_and_loads_nothing(tmp_path, capsys, monkeypatch):
    """As vLLM's run-batch (its test_empty_file)."""
    import hearth.commands.serve_models

    monkeypatch.setattr(hearth.commands.serve_models, "build_pool", lambda *a: pytest.fail("loaded a model"))
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n \n")
    out.write_text("old")
    assert main(["run-batch", "-i", str(src), "-o", str(out)]) == 0
    assert out.read_text() == "" and "holds no requests" in capsys.readouterr().err


def test_a_bad_output_path_fails_before_a_model_loads(tmp_path, capsys, monkeypatch):
    import hearth.commands.serve_models

    monkeypatch.setattr(hearth.commands.serve_models, "build_pool", lambda *a: pytest.fail("loaded a model"))
    src = tmp_path / "in.jsonl"
    src.write_text(_line("a", **CHAT))
    assert main(["run-batch", "-i", str(src), "-o", str(tmp_path / "no" / "out.jsonl")]) == 1
    assert "No such file or directory" in capsys.readouterr().err


def test_a_byte_order_mark_is_no_bad_line(tmp_path, capsys, monkeypatch):
    """A file saved with a UTF-8 BOM (Notepad, PowerShell 5's Out-File) was "line 1: not JSON (Unexpected UTF-8
    BOM ...)"; here line 2 is the only bad one, and the check runs before any model loads."""
    import hearth.commands.serve_models

    monkeypatch.setattr(hearth.commands.serve_models, "build_pool", lambda *a: pytest.fail("loaded a model"))
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\ufeff" + "\n".join([_line("a", **CHAT), _line("b", method="GET")]), encoding="utf-8")
    assert main(["run-batch", "-i", str(src), "-o", str(out)]) == 1
    assert capsys.readouterr().err == f"hearth: error: {src} line 2: method must be \"POST\", not 'GET'\n"


def test_many_choices_a_line_are_answered_not_refused(instruct, tmp_path):
    """Lines of n=4 on two sequences overran the engine's queue (its --max-queued): 429 rows a batch cannot
    retry."""
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(_line(str(i), **CHAT | {"n": 4, "max_tokens": 2}) for i in range(6)))
    assert main(["run-batch", "-i", str(src), "-o", str(out), str(instruct), "--ctx", "256",
                 "--max-num-seqs", "2"]) == 0
    rows = [json.loads(r) for r in out.read_text().splitlines()]
    assert [r["response"]["status_code"] for r in rows] == [200] * 6
    assert all(len(r["response"]["body"]["choices"]) == 4 for r in rows)


def test_a_failed_write_ends_the_lines_in_flight_and_is_one_line(instruct, tmp_path, capsys, monkeypatch):
    """Writing to a full disk was a traceback, and the lines still in flight loaded the model again once
    the pool had closed."""
    import contextlib
    import errno

    import hearth.commands.run_batch as run_batch

    class Full:
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

    monkeypatch.setattr(run_batch, "_output", contextlib.contextmanager(lambda path: (yield Full())))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(_line(str(i), **CHAT) for i in range(20)))
    assert main(["run-batch", "-i", str(src), "-o", "out.jsonl", str(instruct), "--ctx", "256"]) == 1
    err = capsys.readouterr().err
    assert err.endswith("hearth: error: --output-file out.jsonl: No space left on device\n")
    assert err.count("loading") == 1


def test_bad_lines_fail_before_a_model_loads_and_lose_nothing(tmp_path, capsys, monkeypatch):
    import hearth.commands.serve_models

    monkeypatch.setattr(hearth.commands.serve_models, "build_pool", lambda *a: pytest.fail("loaded a model"))
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join([_line("a", **CHAT), _line("b", method="GET"), _line("a", **CHAT)]))
    out.write_text("kept")
    assert main(["run-batch", "-i", str(src), "-o", str(out)]) == 1
    assert capsys.readouterr().err == (f"hearth: error: {src} line 2: method must be \"POST\", not 'GET'; "
                                       "line 3: custom_id 'a' repeats line 1's\n")
    assert out.read_text() == "kept"
    assert main(["run-batch", "-i", str(src), "-o", str(src)]) == 1
    assert capsys.readouterr().err == f"hearth: error: --output-file {src} is the input file; name another\n"
    assert main(["run-batch", "-i", str(tmp_path / "none.jsonl"), "-o", str(out)]) == 1
    assert "none.jsonl: No such file or directory" in capsys.readouterr().err


def test_a_server_error_and_a_failed_route_are_rows_too():
    """An engine failure is the route's 500 body; a route that raised past it is a row with `error`."""
    import io

    from fastapi import FastAPI

    from hearth.commands.run_batch import answer
    from tests.server.fakes import fake_app

    app, _ = fake_app()
    lines = read_lines([_line("fine", model="fake-model", messages=[{"role": "user", "content": "script:hello"}]),
                        _line("fails", model="fake-model", messages=[{"role": "user", "content": "script:fail"}])], "f")
    out = io.StringIO()
    statuses = asyncio.run(answer(app, lines, out, concurrency=2))
    fine, fails = (json.loads(r) for r in out.getvalue().splitlines())
    assert fine["response"]["body"]["choices"][0]["message"]["content"] == "Hello there!"
    assert fails["response"]["status_code"] == 500 and fails["response"]["body"]["error"]["type"] == "server_error"
    assert statuses == {200: 1, 500: 1}

    broken = FastAPI()

    @broken.post("/v1/chat/completions")
    def crash():
        raise RuntimeError("boom")

    out = io.StringIO()
    assert asyncio.run(answer(broken, lines[:1], out, concurrency=1)) == {0: 1}
    row = json.loads(out.getvalue())
    assert row["response"] is None and row["error"] == {"code": "server_error", "message": "RuntimeError: boom"}


def test_a_rerankers_batch(tmp_path):
    from tests.bert_factory import write_tiny_encoder

    model = tmp_path / "tiny-rerank.gguf"
    write_tiny_encoder(model, "bert", pooling_type=4)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join([_line("r", "/v1/rerank", query="a", documents=["b", "c"]),
                              _line("s", "/v1/score", text_1="a", text_2=["b", "c"]),
                              _line("e", "/v1/embeddings", input="a"),
                              *(_line(url, url, query="a", documents=["b"]) for url in ("/rerank", "/v2/rerank")),
                              _line("/score", "/score", text_1="a", text_2="b")]))  # vLLM's run-batch spellings
    assert main(["run-batch", "-i", str(src), "-o", str(out), str(model)]) == 0
    r, s, e, *spelled = (json.loads(x)["response"] for x in out.read_text().splitlines())
    assert [x["status_code"] for x in spelled] == [200, 200, 200]
    assert sorted(x["index"] for x in r["body"]["results"]) == [0, 1] and len(s["body"]["data"]) == 2
    ranked = {x["index"]: x["relevance_score"] for x in r["body"]["results"]}
    scored = {x["index"]: x["score"] for x in s["body"]["data"]}  # one pair, one score, by either route
    assert ranked == pytest.approx(scored, rel=1e-6)  # a batch's padding moves the last bits
    assert e["status_code"] == 400 and "reranker" in e["body"]["error"]["message"]


def test_a_refusal_names_the_first_five_bad_lines_and_counts_the_rest():
    with pytest.raises(HearthError) as e:
        read_lines(["{"] * 7, "f")
    assert str(e.value).count("not JSON") == 5 and str(e.value).endswith("(and 2 more bad lines)")
    assert "\n" not in str(e.value)
