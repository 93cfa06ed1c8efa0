"""The decline gate on Qwen2.5-Coder-0.5B, in process, greedy (a new user's trial, 2026-12-06): asked
for a joke about cats with only get_weather offered, the model opens its answer as a call of a tool
nobody offered (`{"name": "Cat Joke", ...}`); the lazy grammar bent the name to get_weather and then
wrote invented arguments (`{"city": "New York"}`), which went out as the declined call's "text". The
answer is the model's own text, the same as with the guard off, whole and streamed."""

from __future__ import annotations

import json

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
BODY = {"model": "qwen", "messages": [{"role": "user", "content": "Tell me a joke about cats."}], "tools": TOOLS,
        "temperature": 0, "max_tokens": 64}


def test_a_declined_call_is_the_models_own_text(qwen_client):
    own = qwen_client.post("/v1/chat/completions", json={**BODY, "hearth": {"tool_guard": "off"}}).json()
    own_text = own["choices"][0]["message"]["content"]
    # the trial's answer: a call of no offered tool ("Cat Joke"; "cat joke" on the torch tier's arithmetic)
    assert '"name": "cat joke"' in own_text.lower(), own_text
    r = qwen_client.post("/v1/chat/completions", json=BODY).json()
    msg = r["choices"][0]["message"]
    assert msg["content"] == own_text and not msg.get("tool_calls") and r["choices"][0]["finish_reason"] == "stop"
    (event,) = [e for e in r["hearth"]["events"] if e["kind"] == "declined"]
    assert event["name"] == "get_weather" and event["name_prob"] < 0.35 and event["rewritten"] == "unconstrained"
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # the rewrite's prompt: a prefix-cache hit
    with qwen_client.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True}) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == own_text and not [d for d in deltas if d.get("tool_calls")]
