"""GET /props, llama-server's server properties (its web UI and llama.vscode read them first), on the
scripted engine: the shape its README documents, as far as hearth has the data; `?model=` picks a
model of several; errors in llama-server's shape; POST /props refused with a 4xx that says why.
The real values of a loaded model (path, slots) are in tests/server/test_llama_completion.py."""

from __future__ import annotations

from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.model_pool import ModelPool
from tests.server.fakes import CHATML_NO_TOOLS, TEMPLATE, fake_served


def test_props_has_llama_servers_shape(fake):
    r = fake.client.get("/props")
    assert r.status_code == 200, r.text
    body = r.json()
    assert {"default_generation_settings", "total_slots", "model_path", "chat_template", "chat_template_caps",
            "modalities", "build_info", "is_sleeping"} <= set(body)
    settings = body["default_generation_settings"]
    assert settings["n_ctx"] == 4096 and settings["is_processing"] is False and settings["speculative"] is False
    params = settings["params"]  # the /completion defaults (llama-server's), as its replies name them
    assert (params["temperature"], params["top_k"], params["top_p"], params["min_p"]) == (0.8, 40, 0.95, 0.05)
    assert params["n_predict"] == -1 and params["seed"] == -1 and params["stop"] == []
    # llama-server's default chain, every sampler hearth runs, in the order hearth.sample.sampler runs them
    assert params["samplers"] == ["penalties", "dry", "temperature", "top_n_sigma", "min_p", "top_k", "typ_p",
                                  "top_p", "xtc"]
    assert body["chat_template"] == TEMPLATE and body["chat_template_caps"]["supports_tools"] is True
    assert body["modalities"] == {"vision": False, "audio": False} and body["total_slots"] == 1
    assert body["build_info"] == "hearth" and body["is_sleeping"] is False and body["model"] == "fake-model"


def test_props_of_a_named_model():
    pool = ModelPool.of([fake_served(names=("big", "big-q4")), fake_served(CHATML_NO_TOOLS, names=("small",))])
    with TestClient(create_app(pool), raise_server_exceptions=False) as client:
        assert client.get("/props").json()["chat_template"] == TEMPLATE  # the default model: the first
        small = client.get("/props", params={"model": "small"}).json()
        assert small["model"] == "small" and small["chat_template"] == CHATML_NO_TOOLS
        assert small["chat_template_caps"]["supports_tools"] is False
        assert client.get("/props", params={"model": "big-q4"}).json()["model"] == "big"  # an alias
        r = client.get("/props", params={"model": "nope"})
        assert r.status_code == 404 and r.json()["error"]["code"] == 404 and "nope" in r.json()["error"]["message"]


def test_changing_props_is_refused(fake):
    r = fake.client.post("/props", json={"n_ctx": 8})
    assert r.status_code == 405
    error = r.json()["error"]
    assert error["code"] == 405 and error["message"].startswith("POST /props: changing the server's properties")


def test_props_reads_slots_and_speculation_from_the_engine(fake):
    """total_slots and speculative are the engine's own figures (AsyncEngine's, or a cluster's sum over
    its replicas), read as /props asks, never a copy taken when the model was served."""
    fake.engine.total_slots, fake.engine.speculative = 5, True
    body = fake.client.get("/props").json()
    assert (body["total_slots"], body["default_generation_settings"]["speculative"]) == (5, True)
