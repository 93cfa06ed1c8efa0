"""llama-server's spellings of the OpenAI routes and its /apply-template, and HEAD on the probes: clients
given a base URL without /v1, and health checks that send HEAD, got 404 and 405."""

USER = [{"role": "user", "content": "hi"}]


def test_chat_completions_and_models_answer_without_v1(fake):
    r = fake.client.post("/chat/completions", json={"model": "fake-model", "messages": USER})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    assert fake.client.get("/models").json() == fake.client.get("/v1/models").json()


def test_the_probes_answer_head_and_v1_health(make_fake):
    fake = make_fake(api_key="k")
    for path in ("/health", "/v1/health"):  # no key needed, as /health
        assert fake.client.head(path).status_code == 200 and fake.client.get(path).json() == {"status": "ok"}
    assert fake.client.head("/v1/models").status_code == 401
    assert fake.client.head("/v1/models", headers={"Authorization": "Bearer k"}).status_code == 200


def test_apply_template_renders_the_prompt_and_runs_nothing(fake):
    r = fake.client.post("/apply-template", json={"model": "fake-model", "messages": USER})
    assert r.status_code == 200 and not fake.engine.added
    assert r.json() == {"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"}
    assert fake.client.post("/apply-template", json={"model": "fake-model", "messages": USER,
                                                     "add_generation_prompt": False}).json()["prompt"].endswith("<|im_end|>\n")
    bad = fake.client.post("/apply-template", json={"model": "fake-model"})
    assert bad.status_code == 400 and "messages" in bad.text


def test_apply_template_previews_a_continued_answer_and_the_chat_refuses_both_endings(fake):
    """/apply-template closed the message continue_final_message continues; a chat asking both endings was a 200
    with one of them chosen (vLLM: a 400)."""
    messages = USER + [{"role": "assistant", "content": "4, 5,"}]
    r = fake.client.post("/apply-template", json={"model": "fake-model", "messages": messages,
                                                  "continue_final_message": True})
    assert r.status_code == 200 and r.json()["prompt"].endswith("<|im_start|>assistant\n4, 5,"), r.text
    both = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": messages,
                                                          "continue_final_message": True, "add_generation_prompt": True})
    assert both.status_code == 400 and "add_generation_prompt false" in both.json()["error"]["message"]
    one = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": messages,
                                                         "continue_final_message": True})
    assert one.status_code == 200
