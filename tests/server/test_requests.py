"""What reaches the engine: sampling options from both APIs, n and seeds, logprobs, tool_choice
grammars, tools in the prompt (template or system prompt), history with tool calls; plus the small
endpoints (models, tokenize, detokenize, count_tokens, health, the chat page)."""

from __future__ import annotations

import json

import pytest

from tests.server.fakes import CHATML_NO_TOOLS
from tests.server.test_channels import A_WEATHER, WEATHER, chat

USER = [{"role": "user", "content": "hi"}]


def test_openai_sampling_fields_reach_the_engine(fake):
    fake.openai.chat.completions.create(
        model="fake-model", messages=USER, temperature=0.3, top_p=0.9, presence_penalty=0.5, frequency_penalty=-0.5,
        seed=7, stop=["END"], logit_bias={"65": 5}, max_completion_tokens=12,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 2, "ignore_eos": True,
                    "stop_token_ids": [3], "some_unknown_field": {"x": 1}})
    p = fake.last.params
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty) == (0.3, 0.9, 20, 0.05, 1.1)
    assert (p.presence_penalty, p.frequency_penalty, p.seed, p.max_tokens) == (0.5, -0.5, 7, 12)
    assert p.stop == ["END"] and p.logit_bias == {65: 5.0} and p.min_tokens == 2 and p.ignore_eos
    assert p.stop_token_ids == [3] and p.n == 1 and p.structured_output is None


def test_completions_max_tokens_null_is_until_the_context_is_full(fake):
    # null has a meaning of its own there (vLLM's too); omitted, OpenAI's default of 16 applies
    fake.client.post("/v1/completions", json={"prompt": "hi", "max_tokens": None})
    assert fake.last.params.max_tokens is None
    fake.client.post("/v1/completions", json={"prompt": "hi"})
    assert fake.last.params.max_tokens == 16


def test_max_tokens_default_is_the_rest_of_the_context(fake):
    chat(fake, "hello")
    assert fake.last.params.max_tokens is None
    fake.openai.chat.completions.create(model="fake-model", messages=USER, max_tokens=5)
    assert fake.last.params.max_tokens == 5


def test_anthropic_sampling_fields_reach_the_engine(fake):
    # the SDK no longer types temperature/top_p/top_k; older clients send them, so they are honoured
    fake.anthropic.messages.create(model="fake-model", max_tokens=9, messages=USER, stop_sequences=["\n\nHuman:"],
                                   system="Be brief.", extra_body={"temperature": 0.2, "top_p": 0.8, "top_k": 5})
    p = fake.last.params
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.stop) == (9, 0.2, 0.8, 5, ["\n\nHuman:"])
    assert "Be brief." in fake.last.prompt
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fake.anthropic.messages.create(model="fake-model", max_tokens=9, messages=USER,
                                   output_config={"format": {"type": "json_schema", "schema": schema}})
    assert fake.last.params.structured_output.json_schema == schema


def test_anthropic_beta_output_format_constrains_as_output_config(fake):
    """The structured-outputs beta's top-level `output_format` (anthropic-beta: structured-outputs-2025-11-13,
    as the SDK's beta sent it) was ignored (named in x-hearth-ignored-fields) and the answer ran free."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    r = fake.client.post("/v1/messages", headers={"anthropic-beta": "structured-outputs-2025-11-13"},
                         json={"model": "fake-model", "max_tokens": 9, "messages": USER,
                               "output_format": {"type": "json_schema", "schema": schema}})
    assert r.status_code == 200 and "x-hearth-ignored-fields" not in r.headers, r.text
    assert fake.last.params.structured_output.json_schema == schema
    fmt = {"type": "json_schema", "schema": schema}
    for body, param in [({"output_format": fmt, "output_config": {"format": fmt}}, "output_format"),
                        ({"output_format": {"type": "json_schema", "schema": {"type": "objekt"}}},
                         "output_format.schema")]:
        r = fake.client.post("/v1/messages", json={"model": "fake-model", "max_tokens": 9, "messages": USER, **body})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(f"{param}: "), r.text


def test_n_children_and_seeds(fake):
    r = fake.openai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "script:hello"}],
                                            n=3, seed=10)
    assert [c.index for c in r.choices] == [0, 1, 2] and all(c.message.content == "Hello there!" for c in r.choices)
    assert [a.params.seed for a in fake.engine.added] == [10, 11, 12]
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens == len(fake.last.prompt)
    chunks = list(fake.openai.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "script:hello"}], n=2, stream=True))
    for i in range(2):
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices[0].index == i) == "Hello there!"


def test_completions_batch_echo_and_logprobs(fake):
    r = fake.openai.completions.create(model="fake-model", prompt=["script:hello", "script:json"], n=2, echo=True,
                                       logprobs=2, max_tokens=50)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.choices[0].text == "script:hello" + "Hello there!" and r.choices[3].text == 'script:json{"answer": "yes"}'
    lp = r.choices[0].logprobs  # echo: the prompt's tokens first, the first one's logprob null (OpenAI's legacy API)
    assert lp.tokens == [*"script:hello", "H", "l", "t", "!"]
    # asked of each prompt's first child only (the siblings hit its prefix), and shared with them
    assert [a.params.prompt_logprobs for a in fake.engine.added[-4:]] == [2, None, 2, None]
    assert r.choices[1].logprobs.tokens[:12] == [*"script:hello"] and r.choices[1].logprobs.top_logprobs[1:12] == lp.top_logprobs[1:12]
    assert lp.token_logprobs[:3] == [None, -0.01, -0.02] and lp.token_logprobs[12:] == [-0.5] * 4
    assert lp.top_logprobs[0] is None and lp.top_logprobs[1] == {"c": -0.01, "A": -1.0}
    assert len(lp.top_logprobs[12]) == 2
    assert lp.text_offset == list(range(16))
    assert r.usage.prompt_tokens == len("script:hello") + len("script:json")
    r = fake.openai.completions.create(model="fake-model", prompt="script:hello", logprobs=1)  # no echo: no prompt's
    assert r.choices[0].logprobs.tokens == ["H", "l", "t", "!"] and r.choices[0].logprobs.text_offset == [0, 1, 2, 3]
    assert fake.last.params.prompt_logprobs is None
    r = fake.openai.completions.create(model="fake-model", prompt=[1, 2, 3], max_tokens=2)
    assert fake.last.prompt == "\x01\x02\x03" and fake.last.params.max_tokens == 2


def test_completions_top_logprobs_hold_the_chosen_token(fake):
    """OpenAI's legacy API: "always the logprob of the sampled token, so there may be up to logprobs+1
    elements" (vLLM too); logprobs 0 is the chosen token alone, echoed prompt tokens as well. Chat's
    top_logprobs hold exactly top_logprobs entries (the newer API)."""
    r = fake.openai.completions.create(model="fake-model", prompt="script:router_unsure_opener", logprobs=1, max_tokens=1)
    lp = r.choices[0].logprobs  # the chosen token -2.0, below "A" (-1.0)
    assert lp.token_logprobs == [-2.0] and lp.top_logprobs == [{"A": -1.0, lp.tokens[0]: -2.0}]
    r = fake.openai.completions.create(model="fake-model", prompt="script:hello", logprobs=0, echo=True)
    lp = r.choices[0].logprobs
    assert lp.top_logprobs[0] is None and lp.top_logprobs[1] == {"c": -0.01}
    assert lp.top_logprobs[12:] == [{t: -0.5} for t in "Hlt!"]
    r = fake.openai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "script:router_unsure_opener"}],
                                            logprobs=True, top_logprobs=1, max_tokens=1)
    assert [t.token for t in r.choices[0].logprobs.content[0].top_logprobs] == ["A"]


def test_completions_max_tokens_0_with_echo_scores_the_prompt(fake):
    """lm-eval's loglikelihood (local-completions): echo, max_tokens 0, logprobs N -> the prompt and its
    logprobs alone, as vLLM answers (it was a 400 "must be at least 1")."""
    r = fake.openai.completions.create(model="fake-model", prompt="script:hello", echo=True, max_tokens=0, logprobs=1)
    c = r.choices[0]
    assert c.text == "script:hello" and c.finish_reason == "length" and r.usage.completion_tokens == 0
    assert c.logprobs.tokens == [*"script:hello"] and c.logprobs.token_logprobs[:3] == [None, -0.01, -0.02]
    assert fake.last.params.max_tokens == 1 and fake.last.params.prompt_logprobs == 1
    chunks = list(fake.openai.completions.create(model="fake-model", prompt="script:hello", echo=True, max_tokens=0,
                                                 logprobs=1, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == "script:hello"
    assert [t for ch in chunks if ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens] == [*"script:hello"]
    assert chunks[-1].choices[0].finish_reason == "length"
    r = fake.openai.completions.create(model="fake-model", prompt="script:hello", echo=True, max_tokens=0)
    assert r.choices[0].text == "script:hello" and r.choices[0].logprobs is None


def test_scoring_with_min_tokens_names_the_max_tokens_the_client_sent(fake):
    """The engine computes one token when scoring; the 400 said 'at most max_tokens (1)', a value the
    client never sent."""
    r = fake.client.post("/v1/completions", json={"prompt": "script:hello", "echo": True, "max_tokens": 0,
                                                  "min_tokens": 2, "logprobs": 1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens"
    assert r.json()["error"]["message"] == "min_tokens: must be at most max_tokens (0), got 2"
    assert not fake.engine.added


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_only_request_shows_no_token_on_either_route(fake, stream):
    """llama-server's n_predict 0 and /v1/completions' echo with max_tokens 0 run one path (Generation's
    prompt_only): the engine computes one token (here one that ends the answer: "stop"), which neither
    reply shows, and both end as a limit."""
    def events(r) -> list[dict]:
        return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]

    r = fake.client.post("/completion", json={"prompt": "hello", "n_predict": 0, "stream": stream})
    assert r.status_code == 200 and fake.last.params.max_tokens == 1, r.text
    replies = events(r) if stream else [r.json()]  # a stream: its last event alone (no delta had content)
    assert len(replies) == 1 and replies[0]["content"] == ""
    assert (replies[0]["tokens_predicted"], replies[0]["stop_type"], replies[0]["tokens"]) == (0, "limit", [])

    r = fake.client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 0, "echo": True, "stream": stream,
                                                  "stream_options": {"include_usage": True} if stream else None})
    assert r.status_code == 200 and fake.last.params.max_tokens == 1, r.text
    if stream:
        chunks = events(r)
        choices = [c for chunk in chunks for c in chunk["choices"]]
        assert [c["text"] for c in choices] == ["hello", ""] and choices[-1]["finish_reason"] == "length"
        assert choices[-1]["stop_reason"] is None and chunks[-1]["usage"]["completion_tokens"] == 0
    else:
        (choice,), usage = r.json()["choices"], r.json()["usage"]
        assert (choice["text"], choice["finish_reason"], choice["stop_reason"]) == ("hello", "length", None)
        assert usage["completion_tokens"] == 0


def test_completions_stream_echo_with_logprobs(fake):
    """The echo goes out with the prompt's logprobs in each choice's first chunk; text_offset runs on
    across chunks."""
    chunks = list(fake.openai.completions.create(model="fake-model", prompt="script:hello", n=2, echo=True, logprobs=1,
                                                 stream=True))
    for i in range(2):
        mine = [c.choices[0] for c in chunks if c.choices[0].index == i]
        assert "".join(c.text for c in mine) == "script:helloHello there!"
        assert mine[0].text.startswith("script:hello") and mine[0].logprobs.token_logprobs[0] is None
        lps = [c.logprobs for c in mine]
        assert [t for lp in lps for t in lp.tokens] == [*"script:hello", "H", "l", "t", "!"]
        assert [o for lp in lps for o in lp.text_offset] == list(range(16))
    plain = list(fake.openai.completions.create(model="fake-model", prompt="script:hello", logprobs=0, stream=True))
    assert [o for c in plain for o in c.choices[0].logprobs.text_offset] == [0, 1, 2, 3]


def test_chat_logprobs_shape(fake):
    r = fake.openai.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "script:hello"}],
                                            logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == 4 and content[0].token == "H" and content[0].logprob == -0.5
    assert content[0].bytes == [72] and [t.token for t in content[0].top_logprobs] == ["H", "A"]
    assert fake.last.params.logprobs == 2
    chunks = list(fake.openai.chat.completions.create(model="fake-model", stream=True, logprobs=True, top_logprobs=1,
                                                      messages=[{"role": "user", "content": "script:hello"}]))
    streamed = [t for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [t.token for t in streamed] == ["H", "l", "t", "!"]


def test_response_format_json_schema(fake):
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]}
    fake.openai.chat.completions.create(model="fake-model", messages=USER, response_format={
        "type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    assert fake.last.params.structured_output.json_schema == schema
    fake.openai.chat.completions.create(model="fake-model", messages=USER, response_format={"type": "json_object"})
    assert fake.last.params.structured_output.json_object


@pytest.mark.parametrize("choice,names", [
    ("required", ["get_weather", "add"]),
    ({"type": "function", "function": {"name": "add"}}, ["add"]),
])
def test_forced_tool_choice_is_a_grammar(fake, choice, names):
    add = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    chat(fake, "tool", tools=[WEATHER, add], tool_choice=choice)
    grammar = fake.last.params.structured_output.grammar
    assert "<tool_call>" in grammar and "%json" in grammar
    assert all(json.dumps(n) in grammar for n in names)
    if len(names) == 1:
        assert "get_weather" not in grammar


def test_anthropic_tool_choice(fake):
    fake.anthropic.messages.create(model="fake-model", max_tokens=8, messages=USER, tools=[A_WEATHER],
                                   tool_choice={"type": "tool", "name": "get_weather"})
    assert '"get_weather"' in fake.last.params.structured_output.grammar
    fake.anthropic.messages.create(model="fake-model", max_tokens=8, messages=USER, tools=[A_WEATHER],
                                   tool_choice={"type": "any"})
    assert "<tool_call>" in fake.last.params.structured_output.grammar
    fake.anthropic.messages.create(model="fake-model", max_tokens=8, messages=USER, tools=[A_WEATHER],
                                   tool_choice={"type": "none"})
    assert fake.last.params.structured_output is None and "get_weather" not in fake.last.prompt


def test_tool_choice_none_and_auto(fake):
    r = chat(fake, "tool", tools=[WEATHER], tool_choice="none")
    assert "get_weather" not in fake.last.prompt and r.choices[0].message.tool_calls is None
    r = chat(fake, "tool", tools=[WEATHER], tool_choice="auto", extra_body={"hearth": {"tool_guard": "off"}})
    assert "get_weather" in fake.last.prompt and fake.last.params.structured_output is None
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    r = chat(fake, "tool", tools=[WEATHER], tool_choice="auto")  # the guard's lazy grammar
    assert "<tool_call>" in fake.last.params.structured_output.grammar
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_history_with_tool_calls_and_malformed_arguments(fake):
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{city: Rome"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rainy"}]},
        {"role": "user", "content": "thanks"}]
    r = fake.openai.chat.completions.create(model="fake-model", messages=history, tools=[WEATHER])
    assert r.choices[0].finish_reason == "stop"
    assert '"arguments": {"city": "Paris"}' in fake.last.prompt  # parsed, rendered by the template's tojson
    assert '"{city: Rome"' in fake.last.prompt  # kept as the raw string
    assert "<|im_start|>tool\nsunny" in fake.last.prompt and "rainy" in fake.last.prompt


def test_anthropic_history_blocks(fake):
    fake.anthropic.messages.create(model="fake-model", max_tokens=8, tools=[A_WEATHER], messages=[
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "x"},
                                          {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "cold"},
                                     {"type": "text", "text": "and now?"}]}])
    prompt = fake.last.prompt
    assert '"arguments": {"city": "Oslo"}' in prompt and "<think>hmm</think>" in prompt
    assert "<|im_start|>tool\ncold" in prompt and prompt.index("cold") < prompt.index("and now?")


def test_anthropic_tool_result_error_is_rendered(fake):
    """is_error: the model reads that the call failed (chat templates have no field for it)."""
    call = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}
    for content, shown in [("no such city", "Error: no such city"),
                           ([{"type": "text", "text": "timeout"}], "Error: timeout"),
                           ("Error: quota", "Error: quota")]:  # already reads as one: not marked twice
        fake.anthropic.messages.create(model="fake-model", max_tokens=8, tools=[A_WEATHER], messages=[
            {"role": "user", "content": "weather?"}, {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content,
                                         "is_error": True}]}])
        assert f"<|im_start|>tool\n{shown}<|im_end|>" in fake.last.prompt
    fake.anthropic.messages.create(model="fake-model", max_tokens=8, tools=[A_WEATHER], messages=[
        {"role": "user", "content": "weather?"}, {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "cold",
                                     "is_error": False}]}])
    assert "<|im_start|>tool\ncold<|im_end|>" in fake.last.prompt


def test_template_without_tools_gets_the_system_prompt(make_fake):
    fake = make_fake(CHATML_NO_TOOLS)
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{bad"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
               {"role": "user", "content": "script:tool"}]
    r = fake.openai.chat.completions.create(model="fake-model", messages=history, tools=[WEATHER])
    prompt = fake.last.prompt
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools") and '"name": "get_weather"' in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {bad}\n</tool_call>' in prompt
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>" in prompt
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"  # parsed as hermes


def test_models_lists_every_alias(make_fake):
    fake = make_fake(names=("tiny", "/models/tiny.gguf"))
    assert [m.id for m in fake.openai.models.list().data] == ["tiny", "/models/tiny.gguf"]
    assert fake.openai.models.retrieve("/models/tiny.gguf").root == "tiny"
    assert fake.openai.chat.completions.create(model="/models/tiny.gguf", messages=USER).model == "tiny"


def test_models_and_small_endpoints(fake):
    assert [m.id for m in fake.openai.models.list().data] == ["fake-model"]
    assert fake.openai.models.retrieve("fake-model").id == "fake-model"
    c = fake.client
    assert c.get("/health").json() == {"status": "ok"}
    tok = c.post("/tokenize", json={"prompt": "abc"}).json()
    assert tok["tokens"] == [97, 98, 99] and tok["count"] == 3 and tok["max_model_len"] == 4096
    chat_tok = c.post("/tokenize", json={"messages": USER}).json()
    assert chat_tok["count"] == len("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    assert c.post("/detokenize", json={"tokens": [104, 105]}).json() == {"prompt": "hi", "content": "hi"}
    counted = fake.anthropic.messages.count_tokens(model="fake-model", messages=USER)
    assert counted.input_tokens == chat_tok["count"]
    page = c.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"] and "static/app.js" in page.text
    assert "/v1/chat/completions" in c.get("/static/stream.js").text  # the page's modules, served by hearth


@pytest.mark.parametrize("body", [{}, {"content": None}])
def test_tokenize_without_text_names_llama_server_s_field_too(fake, body):
    """It said "give exactly one of prompt and messages": a llama-server client sends content."""
    r = fake.client.post("/tokenize", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == "content: give content (llama-server's), prompt or messages"


def test_anthropic_prefill_continues_the_assistant_turn(fake):
    fake.anthropic.messages.create(model="fake-model", max_tokens=8, messages=[
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, here"}])
    assert fake.last.prompt.endswith("<|im_start|>assistant\nSure, here")


def test_metrics_after_requests(fake):
    chat(fake, "hello")
    text = fake.client.get("/metrics").text
    for name in ("hearth:num_requests_running", "hearth:num_requests_waiting", "hearth:kv_cache_usage_perc",
                 "hearth:prompt_tokens_total", "hearth:generation_tokens_total", "hearth:request_success_total",
                 "hearth:time_to_first_token_seconds_bucket", "hearth:inter_token_latency_seconds_bucket",
                 "hearth:prefix_cache_queries_total", "hearth:prefix_cache_hits_total", "hearth:kv_cache_blocks_used"):
        assert name in text, name
    assert 'hearth:generation_tokens_total{model_name="fake-model"} 4.0' in text
    assert 'hearth:request_success_total{finished_reason="stop",model_name="fake-model"} 1.0' in text


def test_lifespan_owns_the_engine(make_fake):
    fake = make_fake()
    assert fake.engine.started and not fake.engine.stopped
    fake.client.__exit__(None, None, None)
    assert fake.engine.stopped


def test_chat_template_kwargs_cannot_break_rendering(fake):
    r = fake.client.post("/v1/chat/completions", json={
        "messages": USER, "chat_template_kwargs": {"messages": [], "tools": 5, "enable_thinking": False}})
    assert r.status_code == 200 and "hi" in fake.last.prompt


def test_llama_servers_logit_bias_pairs_and_texts_reach_the_engine(fake):
    """llama-server's [[id or text, bias or false]] (and a text as an object key) was a 400: each text's tokens
    (the fake tokenizer's are code points) take the bias, false bans the token."""
    for bias in ([[65, 2], ["BC", -1.5], [68, False]], {"65": 2, "BC": -1.5}):
        r = fake.client.post("/v1/chat/completions", json={"model": "fake-model", "messages": USER, "logit_bias": bias})
        assert r.status_code == 200, r.text
        expected = {65: 2.0, 66: -1.5, 67: -1.5} | ({68: float("-inf")} if isinstance(bias, list) else {})
        assert fake.last.params.logit_bias == expected
