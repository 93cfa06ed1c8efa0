"""llama-server's slot form on a tiny model in-process: `POST /slots/0?action=save` with only
{"filename": ...} saves the KV of the sequence that ended last (prompt and answer), as llama-server
saves its slot's cache; it was a 400 ("give exactly one of prompt and messages")."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf

BLOCK = 16  # EngineConfig.block_size


@pytest.fixture
def client(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", context=1024, tied=False)
    llm = LLM(str(path), max_model_len=256, progress=False, kv_disk_dir=str(tmp_path / "kv"))
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine)))) as c:
        yield c


def test_llama_server_slot_save_takes_the_last_sequence(client):
    r = client.post("/slots/0?action=save", json={"filename": "a.bin"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text  # nothing served yet
    prompt = "the capital of france is " * 8
    done = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 20, "temperature": 0,
                                                "ignore_eos": True}).json()
    n = done["usage"]["prompt_tokens"] + done["usage"]["completion_tokens"]
    r = client.post("/slots/0?action=save", json={"filename": "a.bin"})
    assert r.status_code == 200, r.text
    saved = r.json()
    # every full block whose K/V was computed: the last token sampled has none yet
    assert saved["n_saved"] == (n - 1) // BLOCK * BLOCK > done["usage"]["prompt_tokens"] // BLOCK * BLOCK
    r = client.post("/slots/0?action=restore", json={"filename": "a.bin"})
    assert r.status_code == 200 and r.json()["n_restored"] == saved["n_saved"], r.text


@pytest.mark.parametrize("field", ["name", "filename"])
def test_a_bad_name_is_named_once(client, field):
    """It read "name: name '../etc' must be ...", and for filename "filename: name '../etc' ..."."""
    r = client.post("/slots/save", json={field: "../etc", "prompt": "hi"})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert r.json()["error"]["message"].startswith(f"{field}: '../etc' must be 1-128 letters, digits"), r.text
