"""POST /api/chat and /api/generate: Ollama's native generation routes, so clients written for Ollama
(the `ollama` Python client, LangChain's ChatOllama, Open WebUI, Continue) work against `hearth serve`.

/api/chat goes the way /v1/chat/completions and /v1/messages go: the messages (hearth.api.ollama_messages)
and tools rendered by the model's template, the tool guard and a router as configured
(hearth.api.tool_router), the reply from the parsed updates (hearth.api.ollama_reply). /api/generate
renders `system` + `prompt` as one user turn, or takes the prompt as it is (`raw`, and a model whose GGUF has no
chat template: Ollama's template for one is `{{ .Prompt }}`, a base model's plain completion), or lays a
fill-in-the-middle prompt out with `suffix` (hearth.api.infill). An empty conversation or prompt loads
the model and answers done (done_reason "load"), as Ollama does; `keep_alive: 0` unloads it instead (a 409
saying why where it stays: pinned), or, on a request that generates, once the answer is sent; any other
keep_alive is how long it stays loaded once idle."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from hearth.api.embeddings_only import refuse
from hearth.api.errors import OLLAMA_OPTIONS, APIError
from hearth.api.generate import Generation, until_disconnect
from hearth.api.choices import PlainChoices
from hearth.api.guard_extras import RequestGuard
from hearth.api.guided import compiled
from hearth.api.ignored_fields import note
from hearth.api.infill import suffix_fim, suffix_prompt
from hearth.api.media_parts import RequestImages
from hearth.api.media_prompt import shifted
from hearth.api.messages import openai_messages
from hearth.api.ollama_messages import ollama_messages
from hearth.api.ollama_models import TAG, answered, resolve, served_model, thinks, unload_after
from hearth.api.ollama_options import (asked_logprobs, keep_alive_seconds, sampling_fields, structured_output,
                                      think_kwargs, within_context)
from hearth.api.ollama_protocol import ChatRequest, GenerateRequest, now
from hearth.api.ollama_reply import NDJSON, OllamaReply
from hearth.api.parsing import output_parser
from hearth.api.read_before_load import read_before_load
from hearth.api.sampling import check_before_load, lora_scales, make_params, token_ids
from hearth.api.sse import SSEResponse
from hearth.api.tool_layer import ChoicesRequest, reprompt_ids
from hearth.api.tool_router import extensions_before_load, routed_choices
from hearth.api.tools import ToolPlan, openai_tools, plan_tools, prompt_messages
from hearth.tool_guard.routing import Ask
from hearth.tool_parsers import OutputParser

router = APIRouter()

FIELD_NAMES = {**{field: f"options.{name}" for name, field in OLLAMA_OPTIONS.items()}, "logprobs": "top_logprobs"}
"""SamplingParams fields -> their names in an Ollama request, for errors."""


@router.post("/api/chat")
async def chat(body: ChatRequest, request: Request):
    started = time.perf_counter()
    state = request.app.state
    keep_alive = keep_alive_seconds(body.keep_alive)  # read first: a bad one is a 400 before any load
    if keep_alive == 0 and not body.messages:
        return await _unload(state.models, body.model, {"message": {"role": "assistant", "content": ""}})
    if body.messages and state.config.embeddings_only:  # a load answers there, as `ollama run`'s preload
        await refuse()
    if body.messages:
        _check_options(state, body)
        reading = read_before_load(state.models, body.model, lambda images: ollama_messages(body.messages, images))
        tools = openai_tools(body.tools)
        constraint = compiled(structured_output(body.format), "format")
        ext = extensions_before_load(state, body.model, body.hearth, tools)
    served, load_s = await served_model(state.models, body.model, keep_alive)
    name = body.model or served.name
    k = asked_logprobs(body, served)
    if not body.messages:
        return _loaded({"model": name, "created_at": now(), "message": {"role": "assistant", "content": ""}})
    history, images = reading.on(served)
    await served.load_images(images)
    guard = RequestGuard(ext, tools, history)
    plan = plan_tools(served, guard.tools, None)
    guard.prompt_hint(plan, True)
    template, prefill = think_kwargs(body.think, thinks(served)), _continued(history)
    fields = {**sampling_fields(body.options, served.max_model_len, state.limits.defaults), "logprobs": k,
              "lora": _lora(body, served)}

    def fit(msgs: list[dict], continued: bool = prefill) -> tuple[str, list[int]]:
        return guard.fit(lambda m: _render(served, plan, m, template, continued, images), msgs, served.max_model_len,
                         fields["max_tokens"], served.model_context)

    def reprompt(extra: list[dict]) -> list[int]:
        text, ids = fit(history + openai_messages(extra), False)
        return reprompt_ids(served, text, fields["max_tokens"], ids)

    text, ids = fit(history)
    fields = within_context(fields, len(ids), served.max_model_len)
    fields["structured_output"] = constraint or plan.constraint
    ask = Ask(guard.tools, None, history, token_level=k is not None, structured=constraint is not None,
              workflow=guard.ext.workflow is not None, prefill=prefill)
    req = ChoicesRequest(served, plan, text, ids, fields, FIELD_NAMES, guard, True,
                         reprompt,
                         streaming=body.stream)
    source, _ = await routed_choices(state, served.name, ask,
                                     lambda s, p: _render(s, p, history, template, prefill, images), req)
    reply = OllamaReply(name, source, True, started, load_s, logprobs=(served.tokenizer, k))
    return await _answer(request, body.stream, reply, unload_after(state.models, served.name, keep_alive))


def _check_options(state, body: ChatRequest | GenerateRequest) -> None:
    """The options' checks that need no loaded model (their ranges: hearth.api.sampling.check_before_load), before
    its load; a num_predict past the context is no 400 here either (within_context)."""
    context = state.models.context(resolve(state.models, body.model).spec.name) or math.inf  # 0: not known
    fields = within_context(sampling_fields(body.options, context, state.limits.defaults), 0, context)
    check_before_load(state.models, body.model, state.limits, fields, FIELD_NAMES)


def _lora(body, served) -> dict[int, float] | None:
    """The adapter a `--lora-modules` NAME (or NAME:latest) selects, as on the OpenAI routes."""
    return lora_scales(body, served, (body.model or "").removesuffix(TAG))


def _continued(history: list[dict]) -> bool:
    """A final assistant message with text is continued, as Ollama continues it (an empty one prefills nothing)."""
    last = history[-1]
    return last["role"] == "assistant" and bool(last["content"]) and not last.get("tool_calls")


def _render(served, plan, messages: list[dict], template: dict, continued: bool, images=None) -> tuple[str, list[int]]:
    text = served.render_chat(prompt_messages(served, plan, messages), plan.tools if plan.in_template else None,
                              add_generation_prompt=not continued, continue_final=continued, template_kwargs=template)
    return text, served.encode_chat_text(text, images, messages)


@router.post("/api/generate")
async def generate(body: GenerateRequest, request: Request):
    started = time.perf_counter()
    _check_generate(body)
    state = request.app.state
    keep_alive = keep_alive_seconds(body.keep_alive)
    if keep_alive == 0 and not body.prompt and not body.suffix:
        return await _unload(state.models, body.model, {"response": ""})
    if (body.prompt or body.suffix) and state.config.embeddings_only:
        await refuse()
    if body.prompt or body.suffix:
        _check_options(state, body)
        reading = read_before_load(state.models, body.model, lambda images: _generate_images(body.images, images))
        constraint = compiled(structured_output(body.format), "format")
    served, load_s = await served_model(state.models, body.model, keep_alive)
    name = body.model or served.name
    k = asked_logprobs(body, served)
    if not body.prompt and not body.suffix:
        return _loaded({"model": name, "created_at": now(), "response": ""})
    marks, images = reading.on(served)
    await served.load_images(images)
    text, ids, context = _generate_prompt(served, body, images, marks)
    options = sampling_fields(body.options, served.max_model_len, state.limits.defaults)
    fields = {**within_context(options, len(ids), served.max_model_len),
              "structured_output": constraint, "logprobs": k, "lora": _lora(body, served)}
    params = make_params(fields, state.limits, served.max_model_len, FIELD_NAMES, len(ids))
    gen = Generation(served.engine, ids, params, state.metrics.of(served.name))
    templated = not _plain(served, body) and not body.suffix  # a raw or FIM answer is plain text: nothing to parse
    parser = output_parser(served, ToolPlan(), text, body.stream) if templated else OutputParser()
    reply = OllamaReply(name, PlainChoices(gen, [parser]), False, started, load_s, context, "/api/generate",
                        (served.tokenizer, k))
    return await _answer(request, body.stream, reply, unload_after(state.models, served.name, keep_alive))


def _check_generate(body: GenerateRequest) -> None:
    if body.images and body.suffix:
        raise APIError(400, "images: a fill-in-the-middle prompt (suffix) takes no images", param="images")
    if body.template:
        raise APIError(400, "template: hearth renders prompts with the model's own chat template (from its GGUF); "
                            "send `raw: true` with a prompt you formatted yourself", param="template")
    if body.raw and (body.system or body.context):  # Ollama's rule
        field = "system" if body.system else "context"
        raise APIError(400, f"{field}: raw mode does not support template, system, or context", param=field)


def _generate_images(given, images: RequestImages) -> str:
    """The markers of /api/generate's `images` (base64), which go ahead of the prompt, as Ollama puts them."""
    if not given:
        return ""
    images.require("images")
    if not isinstance(given, list):
        raise APIError(400, "images: must be a list of base64 strings", param="images")
    return "".join(images.add_b64(f"images[{j}]", x) for j, x in enumerate(given))


def _generate_prompt(served, body: GenerateRequest, images=None,
                     marks: str = "") -> tuple[str, list[int], list[int] | None]:
    """(the prompt's text, its ids, the ids a reply's `context` starts with: None for raw and FIM, as Ollama,
    and where images are in the prompt: ids with image rows continue nothing without their images)."""
    if body.suffix:
        fim = suffix_fim(served)
        prefix = served.encode_text(body.prompt, add_special_tokens=False, parse_special=False)
        return body.prompt, suffix_prompt(served, fim, prefix, body.suffix), None
    if body.raw and images:
        prompt = marks + body.prompt
        return body.prompt, served.encode_chat_text(prompt, images, [{"content": prompt}]), None
    if body.raw:
        return body.prompt, served.encode_text(body.prompt), None
    context = token_ids("context", body.context, served.vocab_size)
    if _plain(served, body):  # {{ .Prompt }}: the system prompt has no place in it, as Ollama's drops it (named)
        note({"system": None} if body.system else {}, frozenset())
        text = marks + body.prompt
        ids = shifted(context, served.encode_chat_text(text, images, [{"content": text}]))
        return body.prompt, ids, None if images else ids
    messages = openai_messages(([{"role": "system", "content": body.system}] if body.system else []) +
                               [{"role": "user", "content": marks + body.prompt}])
    text = served.render_chat(messages, template_kwargs=think_kwargs(body.think, thinks(served)))
    ids = shifted(context, served.encode_chat_text(text, images, messages))
    return text, ids, None if images else ids


def _plain(served, body: GenerateRequest) -> bool:
    """The prompt runs as it is: `raw`, or a GGUF without a chat template (a base model: the built-in
    /api/chat falls back to would wrap it in turns it never learned, as gemma-3-270m's answered wrong)."""
    return body.raw or served.chat_template.is_fallback


def _loaded(head: dict) -> JSONResponse:
    """The answer to a request that only loads its model (Ollama's one object, streamed or not)."""
    return JSONResponse({**head, "done": True, "done_reason": "load"})


async def _unload(pool, model: str | None, empty: dict) -> JSONResponse:
    """keep_alive 0 with nothing to answer (`ollama stop MODEL`): "unload", the model unloaded now or, busy,
    once its requests end (as Ollama expires a busy runner). Where it stays loaded (pinned, a model this server
    could not load again, one still loading) a 409 says why: `ollama stop` ignores a 200's body, so a "load"
    answer told its user it stopped while it stayed; it prints a non-200's error and exits 1."""
    slot = resolve(pool, model)
    if why := await pool.unload(slot.spec.name):  # checked and unloaded in one step (ModelPool.unload)
        raise APIError(409, f"model '{model or slot.spec.name}' was not unloaded: {why}", code="model_pinned")
    head = {"model": model or slot.spec.name, "created_at": now(), **empty}
    return JSONResponse({**head, "done": True, "done_reason": "unload"})


async def _answer(request: Request, stream: bool, reply: OllamaReply, then: Callable[[], Awaitable] | None = None):
    if stream:
        return SSEResponse(reply.lines(), on_close=reply.src.abort, media_type=NDJSON, then=then)
    result = await until_disconnect(request, reply.whole())
    return answered(result if result is not None else {}, then)
