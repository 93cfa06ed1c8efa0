"""A bad request is refused before its model loads (hearth.api.sampling.check_before_load): an asked token limit
past the model's context (ModelSpec.max_model_len, from its file's header), n past the server's limit or a sampler
field out of its range is a 400 with nothing loaded and nothing unloaded. Before: the model loaded first, unloading
another under --max-memory (seconds each way) just to answer 400."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from hearth.api.media_parts import Vision
from hearth.api.model_pool import ModelPool
from hearth.api.model_spec import ModelSpec
from hearth.api.served import FileFacts
from tests.server.test_model_pool import USER, FakeLoader, loaded, pool_of, serve  # noqa: F401  (serve: the fixture)

TOO_MANY = 10**9
BAD = [
    ("/v1/chat/completions", {"messages": USER, "max_tokens": TOO_MANY}, "max_tokens"),
    ("/v1/chat/completions", {"messages": USER, "max_completion_tokens": 5000}, "max_completion_tokens"),
    ("/v1/chat/completions", {"messages": USER, "n": 100}, "n"),
    ("/v1/responses", {"input": "hi", "max_output_tokens": TOO_MANY}, "max_output_tokens"),
    ("/v1/messages", {"messages": USER, "max_tokens": TOO_MANY}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": TOO_MANY}, "max_tokens"),
    ("/v1/completions", {"prompt": "hi", "n": 100}, "n"),
    ("/v1/chat/completions", {"messages": USER, "temperature": -1}, "temperature"),
    ("/v1/chat/completions", {"messages": USER, "max_tokens": 8, "min_tokens": 9}, "min_tokens"),
    ("/v1/chat/completions", {"messages": USER, "stop": [""]}, "stop"),
    ("/v1/chat/completions", {"messages": USER, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/responses", {"input": "hi", "top_p": 2}, "top_p"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "stop_sequences": [""]}, "stop_sequences"),
    ("/v1/completions", {"prompt": "hi", "presence_penalty": 5}, "presence_penalty"),
    ("/api/chat", {"messages": USER, "options": {"temperature": -1}}, "options.temperature"),
    ("/api/generate", {"prompt": "hi", "options": {"top_p": 2}}, "options.top_p"),
    ("/completion", {"prompt": "hi", "n_predict": TOO_MANY}, "n_predict"),
    ("/completion", {"prompt": "hi", "dry_base": 0.5}, "dry_base"),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "temperature": -1}, "temperature"),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": TOO_MANY}, "n_predict"),
]


@pytest.mark.parametrize("path,body,param", BAD, ids=[f"{p}-{f}" for p, _, f in BAD])
def test_a_bad_request_is_refused_before_its_model_loads(serve, path, body, param):
    pool, loader = pool_of(("a", 1), ("b", 1), budget_gib=1)  # room for one model
    client = serve(pool)
    assert client.post("/v1/chat/completions", json={"model": "a", "messages": USER}).status_code == 200
    r = client.post(path, json={**body, "model": "b"})
    assert r.status_code == 400, r.text
    assert param in r.text
    assert loader.loads == ["a"] and loaded(client) == {"a": True, "b": False}


def test_ollama_s_num_predict_past_the_context_is_still_no_400(serve):
    """Ollama reads a num_predict past the context as "until the context is full" (within_context): the check
    before the load keeps that."""
    pool, loader = pool_of(("a", 1))
    client = serve(pool)
    r = client.post("/api/chat", json={"model": "a", "messages": USER, "stream": False,
                                       "options": {"num_predict": TOO_MANY}})
    assert r.status_code == 200, r.text


def test_a_loaded_model_s_own_context_bounds_it(serve):
    """Once loaded, the engine's context (not the spec's) is the bound: here the fake engine's 4096 tokens."""
    pool, loader = pool_of(("a", 1))
    client = serve(pool)
    ok = client.post("/v1/chat/completions", json={"model": "a", "messages": USER, "max_tokens": 8})
    assert ok.status_code == 200
    r = client.post("/v1/chat/completions", json={"model": "a", "messages": USER, "max_tokens": 4097})
    assert r.status_code == 400 and "4096" in r.json()["error"]["message"]


def _facts(pooling: str = "last", embeds_only: bool = False) -> FileFacts:
    """A header's facts as `hearth serve` reads them before a load: 100 tokens, 64-wide hidden states."""
    return FileFacts("m.gguf", {}, 0, "", 0, "", embeds_only, pooling, vocab_size=100, embedding_size=64)


def _pool(budget_gib: int = 1) -> tuple[ModelPool, FakeLoader]:
    """a and b: text models (a loaded first; b with two LoRA adapters); r: a reranker; room for one model."""
    loader = FakeLoader()
    spec = [ModelSpec([n], 1 << 30, max_model_len=4096, facts=_facts(*p), lora_count=k) for n, p, k in
            (("a", (), 0), ("b", (), 2), ("r", ("rank", True), 0))]
    return ModelPool(spec, loader, budget_gib << 30), loader


NOT_A_RERANKER = {"query": "q", "documents": ["d"]}
OTHER = [  # (path, body, model, status, param): bodies are POSTed; a model that would have to load for it first
    ("/v1/embeddings", {"input": ""}, "b", 400, "input"),
    ("/v1/embeddings", {"input": []}, "b", 400, "input"),
    ("/v1/embeddings", {"input": [[]]}, "b", 400, "input"),
    ("/v1/embeddings", {"input": ["x", "\ud800"]}, "b", 400, "input"),
    ("/v1/embeddings", {"input": [5, 100]}, "b", 400, "input"),  # the header's vocabulary: 100 tokens
    ("/v1/embeddings", {"input": [1] * 5000}, "b", 400, "input"),  # past the 4096-token context
    ("/v1/embeddings", {"input": "x", "dimensions": 7}, "b", 400, "dimensions"),
    ("/v1/embeddings", {"input": "x", "truncate_prompt_tokens": 0}, "b", 400, "truncate_prompt_tokens"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "bogus"}, "b", 400, "encoding_format"),
    ("/v1/embeddings", {"input": "x"}, "r", 400, "model"),  # a reranker's
    ("/v1/embeddings", {"input": "x"}, "nope", 404, "model"),
    ("/embedding", {"content": [[]]}, "b", 400, "content"),
    ("/embedding", {"input": "x"}, "r", 400, "model"),
    ("/api/embed", {"input": ["x", ""]}, "b", 400, "input"),
    ("/api/embed", {"input": "x", "dimensions": 7}, "b", 400, "dimensions"),
    ("/api/embed", {"input": "x"}, "r", 400, "model"),
    ("/api/embeddings", {"prompt": "\ud800"}, "b", 400, "prompt"),
    ("/api/embeddings", {"prompt": "x"}, "r", 400, "model"),
    ("/v1/rerank", {"query": "q", "documents": []}, "r", 400, "documents"),
    ("/v1/rerank", {"query": "", "documents": ["d"]}, "r", 400, "query"),
    ("/v1/rerank", {**NOT_A_RERANKER, "top_n": -1}, "r", 400, "top_n"),
    ("/v1/rerank", {**NOT_A_RERANKER, "max_tokens_per_doc": 0}, "r", 400, "max_tokens_per_doc"),
    ("/v1/rerank", {**NOT_A_RERANKER, "texts": ["d"]}, "r", 400, "texts"),
    ("/v1/rerank", {**NOT_A_RERANKER, "truncate_prompt_tokens": 0}, "r", 400, "truncate_prompt_tokens"),
    ("/v1/rerank", {"query": "q", "documents": [{"title": "d"}]}, "r", 400, "documents"),
    ("/v1/rerank", NOT_A_RERANKER, "b", 400, "model"),
    ("/v1/score", {"text_1": "", "text_2": "d"}, "r", 400, "text_1"),
    ("/v1/score", {"text_1": ["q", "q"], "text_2": ["a", "b", "c"]}, "r", 400, "text_2"),
    ("/v1/score", {"text_1": "q", "text_2": "d", "truncate_prompt_tokens": 5000}, "r", 400, "truncate_prompt_tokens"),
    ("/tokenize", {"content": "x", "prompt": "y"}, "b", 400, "content"),
    ("/tokenize", {}, "b", 400, "content"),
    ("/tokenize", {"prompt": "x", "messages": USER}, "b", 400, "prompt"),
    ("/detokenize", {"tokens": [-1]}, "b", 400, "tokens"),
    ("/detokenize", {"tokens": [100]}, "b", 400, "tokens"),
    ("/slots/save", {"name": "../x"}, "b", 400, "name"),
    ("/slots/save", {}, "b", 400, "name"),
    ("/slots/save", {"name": "x", "prompt": "y", "messages": USER}, "b", 400, "prompt"),
    ("/slots/restore", {"filename": "a/b"}, "b", 400, "filename"),
    ("/v1/chat/completions", {"messages": USER, "lora": [{"id": 2, "scale": 1.0}]}, "b", 400, "lora"),
    ("/completion", {"prompt": "x", "lora": [{"id": 0, "scale": 1.0}]}, "r", 400, "lora"),  # r has none
]


@pytest.mark.parametrize("path,body,model,status,param", OTHER,
                         ids=[f"{p}-{m}-{f}-{i}" for i, (p, _, m, _, f) in enumerate(OTHER)])
def test_a_bad_request_to_any_route_is_refused_before_its_model_loads(serve, path, body, model, status, param):
    """Embeddings, rerank/score, tokenize/detokenize and slots too: what needs no loaded model (the body's shape,
    the header's vocabulary, context, pooling and width) is checked first."""
    pool, loader = _pool()
    client = serve(pool)
    assert client.post("/v1/chat/completions", json={"model": "a", "messages": USER}).status_code == 200
    # as the SDKs send JSON (ASCII, a lone surrogate escaped): httpx's json= cannot encode one
    r = client.post(path, content=json.dumps({**body, "model": model}), headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert param in r.text
    assert loader.loads == ["a"] and loaded(client) == {"a": True, "b": False, "r": False}


@pytest.mark.parametrize("path", ["/props", "/slots", "/lora-adapters"])
def test_a_get_route_s_unknown_model_is_a_404_with_nothing_loaded(serve, path):
    pool, loader = _pool()
    client = serve(pool)
    r = client.get(path, params={"model": "nope"})
    assert r.status_code == 404 and "nope" in r.text
    assert loader.loads == []


@pytest.mark.parametrize("model,ids", [("b", [2]), ("r", [0])])
def test_lora_adapters_s_bad_ids_are_refused_before_the_model_loads(serve, model, ids):
    """POST /lora-adapters?model=: the server's flags say each model's adapters (b: two, r: none)."""
    pool, loader = _pool()
    client = serve(pool)
    r = client.post("/lora-adapters", params={"model": model}, json=[{"id": j, "scale": 1.0} for j in ids])
    assert r.status_code == 400 and r.json()["error"]["param"] in ("lora", "lora-adapters"), r.text
    assert loader.loads == []


PNG = "data:image/png;base64,iVBORw0KGgo="  # decodes (what the check before the load reads); no image is prepared
IMAGE = {"type": "image_url", "image_url": {"url": PNG}}
ROBOT = [{"role": "robot", "content": "x"}]
ANSWER = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]
OUTPUT = [{"type": "function_call_output", "call_id": "c1", "output": "x"}]
MESSAGES = [  # (path, body, model, param): a bad conversation; b reads text only, v takes one image a request
    ("/v1/chat/completions", {"messages": []}, "b", "messages"),
    ("/v1/chat/completions", {"messages": ROBOT}, "b", "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "bogus"}]}]}, "b",
     "messages[0].content[0].type"),
    ("/v1/chat/completions", {"messages": [{"role": "tool", "content": "x"}]}, "b", "messages[0].tool_call_id"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [IMAGE]}]}, "b", "messages[0].content[0].type"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [IMAGE, IMAGE]}]}, "v",
     "messages[0].content[1].image_url.url"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}]}]}, "v",
     "messages[0].content[0].image_url.url"),
    ("/v1/responses", {"input": []}, "b", "input"),
    ("/v1/responses", {"input": [{"type": "bogus"}]}, "b", "input[0].type"),
    ("/v1/responses", {"input": OUTPUT}, "b", "input[0].call_id"),
    ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}]}, "b",
     "input[0].content[0].type"),
    ("/v1/messages", {"messages": [], "max_tokens": 8}, "b", "messages"),
    ("/v1/messages", {"messages": [{"role": "system", "content": "x"}], "max_tokens": 8}, "b", "messages[0].role"),
    ("/v1/messages", {"messages": ANSWER, "max_tokens": 8}, "b", "messages[0].content[0].tool_use_id"),
    ("/v1/messages", {"messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}], "max_tokens": 8},
     "b", "messages[0].content[0].text"),
    ("/v1/messages", {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}],
        "max_tokens": 8}, "b", "messages[0].content[0].type"),
    ("/v1/messages/count_tokens", {"messages": ROBOT}, "b", "messages[0].role"),
    ("/api/chat", {"messages": ROBOT}, "b", "messages[0].role"),
    ("/api/chat", {"messages": [{"role": "user", "content": "x", "images": ["iVBORw0KGgo="]}]}, "b",
     "messages[0].images"),
    ("/api/generate", {"prompt": "x", "images": ["iVBORw0KGgo="]}, "b", "images"),
    ("/apply-template", {"messages": ROBOT}, "b", "messages[0].role"),
    ("/tokenize", {"messages": ROBOT}, "b", "messages[0].role"),
    ("/slots/save", {"name": "x", "messages": ROBOT}, "b", "messages[0].role"),
    ("/slots/save", {"name": "x", "messages": [{"role": "user", "content": [IMAGE]}]}, "v",
     "messages[0].content[0].image_url.url"),  # a slot saves text: refused where the model takes images too
]

TOOLS = [  # (path, body, model, param): a bad tool definition or choice, which needs no model either
    ("/v1/chat/completions", {"messages": USER, "tools": [{"type": "custom", "name": "x"}]}, "b", "tools[0].type"),
    ("/v1/chat/completions", {"messages": USER, "functions": [{"name": "f"}], "function_call": {}}, "b",
     "function_call.name"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "web_search"}]}, "b", "tools[0].type"),
    ("/v1/responses", {"input": "hi", "tool_choice": {"type": "file_search"}}, "b", "tool_choice.type"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "tools": [{"type": "web_search_20250305", "name": "w"}]},
     "b", "tools[0].type"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "tool_choice": {"type": "auto",
                                                                           "disable_parallel_tool_use": 1}},
     "b", "tool_choice.disable_parallel_tool_use"),
    ("/api/chat", {"messages": USER, "tools": [{"type": "custom", "name": "x"}]}, "b", "tools[0].type"),
    # the routes that render a chat without running it read its tools as the chat does (openai_tools)
    ("/tokenize", {"messages": USER, "tools": [{"type": "custom", "name": "x"}]}, "b", "tools[0].type"),
    ("/apply-template", {"messages": USER, "tools": [{"function": {"name": "a b"}}]}, "b", "tools[0].function.name"),
    ("/slots/save", {"name": "x", "messages": USER, "tools": [{"function": {"name": "f", "parameters": 1}}]}, "b",
     "tools[0].function.parameters"),
]

GUARD = [  # (path, body, model, param): a bad `hearth` extension (the tool guard's), which needs no model either
    ("/v1/chat/completions", {"messages": USER, "hearth": {"tool_guard": "bogus"}}, "b", "hearth.tool_guard"),
    ("/v1/chat/completions", {"messages": USER, "n": 2, "tools": [{"type": "function", "function": {"name": "f"}}],
                              "hearth": {"workflow": {"required": ["f"]}}}, "b", "hearth.workflow"),
    ("/v1/responses", {"input": "hi", "hearth": {"max_tools": 0}}, "b", "hearth.max_tools"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "hearth": {"workflow": {"required": ["f"]}}}, "b",
     "hearth.workflow"),
    ("/api/chat", {"messages": USER, "hearth": {"router_threshold": 2}}, "b", "hearth.router_threshold"),
    ("/v1/chat/completions", {"messages": USER, "hearth": {"router": "nope"}}, "b", "hearth.router"),
    ("/v1/responses", {"input": "hi", "hearth": {"router": "nope"}}, "b", "hearth.router"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "hearth": {"router": "nope"}}, "b", "hearth.router"),
    ("/api/chat", {"messages": USER, "hearth": {"router": "nope"}}, "b", "hearth.router"),
]

BAD_SCHEMA = {"type": "bogus"}  # llguidance's "Invalid type": a schema's own fault, found without the model's tokenizer
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "x", "schema": BAD_SCHEMA}}
STRUCTURED = [  # (path, body, model, param): structured output that does not compile (hearth.sample.grammar)
    ("/v1/chat/completions", {"messages": USER, "response_format": SCHEMA_FORMAT}, "b",
     "response_format.json_schema.schema"),
    ("/v1/chat/completions", {"messages": USER, "guided_json": BAD_SCHEMA}, "b", "guided_json"),
    ("/v1/chat/completions", {"messages": USER, "guided_regex": "("}, "b", "guided_regex"),
    ("/v1/chat/completions", {"messages": USER, "response_format": {"type": "json_object"}, "guided_json": {}}, "b",
     "guided_json"),
    ("/v1/completions", {"prompt": "hi", "response_format": SCHEMA_FORMAT}, "b", "response_format.json_schema.schema"),
    ("/v1/completions", {"prompt": "hi", "structured_outputs": {"grammar": "root ::= nope"}}, "b",
     "structured_outputs.grammar"),
    ("/v1/responses", {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": BAD_SCHEMA}}},
     "b", "text.format.schema"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8,
                      "output_config": {"format": {"type": "json_schema", "schema": BAD_SCHEMA}}}, "b",
     "output_config.format.schema"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "output_format": {"type": "json_schema",
                                                                           "schema": BAD_SCHEMA}}, "b",
     "output_format.schema"),
    ("/api/chat", {"messages": USER, "format": BAD_SCHEMA}, "b", "format"),
    ("/api/generate", {"prompt": "hi", "format": BAD_SCHEMA}, "b", "format"),
    ("/completion", {"prompt": "hi", "json_schema": BAD_SCHEMA}, "b", "json_schema"),
]

F = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
OBJECT = {"type": "object"}
FORCED = [  # (path, body, model, param): a forced call (a grammar) beside a format, or a choice of no offered tool
    ("/v1/chat/completions", {"messages": USER, "tools": [F], "tool_choice": "required",
                              "response_format": {"type": "json_object"}}, "b", "response_format"),
    ("/v1/chat/completions", {"messages": USER, "tools": [F], "tool_choice": {"type": "function", "function":
                              {"name": "f"}}, "guided_json": OBJECT}, "b", "guided_json"),
    ("/v1/chat/completions", {"messages": USER, "tools": [F], "tool_choice": {"type": "function", "function":
                              {"name": "g"}}}, "b", "tool_choice"),
    ("/v1/chat/completions", {"messages": USER, "tool_choice": "required"}, "b", "tool_choice"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": "required",
                       "text": {"format": {"type": "json_schema", "name": "x", "schema": OBJECT}}}, "b", "text.format"),
    ("/v1/responses", {"input": "hi", "tools": [{"type": "function", "name": "f"}],
                       "tool_choice": {"type": "function", "name": "g"}}, "b", "tool_choice"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "tools": [{"name": "f", "input_schema": OBJECT}],
                      "tool_choice": {"type": "tool", "name": "g"}}, "b", "tool_choice"),
    ("/v1/messages/count_tokens", {"messages": USER, "tools": [{"name": "f", "input_schema": OBJECT}],
                                   "tool_choice": {"type": "tool", "name": "g"}}, "b", "tool_choice"),
    ("/v1/messages", {"messages": USER, "max_tokens": 8, "tools": [{"name": "f", "input_schema": OBJECT}],
                      "tool_choice": {"type": "any"}, "output_config": {"format": {"type": "json_schema",
                                                                                   "schema": OBJECT}}}, "b",
     "output_config.format"),
]

PROJECTOR = SimpleNamespace(projector="gemma3")
"""What /v1/models reads of a VisionConfig (its mmproj's header)."""


def _vision_pool() -> tuple[ModelPool, FakeLoader]:
    """_pool's a and b, and v: served with a vision projector that takes one image a request (its header read
    with the pool's: ModelSpec.facts.vision); room for one model."""
    pool, loader = _pool()
    v = ModelSpec(["v"], 1 << 30, max_model_len=4096, facts=replace(_facts(), vision=Vision(PROJECTOR, max_images=1)),
                  lora_count=0)
    return ModelPool([s.spec for s in pool.slots] + [v], loader, 1 << 30), loader


BEFORE_LOAD = MESSAGES + TOOLS + GUARD + STRUCTURED + FORCED


@pytest.mark.parametrize("path,body,model,param", BEFORE_LOAD,
                         ids=[f"{p}-{m}-{f}-{i}" for i, (p, _, m, f) in enumerate(BEFORE_LOAD)])
def test_a_bad_conversation_is_refused_before_its_model_loads(serve, path, body, model, param):
    """The messages (roles, content parts, tool results without their call, images a model does not take or too
    many of them), the tools, the tool guard's `hearth` extension and structured output's schema or grammar (which
    compiles without the model's tokenizer) are read before the load, against what the pool knows of the model
    (hearth.api.model_spec.Known: its vision projector and --limit-mm-per-prompt); the loaded model's reading stays
    the ground truth."""
    pool, loader = _vision_pool()
    client = serve(pool)
    assert client.post("/v1/chat/completions", json={"model": "a", "messages": USER}).status_code == 200
    r = client.post(path, json={**body, "model": model})
    assert r.status_code == 400, r.text
    assert _param(r.json()["error"]) == param, r.text
    assert loader.loads == ["a"] and loaded(client) == {"a": True, "b": False, "r": False, "v": False}


def _param(error) -> str:
    """The field a 400 names: OpenAI's `param`, else its message's opening (Anthropic's error, Ollama's string)."""
    if isinstance(error, str):
        return error.split(": ")[0]
    return error.get("param") or error["message"].split(": ")[0]


def test_a_model_whose_images_are_not_known_reads_them_after_its_load(serve):
    """A pool built without its files' facts (ModelPool.of's, tests') knows nothing of a model's projector: an image
    passes the check before the load, and the loaded model's own (here: text only) answers."""
    pool, loader = pool_of(("a", 1))
    client = serve(pool)
    r = client.post("/v1/chat/completions", json={"model": "a", "messages": [{"role": "user", "content": [IMAGE]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[0].type", r.text
    assert loader.loads == ["a"]


@pytest.mark.parametrize("path,body", [("/slots/save", {"name": "x", "prompt": "y"}),
                                       ("/slots/restore", {"filename": "x"})])
def test_slots_on_a_server_without_a_disk_tier_are_refused_before_the_model_loads(serve, path, body):
    """A disk tier is the server's flag (--kv-disk-dir, ModelSpec.kv_disk): without one a slot's save or restore
    is a 400 with nothing loaded."""
    pool, loader = _pool()
    for slot in pool.slots:
        slot.spec.kv_disk = False
    client = serve(pool)
    r = client.post(path, json={**body, "model": "b"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "kv_disk_disabled", r.text
    assert loader.loads == []


@pytest.mark.parametrize("path,body", [("/slots/save", {"name": "x", "messages": USER}),
                                       ("/slots/restore", {"filename": "x"})])
@pytest.mark.parametrize("recurrent", [True, False])
def test_slots_of_a_model_with_recurrent_layers_are_refused_before_it_loads(serve, path, body, recurrent):
    """A model with recurrent layers (qwen35: FileFacts.recurrent, from its header) runs without the disk tier the
    server has (hearth.llm_recurrent): its slots are refused before its load; another model's load to answer (the
    fake served model has no snapshot store: its 400 after the load)."""
    pool, loader = _pool()
    b = pool.slots[1].spec
    b.kv_disk, b.facts = True, replace(b.facts, recurrent=recurrent)
    client = serve(pool)
    r = client.post(path, json={**body, "model": "b"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "kv_disk_disabled", r.text
    assert loader.loads == ([] if recurrent else ["b"])


def test_structured_output_that_compiles_still_loads_and_answers(serve):
    """The check before the load refuses only what does not compile: a good schema loads the model as before."""
    pool, loader = _pool()
    client = serve(pool)
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    r = client.post("/v1/chat/completions", json={"model": "b", "messages": USER, "response_format": fmt})
    assert r.status_code == 200, r.text
    assert loader.loads == ["b"]
