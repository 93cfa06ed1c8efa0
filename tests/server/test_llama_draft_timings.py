"""llama-server's /completion timings with speculative decoding: draft_n and draft_n_accepted, the request's own
drafts verified and accepted (llama-server adds them only where the request drafted)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import SPECULATES, write_tiny_gguf

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "cost_aware": False}


@pytest.fixture
def client(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", qtype="Q8_0", **SPECULATES)
    llm = LLM(str(path), max_model_len=256, progress=False, speculative_config=NGRAM)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine)))) as c:
        yield c, llm


@pytest.mark.usefixtures("native_speculation")
def test_completion_timings_count_the_request_s_drafts(client):
    c, llm = client
    body = {"prompt": "a b c d a b c d a b c d a b c d", "n_predict": 40, "temperature": 0, "ignore_eos": True}
    timings = [c.post("/completion", json=body).json()["timings"] for _ in range(2)]
    stats = llm.engine.spec.stats
    assert stats.num_draft_tokens > 0  # else the counts below could not be told from none
    assert sum(t.get("draft_n", 0) for t in timings) == stats.num_draft_tokens
    assert sum(t.get("draft_n_accepted", 0) for t in timings) == stats.num_accepted_tokens
    assert all(t["draft_n"] >= t["draft_n_accepted"] for t in timings if "draft_n" in t)
    plain = c.post("/completion", json={**body, "n_predict": 1}).json()["timings"]  # one token: no drafts
    assert "draft_n" not in plain
