"""POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API).

Output channels become content blocks: reasoning a `thinking` block, text a `text` block, each
tool call a `tool_use` block. `usage.input_tokens` counts the prompt tokens not read from the
prefix cache; those are `cache_read_input_tokens`, as Anthropic counts them."""

from __future__ import annotations

import json
from dataclasses import replace

from fastapi import APIRouter, Request

from hearth.api.anthropic_messages import anthropic_messages
from hearth.api.anthropic_protocol import CountTokensRequest, MessagesRequest
from hearth.api.anthropic_stream import message_events, replay_message, tool_use_block, usage
from hearth.api.errors import APIError
from hearth.api.generate import Generation, until_disconnect
from hearth.api.guard_extras import RequestGuard, reviewed
from hearth.api.parsing import anthropic_stop, output_parser
from hearth.api.sampling import common_fields, make_params
from hearth.api.sse import SSEResponse
from hearth.api.tools import anthropic_tools, plan_tools, prompt_messages
from hearth.sampling_params import StructuredOutput
from hearth.tool_guard.guard_event import attach
from hearth.tool_parsers import ToolCall

router = APIRouter()


def _renderer(served, body, plan):
    """Template messages -> (prompt text, ids) with the request's tools and thinking switch."""
    kwargs = {}
    thinking = getattr(body, "thinking", None)
    if thinking is not None:
        kwargs["enable_thinking"] = thinking.type != "disabled"

    def render(history: list[dict]) -> tuple[str, list[int]]:
        messages = prompt_messages(served, plan, history)
        prefill = messages[-1]["role"] == "assistant"  # Anthropic continues a final assistant turn
        text = served.render_chat(messages, plan.tools if plan.in_template else None,
                                  add_generation_prompt=not prefill, continue_final=prefill, template_kwargs=kwargs)
        return text, served.encode_chat_text(text)
    return render


@router.post("/v1/messages/count_tokens")
async def count_tokens(body: CountTokensRequest, request: Request):
    served = request.app.state.served
    served.check_model(body.model)
    history = anthropic_messages(body.messages, body.system)
    guard = RequestGuard(None, anthropic_tools(body.tools), history, body.tool_choice)  # the tools a request renders
    _, ids = _renderer(served, body, plan_tools(served, guard.tools, body.tool_choice))(history)
    return {"input_tokens": len(ids)}


@router.post("/v1/messages")
async def messages(body: MessagesRequest, request: Request):
    state = request.app.state
    served = state.served
    served.check_model(body.model)
    history = anthropic_messages(body.messages, body.system)
    guard = RequestGuard(body.hearth, anthropic_tools(body.tools), history, body.tool_choice)  # tool_guard extras
    plan = plan_tools(served, guard.tools, body.tool_choice)
    guard.constrained(plan.constraint)
    fields = {**common_fields(body), "max_tokens": body.max_tokens, "stop": list(body.stop_sequences or []),
              "structured_output": _constraint(body, plan)}
    params = make_params(fields, state.limits, served.max_model_len, {"stop": "stop_sequences"})
    render = _renderer(served, body, plan)

    def start(msgs: list[dict], grammar=None):
        text, ids = guard.fit(render, msgs, served.max_model_len, params.max_tokens)
        gen = Generation(served.engine, ids, replace(params, structured_output=grammar) if grammar else params,
                         state.metrics)
        return gen, guard.parser(output_parser(served, plan, text), plan.tools)

    if guard.reviews:  # hearth.workflow or a forced call: reviewed whole, nudged within the request
        result = await until_disconnect(request, _reviewed(served, guard, start, plan.parse_format))
        if result is None or not body.stream:
            return result if result is not None else {}
        return SSEResponse(replay_message(result))
    gen, parser = start(history)
    if body.stream:
        return SSEResponse(message_events(served, gen, parser, guard.log), on_close=gen.abort)
    result = await until_disconnect(request, _message(served, gen, parser))
    return attach(result, guard.log) if result is not None else {}


async def _reviewed(served, guard: RequestGuard, start, fmt: str | None) -> dict:
    """The answer after the review loop (hearth.api.guard_extras.reviewed); usage counts every attempt."""
    async def attempt(msgs: list[dict], grammar):
        message = await _message(served, *start(msgs, grammar))
        blocks = message["content"]
        calls = [ToolCall(b["id"], b["name"], json.dumps(b["input"])) for b in blocks if b["type"] == "tool_use"]
        return message, "".join(b["text"] for b in blocks if b["type"] == "text"), calls
    bodies = await reviewed(guard, attempt, fmt)
    final = bodies[-1]
    for key in ("input_tokens", "output_tokens"):
        final["usage"][key] = sum(b["usage"][key] for b in bodies)
    return attach(final, guard.log)


def _constraint(body: MessagesRequest, plan) -> StructuredOutput | None:
    fmt = body.output_config.format if body.output_config else None
    if fmt is None:
        return plan.constraint
    if plan.constraint is not None:
        raise APIError(400, "output_config.format: cannot be combined with a tool_choice that forces a call",
                       param="output_config.format")
    return StructuredOutput(json_schema=fmt.schema_)


async def _message(served, gen: Generation, parser) -> dict:
    (choice,) = await gen.collect()
    parsed = parser.parse(choice.text)
    content: list[dict] = []
    if parsed.reasoning:
        content.append({"type": "thinking", "thinking": parsed.reasoning, "signature": ""})
    if parsed.content:
        content.append({"type": "text", "text": parsed.content})
    for call in parsed.tool_calls:
        content.append(tool_use_block(call))
    stop = anthropic_stop(choice.finish_reason, bool(parsed.tool_calls), choice.stop_reason)
    return {"id": f"msg_{gen.request_id}", "type": "message", "role": "assistant", "model": served.name,
            "content": content, "stop_reason": stop,
            "stop_sequence": choice.stop_reason if stop == "stop_sequence" else None,
            "usage": usage(gen, len(choice.token_ids))}

