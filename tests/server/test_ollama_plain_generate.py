"""/api/generate on a model whose GGUF has no chat template (a base model, gemma-3-270m's) runs the prompt as it
is, Ollama's `{{ .Prompt }}`: the built-in template /api/chat falls back to wrapped it in turns the model never
learned, and it answered wrong. /api/chat keeps the built-in; a model with a template renders /api/generate
with it, unchanged."""

from __future__ import annotations


def generate(fake, **extra):
    r = fake.client.post("/api/generate", json={"model": "fake-model", "prompt": "The capital of France is",
                                                "stream": False, **extra})
    assert r.status_code == 200, r.text
    return r


def test_no_template_runs_the_prompt_as_it_is(make_fake):
    fake = make_fake(template="")
    body = generate(fake).json()
    assert fake.last.prompt == "The capital of France is"
    assert body["context"] and body["prompt_eval_count"] == len(fake.last.prompt)


def test_the_system_prompt_has_no_place_and_is_named(make_fake):
    fake = make_fake(template="")
    r = generate(fake, system="Be brief.")
    assert fake.last.prompt == "The capital of France is"
    assert "system" in r.headers["x-hearth-ignored-fields"]


def test_context_still_continues(make_fake):
    fake = make_fake(template="")
    first = generate(fake).json()["context"]
    generate(fake, context=first)
    assert fake.last.prompt.startswith("The capital of France is")
    assert fake.last.prompt.endswith("The capital of France is") and len(fake.last.prompt) > len(first)


def test_chat_keeps_the_built_in(make_fake):
    fake = make_fake(template="")
    r = fake.client.post("/api/chat", json={"model": "fake-model", "stream": False,
                                            "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert "<|im_start|>user" in fake.last.prompt


def test_a_template_still_renders(fake):
    generate(fake)
    assert "<|im_start|>user\nThe capital of France is" in fake.last.prompt
