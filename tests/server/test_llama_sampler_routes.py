"""llama.cpp's samplers (repeat_last_n, DRY, XTC, top_n_sigma, mirostat) reach the sampler from every route that takes
them by llama-server's names (OpenAI chat, completions and Responses and Anthropic's Messages as extension fields,
llama-server's /completion with its defaults, Ollama's repeat_last_n), never named as ignored; a bad value is a 400
naming it, in the route's error shape. Their integers take an integral float (`"mirostat": 2.0`), as llama-server's
params parser does; a fraction is a 400."""

from __future__ import annotations

import pytest

USER = [{"role": "user", "content": "hi"}]
GIVEN = {"repeat_last_n": 32, "dry_multiplier": 0.8, "dry_base": 2.0, "dry_allowed_length": 3, "dry_penalty_last_n": 128,
         "dry_sequence_breakers": ["\n", "###"], "xtc_probability": 0.5, "xtc_threshold": 0.2, "top_n_sigma": 1.5,
         "mirostat": 2, "mirostat_tau": 4.0, "mirostat_eta": 0.2}
ROUTES = {
    "/v1/chat/completions": {"model": "fake-model", "messages": USER},
    "/v1/completions": {"model": "fake-model", "prompt": "hi"},
    "/v1/responses": {"model": "fake-model", "input": "hi"},
    "/v1/messages": {"model": "fake-model", "messages": USER, "max_tokens": 4},
    "/completion": {"prompt": "hi", "n_predict": 4},
}
BAD = [("repeat_last_n", -2), ("dry_multiplier", -1.0), ("dry_base", 0.5), ("dry_allowed_length", -1),
       ("dry_penalty_last_n", -5), ("dry_sequence_breakers", [""]), ("xtc_probability", 2.0), ("xtc_threshold", -1.0),
       ("top_n_sigma", "x"), ("mirostat", 3), ("mirostat_eta", -0.1), ("mirostat_tau", "5")]


@pytest.mark.parametrize("route", ROUTES)
def test_fields_reach_the_engine(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], **GIVEN})
    assert r.status_code == 200, r.text
    p = fake.last.params
    assert {k: getattr(p, k) for k in GIVEN} == GIVEN
    assert r.headers.get("x-hearth-ignored-fields") is None


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("field,value", BAD)
def test_bad_values_are_a_400_naming_the_field(fake, route, field, value):
    r = fake.client.post(route, json={**ROUTES[route], field: value})
    assert r.status_code == 400 and field in r.json()["error"]["message"], r.text
    if route == "/v1/messages":  # Anthropic's error shape, not OpenAI's
        assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error", r.text


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_repeat_penalty_is_llama_servers_repetition_penalty(fake, route):
    r = fake.client.post(route, json={**ROUTES[route], "repeat_penalty": 1.3})
    assert r.status_code == 200 and r.headers.get("x-hearth-ignored-fields") is None, r.text
    assert fake.last.params.repetition_penalty == 1.3
    r = fake.client.post(route, json={**ROUTES[route], "repeat_penalty": -1.0})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("repeat_penalty: "), r.text


INTEGRAL = {"top_k": 20.0, "repeat_last_n": 32.0, "dry_allowed_length": 3.0, "dry_penalty_last_n": 128.0, "mirostat": 2.0}


@pytest.mark.parametrize("route", ROUTES)
def test_integral_floats_are_integers(fake, route):
    """Python's json writes 2.0 for a float: llama-server's get<int> reads it as 2, and so does hearth."""
    r = fake.client.post(route, json={**ROUTES[route], **INTEGRAL})
    assert r.status_code == 200, r.text
    got = {k: getattr(fake.last.params, k) for k in INTEGRAL}
    assert got == INTEGRAL and all(type(v) is int for v in got.values())


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("field", INTEGRAL)
def test_a_fraction_is_a_400_naming_the_field(fake, route, field):
    r = fake.client.post(route, json={**ROUTES[route], field: 2.5})  # llama-server truncates it to 2 without a word
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == f"{field}: must be an integer, got 2.5"


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"])
def test_openai_and_anthropic_integers_stay_strict(fake, route):
    """seed is OpenAI's integer (and max_tokens, n): a decimal is their APIs' 400, and stays one here."""
    r = fake.client.post(route, json={**ROUTES[route], "seed": 7.0})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("seed: "), r.text


def test_llama_servers_own_integers_take_integral_floats(fake):
    r = fake.client.post("/completion", json={"prompt": "hi", "n_predict": 4.0, "seed": 7.0})
    assert r.status_code == 200, r.text
    assert (fake.last.params.max_tokens, fake.last.params.seed) == (4, 7)
    r = fake.client.post("/v1/chat/completions", json={**ROUTES["/v1/chat/completions"], "n_predict": 4.0})
    assert r.status_code == 200 and fake.last.params.max_tokens == 4, r.text


def test_text_generation_webui_sends_breakers_as_a_json_string(fake):
    r = fake.client.post("/v1/completions", json={**ROUTES["/v1/completions"], "dry_multiplier": 0.8,
                                                  "dry_sequence_breakers": '["\\n", ":", "\\"", "*"]'})
    assert r.status_code == 200, r.text
    assert fake.last.params.dry_sequence_breakers == ["\n", ":", '"', "*"]


def test_unset_keeps_each_routes_default(fake):
    fake.client.post("/v1/chat/completions", json=ROUTES["/v1/chat/completions"])
    p = fake.last.params
    assert (p.repeat_last_n, p.dry_multiplier, p.xtc_probability, p.top_n_sigma) == (None, 0.0, 0.0, -1.0)
    fake.client.post("/completion", json=ROUTES["/completion"])  # llama-server's: a window of 64
    p = fake.last.params
    assert (p.repeat_last_n, p.dry_penalty_last_n, p.xtc_threshold) == (64, 64, 0.1)
    settings = fake.client.get("/props").json()["default_generation_settings"]["params"]
    assert settings["repeat_last_n"] == 64 and settings["dry_sequence_breakers"] == ["\n", ":", '"', "*"]


@pytest.mark.parametrize("options,want", [({}, 64), ({"repeat_last_n": 16}, 16), ({"repeat_last_n": -1}, -1)])
def test_ollama_repeat_last_n(fake, options, want):
    r = fake.client.post("/api/chat", json={"model": "fake-model", "messages": USER, "stream": False,
                                            "options": {"repeat_penalty": 1.1, **options}})
    assert r.status_code == 200, r.text
    assert (fake.last.params.repeat_last_n, fake.last.params.repetition_penalty) == (want, 1.1)
    assert "repeat_last_n" not in r.headers.get("x-hearth-ignored-fields", "")


def test_ollama_bad_repeat_last_n_is_named(fake):
    for value in (-3, "64"):
        r = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "hi", "stream": False,
                                                    "options": {"repeat_last_n": value}})
        assert r.status_code == 400 and "options.repeat_last_n" in r.text, r.text


def test_ollama_mirostat(fake):
    r = fake.client.post("/api/chat", json={"model": "fake-model", "messages": USER, "stream": False,
                                            "options": {"mirostat": 1, "mirostat_tau": 3.0, "mirostat_eta": 0.05}})
    assert r.status_code == 200 and "mirostat" not in r.headers.get("x-hearth-ignored-fields", "")
    p = fake.last.params
    assert (p.mirostat, p.mirostat_tau, p.mirostat_eta) == (1, 3.0, 0.05)
    r = fake.client.post("/api/chat", json={"model": "fake-model", "messages": USER, "stream": False,
                                            "options": {"mirostat": 5}})
    assert r.status_code == 400 and "options.mirostat" in r.text


SERVER = {"repeat_last_n": 128, "dry_multiplier": 0.8, "xtc_probability": 0.3, "top_n_sigma": 1.0,
          "dry_sequence_breakers": ["\n"]}


@pytest.mark.parametrize("route,body", [*ROUTES.items(), ("/api/chat", {"model": "fake-model", "messages": USER,
                                                                         "stream": False})])
def test_the_server_s_defaults_apply_where_a_request_gives_none(make_fake, route, body):
    fake = make_fake(sampling_defaults=SERVER)  # hearth serve --repeat-last-n 128 --dry-multiplier 0.8 ...
    r = fake.client.post(route, json=body)
    assert r.status_code == 200, r.text
    assert {k: getattr(fake.last.params, k) for k in SERVER} == SERVER
