"""`hearth serve BASE --lora-scaled FILE 1 --lora-modules ada=FILE` in process on tiny files: llama-server's
GET/POST /lora-adapters and per-request `lora`, vLLM's adapter selected by its name as `model`, each
answer the base model's or the merged model's greedy tokens; bad ids and shapes are 400s naming `lora`."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from hearth import SamplingParams
from hearth.api.app import create_app
from hearth.cli import command_parser
from hearth.commands.serve import server_config
from hearth.commands.serve_models import build_pool
from hearth.layers.linear import use_linear_policy
from hearth.llm import LLM
from tests.test_llm_lora import PROMPT, files  # noqa: F401  (the module's files fixture)

IDS = PROMPT["prompt_token_ids"]


@pytest.fixture(scope="module")
def exact():
    with use_linear_policy(exact=True):  # f32 everywhere, so the merged file's greedy tokens are the adapter's
        yield


@pytest.fixture(scope="module")
def answers(files, exact):  # noqa: F811
    greedy = SamplingParams(temperature=0, max_tokens=6)
    return {name: LLM(str(files / f"{name}.gguf"), max_model_len=128, progress=False).generate(
        {"prompt_token_ids": IDS}, greedy)[0].outputs[0] for name in ("base", "merged")}


@pytest.fixture(scope="module")
def client(files, exact):  # noqa: F811
    adapter = str(files / "adapter.gguf")
    args = command_parser("serve").parse_intermixed_args(
        [str(files / "base.gguf"), "--max-model-len", "128", "--lora-scaled", adapter, "1",
         "--lora-modules", f"ada={adapter}"])
    with TestClient(create_app(build_pool(args), server_config(args))) as c:
        yield c


def text(client, **body) -> str:
    r = client.post("/v1/completions", json={"prompt": IDS, "max_tokens": 6, "temperature": 0, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_adapters_by_global_scale_request_and_name(client, answers):
    listed = client.get("/lora-adapters").json()
    assert [(a["id"], a["scale"]) for a in listed] == [(0, 1.0), (1, 0.0)] and listed[0]["path"].endswith("adapter.gguf")
    base, merged = answers["base"].text, answers["merged"].text
    assert base != merged
    assert text(client) == merged  # adapter 0 at its global scale 1
    assert text(client, lora=[{"id": 0, "scale": 0.0}]) == base
    assert text(client, lora=[{"id": 1, "scale": 1.0}]) == merged
    assert text(client, model="ada", lora=[]) == base  # its own lora wins over the name
    r = client.post("/lora-adapters", json=[{"id": 1, "scale": 0.0}])  # adapter 0 not listed: 0
    assert r.status_code == 200 and r.json() == {"success": True}
    assert [a["scale"] for a in client.get("/lora-adapters").json()] == [0.0, 0.0]
    assert text(client) == base
    assert text(client, model="ada") == merged  # vLLM's: the name selects the adapter
    base_id = client.get("/v1/models").json()["data"][0]["id"]
    for path, body in (("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
                       ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
                       ("/v1/responses", {"input": "hi", "max_output_tokens": 1})):
        for model, answered in (("ada", "ada"), (base_id, base_id)):  # the adapter's name echoed, as vLLM
            assert client.post(path, json={**body, "model": model}).json()["model"] == answered, path
    assert "ada" in [m["id"] for m in client.get("/v1/models").json()["data"]]
    r = client.post("/completion", json={"prompt": IDS, "n_predict": 6, "temperature": 0, "return_tokens": True,
                                         "lora": [{"id": 0, "scale": 1.0}]})
    assert r.status_code == 200 and r.json()["tokens"] == answers["merged"].token_ids
    client.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}])


def test_a_module_name_selects_its_adapter_on_ollamas_routes_too(client):
    """`model: "ada"` (or "ada:latest") on /api/generate runs the adapter as on /v1/completions, not the base."""
    client.post("/lora-adapters", json=[{"id": 0, "scale": 0.0}])
    try:
        base = client.get("/v1/models").json()["data"][0]["id"]

        def ollama(model: str) -> str:
            body = {"model": model, "prompt": "hello there", "raw": True, "stream": False,
                    "options": {"temperature": 0, "num_predict": 6}}
            return client.post("/api/generate", json=body).json()["response"]
        assert ollama("ada:latest") == ollama("ada") == text(client, prompt="hello there", model="ada")
        assert ollama(base) == text(client, prompt="hello there", model=base) != ollama("ada")
    finally:
        client.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}])


def test_models_lists_a_module_as_its_own_model_with_its_parent(client, files):  # noqa: F811
    """vLLM's /v1/models: a --lora-modules adapter is an entry of its own, `parent` the base model's id and `root`
    the adapter's file as given; /v1/models/NAME answers the same entry."""
    data = client.get("/v1/models").json()["data"]
    base = data[0]
    ada = next(m for m in data if m["id"] == "ada")
    assert (base["root"], base["parent"]) == (base["id"], None)
    assert (ada["root"], ada["parent"]) == (str(files / "adapter.gguf"), base["id"])
    assert ada["max_model_len"] == base["max_model_len"] == 128
    assert client.get("/v1/models/ada").json() == ada


@pytest.mark.parametrize("path, body, needle", [
    ("/v1/completions", {"prompt": IDS, "lora": [{"id": 2, "scale": 1.0}]}, "lora: names adapter id 2"),
    ("/v1/completions", {"prompt": IDS, "lora": [{"id": 0}]}, "lora[0].scale"),
    ("/v1/completions", {"prompt": IDS, "lora": {"id": 0, "scale": 1}}, "lora"),
    ("/v1/completions", {"prompt": IDS, "lora": [{"id": -1, "scale": 1.0}]}, "lora: names adapter id -1"),
    ("/lora-adapters", [{"id": 7, "scale": 1.0}], "lora-adapters: names adapter id 7"),
    ("/lora-adapters", {"id": 0, "scale": 1.0}, "body"),
])
def test_bad_lora_input_is_a_400_naming_it(client, path, body, needle):
    r = client.post(path, json=body)
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_slots_save_says_it_holds_no_adapters_k_v(files, exact, tmp_path):  # noqa: F811
    """A conversation's K/V under an adapter is cached under the adapter's keys: saving the base model's would
    write nothing, so it is a 400 that says what to do, not 0 blocks; with the scales at 0 it saves."""
    adapter = str(files / "adapter.gguf")
    args = command_parser("serve").parse_intermixed_args(
        [str(files / "base.gguf"), "--max-model-len", "128", "--lora", adapter, "--kv-disk-dir", str(tmp_path)])
    with TestClient(create_app(build_pool(args), server_config(args))) as c:
        r = c.post("/slots/save", json={"filename": "chat", "prompt": "hello there " * 30})
        assert r.status_code == 400 and "runs LoRA adapters" in r.json()["error"]["message"]
        c.post("/lora-adapters", json=[{"id": 0, "scale": 0.0}])
        r = c.post("/slots/save", json={"filename": "chat", "prompt": "hello there " * 30})
        assert r.status_code == 200 and r.json()["n_saved"] > 0
