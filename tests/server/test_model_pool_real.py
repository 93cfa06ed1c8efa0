"""`hearth serve --models FILE` as a subprocess with SmolLM2-135M served under three names and a
--max-memory that holds two of them: the default loads at start, the others on their first request,
two models answer at once, and a third unloads the least recently used (a real engine shut down, a
real load again)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from hearth.loader.gguf_loader import GGUFFile
from hearth.memory.serving import served_footprint
from tests.server.conftest import launch, stop

SETTINGS = {"ctx": 256, "seqs": 2, "kv_gb": 0.02}
HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def pool_server(model_path, tmp_path_factory):
    path = model_path("smollm2-135m")
    one = served_footprint(GGUFFile(path), SETTINGS["ctx"], "auto", SETTINGS["seqs"], SETTINGS["kv_gb"]).total
    tmp = tmp_path_factory.mktemp("pool")
    models = tmp / "models.toml"
    models.write_text("".join(f'[[models]]\nname = "{n}"\nmodel = "{path}"\n' for n in ("a", "b", "c")))
    proc, server = launch(None, tmp / "server.log", "--models", str(models), "--max-memory", f"{2.5 * one / 2**30:.4f}",
                          "--max-model-len", str(SETTINGS["ctx"]), "--max-num-seqs", str(SETTINGS["seqs"]),
                          "--kv-cache-memory-gb", str(SETTINGS["kv_gb"]), name=None)
    try:
        yield server
    finally:
        stop(proc)


def loaded(http) -> dict[str, bool]:
    return {m["id"]: m["hearth"]["loaded"] for m in http.get("/v1/models").json()["data"] if m["id"] == m["root"]}


def test_two_real_models_load_on_demand_and_the_lru_one_unloads(pool_server):
    http, oa = pool_server.http(), pool_server.openai()
    assert loaded(http) == {"a": True, "b": False, "c": False}  # the first is the default: loaded at start

    def ask(model: str):
        r = oa.chat.completions.create(model=model, messages=HI, max_tokens=4, temperature=0)
        return r.model, r.choices[0].message.content

    with ThreadPoolExecutor(2) as ex:  # b loads while a answers; then both answer
        answers = list(ex.map(ask, ["a", "b"]))
    assert [m for m, _ in answers] == ["a", "b"] and answers[0][1] == answers[1][1]  # the same model, greedy
    assert loaded(http) == {"a": True, "b": True, "c": False}
    ask("a")  # b is now the least recently used
    assert ask("c")[1] == answers[0][1]
    assert loaded(http) == {"a": True, "b": False, "c": True}
    log = pool_server.log.read_text()
    assert "hearth: loading b" in log and "unloading b (least recently used) to make room for c" in log
    metrics = http.get("/metrics").text
    for m in "abc":
        assert f'hearth:generation_tokens_total{{model_name="{m}"}}' in metrics
    assert 'hearth:num_requests_running{model_name="b"}' not in metrics  # unloaded: no engine to report
    r = http.post("/v1/chat/completions", json={"model": "d", "messages": HI})
    assert r.status_code == 404 and r.json()["error"]["message"].endswith("serves 'a', 'b', 'c'")
