"""Sampler options past float32's range through the HTTP API, on a real tiny model: a DRY base of 1e300 raised
OverflowError in the engine step (1e300 ** 2), which failed the request; a repetition penalty of 1e39 was inf in
the sampler (tests/sample/test_float32_range.py has the sampler's side)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.served import ServedModel
from hearth.engine.async_engine import AsyncEngine
from hearth.llm import LLM
from tests.gguf_factory import write_tiny_gguf
from tests.server.fakes import TEMPLATE

REPEAT = [5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6]  # "5 6 ... 5 6" repeats: 7 would extend it


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path, "qwen2", chat_template=TEMPLATE, context=256, tied=False)
    llm = LLM(str(path), max_model_len=256, max_num_batched_tokens=64, progress=False)
    with TestClient(create_app(ServedModel.from_llm(llm, ["tiny"], AsyncEngine(llm.engine))),
                    raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("options", [dict(dry_multiplier=1.0, dry_base=1e300, dry_allowed_length=0),
                                     dict(dry_multiplier=1e300, dry_allowed_length=0),
                                     dict(repeat_penalty=1e300, repeat_last_n=-1)])
def test_a_sampler_option_past_float32_answers(client, options):
    r = client.post("/completion", json={"prompt": REPEAT, "n_predict": 3, "temperature": 0, "return_tokens": True,
                                         **options})
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert len(tokens) == 3 and all(0 <= t < 320 for t in tokens)  # the tiny vocabulary
    if "dry_multiplier" in options:  # the penalty, capped, still acts: 7 would extend the repeat
        assert tokens[0] != 7
