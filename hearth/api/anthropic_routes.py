"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API).

Output channels become content blocks: reasoning a `thinking` block, text a `text` block, each
tool call a `tool_use` block. `usage.input_tokens` counts the prompt tokens not read from the
prefix cache; those are `cache_read_input_tokens`, as Anthropic counts them."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hearth.api.anthropic_messages import anthropic_messages
from hearth.api.anthropic_protocol import CountTokensRequest, MessagesRequest
from hearth.api.anthropic_stream import message_events, tool_input, tool_use_block, unparsed_tool_use, usage
from hearth.api.errors import APIError
from hearth.api.choices import settle
from hearth.api.extensions import Extensions
from hearth.api.generate import until_disconnect
from hearth.api.guard_extras import RequestGuard
from hearth.api.guided import compiled
from hearth.api.messages import _kind, bad, openai_messages
from hearth.api.parsing import anthropic_stop
from hearth.api.read_before_load import read_before_load
from hearth.api.sampling import check_before_load, common_fields
from hearth.api.sse import SSEResponse
from hearth.api.tool_layer import ChoicesRequest, reprompt_ids
from hearth.api.tool_router import extensions_before_load, routed_choices
from hearth.api.tools import anthropic_tools, forces_call, plan_tools, prompt_messages
from hearth.sampling_params import StructuredOutput
from hearth.tool_guard.routing import Ask
from hearth.tool_parsers import collect

router = APIRouter()


def _read(pool, body):
    """The request's messages (hearth.api.anthropic_messages), read before its model loads (read_before_load)."""
    return read_before_load(pool, body.model, lambda images: anthropic_messages(body.messages, body.system, images))


def _guarded(served, body, ext: Extensions, history: list[dict], offered: list[dict],
             parallel: bool) -> tuple[RequestGuard, object]:
    """The request's guard (its tools ranked) and tool plan; ext: its extensions (extensions_before_load), offered: its
    tools (anthropic_tools) and parallel: whether calls may be parallel (_parallel), read before the load (they need
    no model) and once: the reply and the stream use the same answer."""
    guard = RequestGuard(ext, offered, history, body.tool_choice)
    plan = plan_tools(served, guard.tools, body.tool_choice)
    guard.prompt_hint(plan, parallel)
    return guard, plan


def _parallel(body) -> bool:
    """Anthropic's `tool_choice.disable_parallel_tool_use: true` is OpenAI's `parallel_tool_calls: false`:
    at most one call (the lazy call grammar ends the answer after one; the reply keeps the first)."""
    choice = body.tool_choice if isinstance(body.tool_choice, dict) else {}
    flag = choice.get("disable_parallel_tool_use")
    if flag is not None and not isinstance(flag, bool):
        raise bad("tool_choice.disable_parallel_tool_use", f"must be a boolean, not {_kind(flag)}")
    return not flag


def _prompt(served, body, guard: RequestGuard, plan, images, extra: list[dict] | None = None) -> tuple[str, list[int]]:
    """extra: OpenAI-shaped messages after the conversation (a tool guard re-prompt); the
    conversation compacted first with hearth.compaction."""
    conversation = guard.history + (openai_messages(extra) if extra else [])
    max_tokens = getattr(body, "max_tokens", None)
    return guard.fit(lambda msgs: _render(served, body, plan, msgs, images), conversation, served.max_model_len,
                     max_tokens, served.model_context)


def _reprompt(served, body, guard: RequestGuard, plan, images, extra: list[dict]) -> list[int]:
    text, ids = _prompt(served, body, guard, plan, images, extra)
    return reprompt_ids(served, text, body.max_tokens, ids)


def _render(served, body, plan, conversation: list[dict], images=None) -> tuple[str, list[int]]:
    messages = prompt_messages(served, plan, conversation)
    kwargs = {}
    thinking = getattr(body, "thinking", None)
    if thinking is not None:
        kwargs["enable_thinking"] = thinking.type != "disabled"
    prefill = messages[-1]["role"] == "assistant"  # Anthropic continues a final assistant turn
    text = served.render_chat(messages, plan.tools if plan.in_template else None,
                              add_generation_prompt=not prefill, continue_final=prefill, template_kwargs=kwargs)
    return text, served.encode_chat_text(text, images, conversation)


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request):
    reading, offered, parallel = _read(request.app.state.models, body), anthropic_tools(body.tools), _parallel(body)
    forces_call(offered, body.tool_choice)  # a bad tool_choice's 400 before the load too
    served = await request.app.state.models.get(body.model)
    history, images = reading.on(served)
    ext = Extensions(request.app.state.config.tool_guard)  # count_tokens takes no `hearth`
    guard, plan = _guarded(served, body, ext, history, offered, parallel)  # the tools as rendered
    await served.load_images(images)  # each image counts its rows
    _, ids = _prompt(served, body, guard, plan, images)
    return {"input_tokens": len(ids)}


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request):
    _check_thinking(body)
    state = request.app.state
    check_before_load(state.models, body.model, state.limits, {**common_fields(body), "max_tokens": body.max_tokens,
                      "stop": list(body.stop_sequences or [])}, {"stop": "stop_sequences", **body.llama_names()})
    reading, offered, parallel = _read(state.models, body), anthropic_tools(body.tools), _parallel(body)
    ext, fmt = extensions_before_load(state, body.model, body.hearth, offered), _format(body, offered)
    served = await state.models.get(body.model)
    history, images = reading.on(served)
    guard, plan = _guarded(served, body, ext, history, offered, parallel)
    await served.load_images(images)
    text, ids = _prompt(served, body, guard, plan, images)
    fields = {**common_fields(body, served), "max_tokens": body.max_tokens, "stop": list(body.stop_sequences or []),
              "structured_output": fmt or plan.constraint}
    ask = Ask(guard.tools, body.tool_choice, history, structured=fields["structured_output"] is not plan.constraint,
              workflow=guard.ext.workflow is not None, prefill=bool(history) and history[-1]["role"] == "assistant")
    names = {"stop": "stop_sequences", **body.llama_names()}
    req = ChoicesRequest(served, plan, text, ids, fields, names, guard, parallel,
                         lambda extra: _reprompt(served, body, guard, plan, images, extra),
                         streaming=bool(body.stream))
    source, _ = await routed_choices(state, body.model, ask, lambda s, p: _render(s, body, p, history, images), req)
    if body.stream:
        return SSEResponse(message_events(served, source, parallel, served.answer_name(body.model)),
                           on_close=source.abort)
    result = await until_disconnect(request, _message(served, source, parallel, served.answer_name(body.model)))
    return result if result is not None else {}


def _check_thinking(body: MessagesRequest) -> None:
    """Anthropic's rule: the thinking budget is part of max_tokens, so it must be less."""
    budget = body.thinking.budget_tokens if body.thinking is not None else None
    if budget is not None and budget >= body.max_tokens:
        raise APIError(400, f"thinking.budget_tokens: must be less than max_tokens ({body.max_tokens}), got {budget}",
                       param="thinking.budget_tokens")


def _format(body: MessagesRequest, offered: list[dict]) -> StructuredOutput | None:
    """The output format's constraint, compiled: it needs no model, so it is read before the load (a bad schema,
    or a format beside a tool_choice that forces a call of the `offered` tools, names the field it came in)."""
    fmt, field = body.output_config.format if body.output_config else None, "output_config.format"
    if body.output_format is not None:  # the beta's spelling: it was ignored, and the answer ran free
        if fmt is not None:
            raise APIError(400, "output_format: give it or output_config.format (its newer spelling), not both",
                           param="output_format")
        fmt, field = body.output_format, "output_format"
    forced = forces_call(offered, body.tool_choice)  # a bad tool_choice's 400 before the load too
    if fmt is None:
        return None
    so = compiled(StructuredOutput(json_schema=fmt.schema_), f"{field}.schema")
    if forced:
        raise APIError(400, f"{field}: cannot be combined with a tool_choice that forces a call", param=field)
    return so


async def _message(served, source, parallel: bool = True, model: str | None = None) -> dict:
    events, tokens, finish, stop_reason = [], 0, None, None
    async for _, u in source.updates():
        events = settle(events, u)
        tokens += len(u.token_ids)
        if u.finished:
            finish, stop_reason = u.finish_reason, u.stop_reason
    parsed = collect(events)
    calls = parsed.tool_calls if parallel else parsed.tool_calls[:1]
    content: list[dict] = []
    if parsed.reasoning:
        content.append({"type": "thinking", "thinking": parsed.reasoning, "signature": ""})
    if parsed.content:
        content.append({"type": "text", "text": parsed.content})
    # a call whose arguments are not an object (cut by max_tokens) has no `input` to give: it is
    # reported in the `hearth` field, never a tool_use block with an invented {}
    unparsed = [unparsed_tool_use(c) for c in calls if tool_input(c) is None]
    content += [tool_use_block(c) for c in calls if tool_input(c) is not None]
    stop = anthropic_stop(finish, len(unparsed) < len(calls), stop_reason)
    out = {"id": f"msg_{source.request_id}", "type": "message", "role": "assistant", "model": model or served.name,
           "content": content, "stop_reason": stop, "stop_sequence": stop_reason if stop == "stop_sequence" else None,
           "usage": usage(source, tokens)}
    ext = source.report(0)
    if unparsed:
        ext = {**(ext or {}), "unparsed_tool_use": unparsed}
    return out if ext is None else {**out, "hearth": ext}

