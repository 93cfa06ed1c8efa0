"""`hearth eval tools --url`: the same client loop against a server already running (here a hearth
server on a tiny random model, standing in for `llama-server --jinja`): every request reaches it,
rows say which server was measured, no model is loaded by the eval itself."""

from __future__ import annotations

import json

from hearth.cli import main
from hearth.evals.server import NAME, InProcessServer
from hearth.llm import LLM
from tests.evals.fake_bfcl import make_wheel
from tests.gguf_factory import write_tiny_gguf


def test_url_evaluates_a_running_server(tmp_path, monkeypatch):
    import hearth.evals.bfcl_data as data
    import hearth.llm

    wheel = make_wheel(tmp_path / "bfcl_eval-2026.3.23-py3-none-any.whl")
    monkeypatch.setattr(data, "fetch_wheel", lambda *a, **k: wheel)
    path = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(path, "llama", context=2048)
    # room for the eval's max_tokens (512) after a tools prompt in the byte-level vocabulary (~670 tokens)
    llm = LLM(str(path), max_model_len=2048, progress=False)
    monkeypatch.setattr(hearth.llm, "LLM", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded a model")))
    out = tmp_path / "rows.jsonl"
    with InProcessServer(llm) as server:
        url = f"http://127.0.0.1:{server.port}"
        assert main(["eval", "tools", NAME, "--url", url, "--categories", "simple_python,irrelevance",
                     "--ids", "simple_python_0,irrelevance_0", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["simple_python_0", "irrelevance_0"]
    for r in rows:
        assert r["model_sha256"] == f"external:{url}" and r["model"] == NAME
        assert r["requests"] == 1 and r["prompt_tokens"][0] > 0  # the running server answered
        assert r["result"] == "pass" or r["reason"]
