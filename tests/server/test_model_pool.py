"""One server, several models (issue 21): loading on first request, LRU unloading under a memory
budget, pinned and busy models kept, a model that cannot fit refused with nothing unloaded, routing
by `model`, unknown models, /v1/models and /metrics per model. Fake loaders and engines
(tests/server/fakes.py); tests/server/test_model_pool_real.py runs two real models."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from starlette.testclient import TestClient

from hearth.api.app import create_app
from hearth.api.errors import APIError
from hearth.api.model_pool import ModelPool
from hearth.api.model_spec import ModelSpec
from tests.server.fakes import FakeTokenizer, fake_served

USER = [{"role": "user", "content": "hi"}]


class FakeLoader:
    """Builds a fake served model per spec; `hold(name)` makes that model's load wait until released."""

    def __init__(self):
        self.loads: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}
        self.built: dict[str, list] = {}

    def hold(self, name: str) -> threading.Event:
        self.started[name] = threading.Event()
        self.gates[name] = threading.Event()
        return self.gates[name]

    def __call__(self, spec: ModelSpec):
        self.loads.append(spec.name)
        if spec.name in self.gates:
            self.started[spec.name].set()
            assert self.gates[spec.name].wait(timeout=60)
        served = fake_served(names=spec.names)
        self.built.setdefault(spec.name, []).append(served)
        return served

    def engine(self, name: str):
        return self.built[name][-1].engine


def specs(*items) -> list[ModelSpec]:
    """("a", 4) or ("a", 4, "pinned") or (["a", "alias"], 4), a list among the flags its file names."""
    out = []
    for names, gib, *flags in items:
        names = [names] if isinstance(names, str) else names
        files = next((f for f in flags if isinstance(f, list)), [])
        out.append(ModelSpec(names, gib << 30, pinned="pinned" in flags, max_model_len=4096, file_names=files))
    return out


def pool_of(*items, budget_gib: int = 0, busy_wait_s: float = 0.0) -> tuple[ModelPool, FakeLoader]:
    loader = FakeLoader()
    return ModelPool(specs(*items), loader, budget_gib << 30, busy_wait_s=busy_wait_s), loader


@pytest.fixture
def serve():
    clients = []

    def make(pool: ModelPool) -> TestClient:
        client = TestClient(create_app(pool), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def chat(client: TestClient, model: str | None, content: str = "hi"):
    body = {"messages": [{"role": "user", "content": content}]}
    return client.post("/v1/chat/completions", json=body if model is None else {**body, "model": model})


def loaded(client: TestClient) -> dict[str, bool]:
    return {m["id"]: m["hearth"]["loaded"] for m in client.get("/v1/models").json()["data"] if m["id"] == m["root"]}


def test_a_model_loads_on_its_first_request(serve, capfd):
    pool, loader = pool_of(("a", 1), ("b", 1))
    client = serve(pool)
    assert loader.loads == [] and loaded(client) == {"a": False, "b": False}
    r = chat(client, "b")
    assert r.status_code == 200 and r.json()["model"] == "b"
    assert loader.loads == ["b"] and loaded(client) == {"a": False, "b": True}
    assert "hearth: loading b" in capfd.readouterr().err
    chat(client, "b")
    assert loader.loads == ["b"]  # loaded once
    assert chat(client, None).json()["model"] == "a"  # no model named: the first one


def test_requests_go_to_the_model_they_name(serve):
    pool, loader = pool_of((["coder", "coder.gguf"], 1), ("chat", 1))
    client = serve(pool)
    chat(client, "coder", "for the coder")
    chat(client, "chat", "for chat")
    assert chat(client, "coder.gguf").json()["model"] == "coder"  # an alias answers as its id
    assert ["for the coder" in a.prompt for a in loader.engine("coder").added] == [True, False]
    assert ["for chat" in a.prompt for a in loader.engine("chat").added] == [True]


def test_least_recently_used_is_unloaded_and_pinned_stays(serve, capfd):
    pool, loader = pool_of(("p", 4, "pinned"), ("a", 3), ("b", 3), ("c", 3), budget_gib=10)
    client = serve(pool)
    assert loaded(client) == {"p": True, "a": False, "b": False, "c": False}  # pinned: loaded at start
    chat(client, "a")
    chat(client, "b")
    chat(client, "a")  # b is now the least recently used; p even less, but pinned
    a_engine, b_engine = loader.engine("a"), loader.engine("b")
    assert chat(client, "c").status_code == 200
    assert loaded(client) == {"p": True, "a": True, "b": False, "c": True}
    assert b_engine.stopped and not a_engine.stopped
    assert "unloading b (least recently used) to make room for c" in capfd.readouterr().err
    assert chat(client, "b").json()["model"] == "b"  # back on demand, unloading a (now the LRU)
    assert loaded(client) == {"p": True, "a": False, "b": True, "c": True} and loader.loads.count("b") == 2


def test_a_model_that_cannot_fit_is_refused_and_nothing_is_unloaded(serve):
    pool, loader = pool_of(("p", 4, "pinned"), ("a", 3), ("huge", 7), budget_gib=10)
    client = serve(pool)
    chat(client, "a")
    r = chat(client, "huge")
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["code"] == "model_too_large" and err["param"] == "model"
    assert "'huge' needs 7.00 GiB" in err["message"] and "10.00 GiB" in err["message"] and "'p'" not in err["message"]
    assert "pinned p (4.00 GiB)" in err["message"]
    assert loaded(client) == {"p": True, "a": True, "huge": False} and "huge" not in loader.loads
    r = client.post("/v1/messages", json={"model": "huge", "max_tokens": 5, "messages": USER})
    assert r.status_code == 503 and r.json()["type"] == "error" and "needs 7.00 GiB" in r.json()["error"]["message"]
    # no retry fixes it: no Retry-After, and the openai / anthropic SDKs' own retries are told off
    assert "retry-after" not in r.headers and r.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("kv_gib, words", [
    (6, "most of that is its KV cache (6.00 GiB): --kv-cache-memory-gb caps it (default 2 GiB), and its `context` "
        "in the --models file (or --max-model-len) sizes it below that cap"),
    (1, "most of that is its weights (6.00 GiB): a smaller quantization of the model needs less"),
])
def test_a_model_too_large_says_what_makes_most_of_its_share(serve, kv_gib, words):
    pool, _ = pool_of(("a", 1), ("huge", 7), budget_gib=4)
    pool.slots[1].spec.kv_bytes = kv_gib << 30
    err = chat(serve(pool), "huge").json()["error"]
    assert err["code"] == "model_too_large" and err["message"].endswith(words), err["message"]


def test_a_busy_model_s_503_carries_retry_after_on_both_wires(serve):
    """The openai SDK waits what Retry-After says (up to 60 s); without it, its own backoff."""
    pool, loader = pool_of(("a", 4), ("b", 4), budget_gib=4, busy_wait_s=0.2)
    client = serve(pool)
    assert chat(client, "a").status_code == 200
    held = loader.engine("a").add_request([1], _params(), request_id="r1")  # a keeps its room
    try:
        r = chat(client, "b")
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_busy" and r.headers["retry-after"] == "1"
        r = client.post("/v1/messages", json={"model": "b", "max_tokens": 5, "messages": USER})
        assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded_error"
        assert r.headers["retry-after"] == "1" and "x-should-retry" not in r.headers
    finally:
        held.abort()


def test_a_model_in_use_is_not_unloaded_under_its_requests():
    async def scenario():
        pool, loader = pool_of(("a", 4), ("b", 4), ("c", 4), budget_gib=8)
        a = await pool.get("a")
        await pool.get("b")
        busy = a.engine.add_request([1, 2], _params(), request_id="r1")  # a: LRU but serving a request
        await pool.get("c")
        assert [s.spec.name for s in pool.slots if s.served] == ["a", "c"]
        b = await pool.get("b")  # c idle, a still busy: c goes
        assert [s.spec.name for s in pool.slots if s.served] == ["a", "b"]
        b.engine.add_request([1], _params(), request_id="r2")
        with pytest.raises(APIError) as e:  # both busy, no wait allowed: a 503 saying why
            await pool.get("c")
        assert e.value.status == 503 and e.value.code == "model_busy" and "'a', 'b'" not in e.value.message
        assert "(a, b) are still serving requests or loading after the 0 s this request waited" in e.value.message
        assert e.value.headers() == {"Retry-After": "1"}  # the SDKs retry on hearth's word, not their own backoff
        busy.abort()
        await pool.get("c")  # a idle again: it goes
        assert [s.spec.name for s in pool.slots if s.served] == ["b", "c"]
        await pool.close()

    asyncio.run(scenario())


def test_a_busy_model_is_waited_for_within_busy_wait():
    async def scenario():
        pool, loader = pool_of(("a", 4), ("b", 4), budget_gib=4, busy_wait_s=60)
        a = await pool.get("a")
        stream = a.engine.add_request([1], _params(), request_id="r1")
        want_b = asyncio.ensure_future(pool.get("b"))
        await asyncio.sleep(0.2)
        assert not want_b.done() and pool.slots[0].served is a  # waits; a is not unloaded under its request
        stream.abort()
        b = await asyncio.wait_for(want_b, 30)
        assert b.name == "b" and pool.slots[0].served is None and a.engine.stopped
        await pool.close()

    asyncio.run(scenario())


def test_the_server_answers_while_a_model_loads(serve):
    pool, loader = pool_of(("a", 1), ("slow", 1))
    client = serve(pool)
    chat(client, "a")
    gate = loader.hold("slow")
    with ThreadPoolExecutor(2) as ex:
        waiting = [ex.submit(chat, client, "slow") for _ in range(2)]  # two requests, one load
        assert loader.started["slow"].wait(timeout=60)
        assert client.get("/health").status_code == 200
        assert chat(client, "a").status_code == 200
        states = {m["id"]: m["hearth"] for m in client.get("/v1/models").json()["data"]}
        assert states["slow"]["loading"] and not states["slow"]["loaded"]
        assert not any(f.done() for f in waiting)
        gate.set()
        assert [f.result(timeout=60).json()["model"] for f in waiting] == ["slow", "slow"]
    assert loader.loads == ["a", "slow"]


def test_streamed_requests_wait_for_the_load_then_stream(serve):
    pool, loader = pool_of(("a", 1))
    client = serve(pool)
    r = client.post("/v1/chat/completions", json={"model": "a", "messages": [{"role": "user", "content": "script:hello"}],
                                                  "stream": True})
    assert r.status_code == 200 and '"content":"Hel"' in r.text.replace(" ", "") and r.text.rstrip().endswith("[DONE]")


def test_concurrent_requests_to_two_models(serve):
    pool, loader = pool_of(("a", 1), ("b", 1))
    client = serve(pool)
    with ThreadPoolExecutor(4) as ex:
        jobs = [(m, ex.submit(chat, client, m, f"script:hello {m}{i}")) for m in "ab" for i in range(2)]
        answers = [(m, f.result().json()) for m, f in jobs]
    for m, body in answers:
        assert body["model"] == m and body["choices"][0]["message"]["content"] == "Hello there!"
    for m in "ab":
        prompts = [a.prompt for a in loader.engine(m).added]
        assert len(prompts) == 2 and all(f"script:hello {m}" in p for p in prompts)
    assert sorted(loader.loads) == ["a", "b"]


def test_a_failed_load_is_a_503_and_the_next_request_tries_again(serve):
    pool, loader = pool_of(("a", 1), ("bad", 1))
    client = serve(pool)
    calls = []

    def failing(spec):
        calls.append(spec.name)
        if len(calls) == 1:
            raise OSError("disk on fire")
        return fake_served(names=spec.names)

    pool.loader = failing
    r = chat(client, "bad")
    assert r.status_code == 503 and "'bad' failed to load: disk on fire" in r.json()["error"]["message"]
    assert chat(client, "bad").status_code == 200 and calls == ["bad", "bad"]


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/v1/responses", {"input": "hi"}),
    ("/tokenize", {"prompt": "hi"}),
])
def test_unknown_model_is_a_404_listing_what_is_served(serve, path, body):
    pool, _ = pool_of((["coder", "coder-alias"], 1), ("chat", 1))
    client = serve(pool)
    r = client.post(path, json={**body, "model": "gpt-4"})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "model_not_found" and err["param"] == "model" and err["type"] == "not_found_error"
    assert err["message"] == "model 'gpt-4' does not exist; this server serves 'coder', 'chat'"
    assert client.get("/v1/models/gpt-4").status_code == 404


def test_unknown_model_on_the_anthropic_route(serve):
    pool, _ = pool_of(("coder", 1), ("chat", 1))
    client = serve(pool)
    r = client.post("/v1/messages", json={"model": "claude-3", "max_tokens": 5, "messages": USER})
    assert r.status_code == 404
    assert r.json() == {"type": "error", "error": {"type": "not_found_error", "message":
                        "model 'claude-3' does not exist; this server serves 'coder', 'chat'"}}


def test_models_lists_each_id_and_given_alias_with_its_state(serve):
    """One entry per id and alias given (as vLLM lists each --served-model-name): the file's names are
    taken in `model` but not listed, which pickers (Open WebUI, LibreChat) showed as more models."""
    pool, _ = pool_of((["coder", "gpt-4o"], 2, "pinned", ["/m/coder.gguf", "coder.gguf"]), ("chat", 1))
    client = serve(pool)
    data = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["root"]) for m in data] == [("coder", "coder"), ("gpt-4o", "coder"), ("chat", "chat")]
    assert data[0]["hearth"] == {"loaded": True, "loading": False, "pinned": True, "memory_bytes": 2 << 30}
    assert data[2]["hearth"]["loaded"] is False and data[2]["max_model_len"] == 4096
    assert client.get("/v1/models/coder.gguf").json()["root"] == "coder"
    assert chat(client, "/m/coder.gguf", "script:hello").json()["model"] == "coder"


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": USER}),
    ("/v1/responses", {"input": "hi"}),
])
def test_a_file_name_two_models_share_is_a_400_naming_both(serve, path, body):
    """The same file served twice (say with two KV formats): its file's name picks neither (it was a
    404 "does not exist"); the ids still do."""
    pool, _ = pool_of(("fast", 1, ["m.gguf", "m"]), ("long", 1, ["m.gguf", "m"]), ("chat", 1, ["m"]))
    client = serve(pool)
    r = client.post(path, json={**body, "model": "m.gguf"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["code"], err["param"], err["type"]) == ("model_ambiguous", "model", "invalid_request_error")
    assert err["message"] == ("model 'm.gguf' is ambiguous: it names the file of 2 models this server serves "
                              "('fast', 'long'); give one of those ids")
    assert "'fast', 'long', 'chat'" in client.post(path, json={**body, "model": "m"}).json()["error"]["message"]
    assert client.post(path, json={**body, "model": "long"}).status_code == 200
    a = client.post("/v1/messages", json={"model": "m.gguf", "max_tokens": 5, "messages": USER})
    assert a.status_code == 400 and a.json()["error"]["type"] == "invalid_request_error"
    assert "'m.gguf' is ambiguous" in a.json()["error"]["message"]
    assert client.get("/v1/models/m.gguf").status_code == 400


def test_metrics_carry_each_models_name(serve):
    pool, _ = pool_of(("a", 1), ("b", 1))
    client = serve(pool)
    chat(client, "a", "script:hello")
    chat(client, "b", "script:hello")
    text = client.get("/metrics").text
    for m in "ab":
        assert f'hearth:generation_tokens_total{{model_name="{m}"}} 4.0' in text
        assert f'hearth:num_requests_running{{model_name="{m}"}}' in text
    assert text.count("# TYPE hearth:num_requests_running gauge") == 1


class ShiftedTokenizer(FakeTokenizer):
    """Another model's vocabulary: the same text, other ids."""

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = False) -> list[int]:
        return [ord(c) + 1 for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i - 1) for i in ids)


def test_a_follow_up_on_another_model_does_not_reuse_the_first_models_ids(serve):
    pool, loader = pool_of(("a", 1), ("b", 1))
    client = serve(pool)
    chat(client, "b")
    loader.built["b"][-1].tokenizer = ShiftedTokenizer()
    first = client.post("/v1/responses", json={"model": "a", "input": "script:chars"}).json()
    for model in "ab":
        r = client.post("/v1/responses", json={"model": model, "input": "more", "previous_response_id": first["id"]})
        assert r.status_code == 200 and r.json()["model"] == model
    a_prompt, b_ids = loader.engine("a").added[-1].prompt, [ord(c) for c in loader.engine("b").added[-1].prompt]
    assert a_prompt.startswith(loader.engine("a").added[0].prompt + "Hi!")  # a: the stored ids continued
    assert ShiftedTokenizer().decode(b_ids) == a_prompt  # b: all its own ids, none of a's


def test_a_follow_up_without_model_stays_on_the_previous_response_s_model(serve):
    """OpenAI requires `model`; hearth takes it missing, and a follow-up then continues its conversation's
    model (it went to the server's first model)."""
    pool, loader = pool_of(("a", 1), ("b", 1))
    client = serve(pool)
    first = client.post("/v1/responses", json={"model": "b", "input": "script:hello"}).json()
    r = client.post("/v1/responses", json={"input": "more", "previous_response_id": first["id"]})
    assert r.status_code == 200 and r.json()["model"] == "b", r.text
    assert loader.loads == ["b"] and [a.prompt.endswith("more<|im_end|>\n<|im_start|>assistant\n")
                                      for a in loader.engine("b").added] == [False, True]
    assert client.post("/v1/responses", json={"input": "new"}).json()["model"] == "a"  # none to follow: the first


def test_names_must_be_unique_across_models():
    with pytest.raises(ValueError, match="'x' is used by both 'a' and 'b'"):
        ModelPool(specs((["a", "x"], 1), (["b", "x"], 1)), FakeLoader())


def _params():
    from hearth.sampling_params import SamplingParams

    return SamplingParams(max_tokens=5)


class FakeClock:
    """The pool's clock (seconds), moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def idle_pool(keep_alive: float, tick_s: float = 3600.0) -> tuple[ModelPool, FakeLoader, FakeClock]:
    """A pinned "p" and an unpinned "a" that stays `keep_alive` seconds once idle, on a fake clock."""
    loader, clock = FakeLoader(), FakeClock()
    specs_ = [ModelSpec(["p"], pinned=True, max_model_len=4096, keep_alive=keep_alive),
              ModelSpec(["a"], max_model_len=4096, keep_alive=keep_alive)]
    return ModelPool(specs_, loader, clock=clock, tick_s=tick_s), loader, clock


def test_an_idle_model_unloads_after_its_keep_alive_and_loads_again(capfd):
    """Ollama's keep_alive: idle for its keep-alive, a model is unloaded (a pinned one stays); the next request
    loads it again."""
    async def scenario():
        pool, loader, clock = idle_pool(300)
        await pool.start()
        await pool.get("a")
        await pool.check_idle()  # the first check that sees it idle starts its timer
        clock.now += 299
        await pool.check_idle()
        assert [s.spec.name for s in pool.slots if s.served] == ["p", "a"]
        clock.now += 1
        await pool.check_idle()
        assert [s.spec.name for s in pool.slots if s.served] == ["p"] and loader.built["a"][0].engine.stopped
        assert "hearth: unloading a (idle for 5m, its keep_alive)" in capfd.readouterr().err
        await pool.get("a")
        assert loader.loads == ["p", "a", "a"]
        await pool.close()

    asyncio.run(scenario())


def test_a_request_in_flight_or_queued_keeps_its_model_past_its_keep_alive():
    async def scenario():
        pool, loader, clock = idle_pool(10)
        a = await pool.get("a")
        stream = a.engine.add_request([1], _params(), request_id="r1")  # running or queued: in the engine's count
        await pool.check_idle()
        clock.now += 100
        await pool.check_idle()
        assert pool.slots[1].served is a
        stream.abort()
        await pool.check_idle()  # idle from now: its keep-alive counts from the end of its last request
        assert pool.slots[1].served is a
        clock.now += 10
        await pool.check_idle()
        assert pool.slots[1].served is None
        await pool.close()

    asyncio.run(scenario())


def test_a_request_that_comes_as_the_timer_fires_keeps_the_model():
    """The check found the model expired and waits for the pool's lock (a load making room holds it); a request
    comes meanwhile: the check looks again under the lock and the model stays for it."""
    async def scenario():
        pool, loader, clock = idle_pool(10)
        a = await pool.get("a")
        await pool.check_idle()
        clock.now += 11
        async with pool._room:
            check = asyncio.ensure_future(pool.check_idle())
            await asyncio.sleep(0)  # the check has seen it expired and waits for the lock
            assert not check.done()
            served = await pool.get("a")
            stream = served.engine.add_request([1], _params(), request_id="r1")
        await check
        assert pool.slots[1].served is a
        stream.abort()
        await pool.close()

    asyncio.run(scenario())


def test_the_idle_check_runs_in_the_server(serve):
    """The running server checks on its own: /v1/models says unloaded once the keep-alive has passed."""
    pool, loader, clock = idle_pool(60, tick_s=0.01)
    client = serve(pool)
    assert chat(client, "a").status_code == 200 and loaded(client) == {"p": True, "a": True}
    for _ in range(100):  # the first check after the answer starts its timer, a later one ends it
        clock.now += 61
        if not loaded(client)["a"]:
            break
        threading.Event().wait(0.01)
    assert loaded(client) == {"p": True, "a": False}
    assert chat(client, "a").status_code == 200 and loaded(client)["a"] and loader.loads == ["p", "a", "a"]


def test_without_a_keep_alive_models_stay():
    async def scenario():
        pool, loader = pool_of(("a", 1), ("b", 1))
        await pool.get("b")
        await pool.check_idle()
        pool.clock = lambda: 1e12
        await pool.check_idle()
        assert pool.slots[1].served is not None and pool.expires_at(pool.slots[1]) is None
        await pool.close()

    asyncio.run(scenario())


def test_stop_of_a_busy_model_answers_unload_and_it_goes_once_its_requests_end():
    """`ollama stop` of a model answering requests: Ollama says "unload" at once and expires the runner when its
    last request ends; hearth answered "load" (as if it stayed), though it unloaded it afterwards."""
    from hearth.api.ollama_routes import _unload

    async def scenario():
        pool, loader, clock = idle_pool(3600)
        a = await pool.get("a")
        stream = a.engine.add_request([1], _params(), request_id="r1")
        r = await _unload(pool, "a", {"response": ""})
        assert json.loads(r.body)["done_reason"] == "unload" and pool.slots[1].served is a
        stream.abort()
        await pool.check_idle()
        assert pool.slots[1].served is None
        await pool.close()

    asyncio.run(scenario())


async def _until(ready) -> None:
    """Let the other tasks run (no clock: each await below is a turn of the loop) until `ready()`."""
    for _ in range(100):
        if ready():
            return
        await asyncio.sleep(0)
    raise AssertionError("never ready")


def test_stop_checks_and_unloads_in_one_step_under_the_pools_lock():
    """`ollama stop` asked whether the model stays (pinned, still loading) before it waited for the pool's lock,
    and unloaded after: a load that began in between was answered 200 "unload" while the model loaded. The stop
    here waits behind a load making room (the test holds the lock as that does), a request for the model begins
    its load meanwhile, and the answer is the 409 that says it is loading; the load goes on."""
    from hearth.api.ollama_routes import _unload

    async def scenario():
        pool, loader, clock = idle_pool(3600)
        async with pool._room:
            stop = asyncio.ensure_future(_unload(pool, "a", {"response": ""}))
            await _until(lambda: len(pool._room._waiters or ()) == 1)  # the stop waits for the lock
            get = asyncio.ensure_future(pool.get("a"))
            await _until(lambda: pool.slots[1].loading is not None and len(pool._room._waiters) == 2)
        with pytest.raises(APIError) as e:
            await stop
        assert e.value.status == 409 and e.value.message == ("model 'a' was not unloaded: it is still loading: "
                                                            "ask again once it has loaded")
        assert await get is pool.slots[1].served is not None and loader.loads == ["a"]
        await pool.close()

    asyncio.run(scenario())


def test_keep_alive_0_on_a_busy_model_unloads_it_once_its_requests_end():
    """Ollama sets a busy runner's duration to 0: it expires when its last request ends, not never."""
    async def scenario():
        pool, loader, clock = idle_pool(3600)
        a = await pool.get("a")
        stream = a.engine.add_request([1], _params(), request_id="r1")
        assert await pool.unload("a") is None and pool.slots[1].served is a  # None: not kept, it goes
        stream.abort()
        await pool.check_idle()
        assert pool.slots[1].served is None
        await pool.close()

    asyncio.run(scenario())


def test_keep_alive_0_waits_for_the_answer_not_the_next_idle_tick():
    """A request's keep_alive 0 applies when its answer ends (unload_after): an idle tick between get() and its
    Generation (/api/embed's one loop turn) does not stop the engine under it."""
    from hearth.api.ollama_models import served_model

    async def scenario():
        pool, loader, clock = idle_pool(300)
        await pool.start()
        served, _ = await served_model(pool, "a", 0.0)
        await pool.check_idle()
        assert pool.slots[1].served is served and not served.engine.stopped
        await pool.close()

    asyncio.run(scenario())
