"""POST /v1/responses, GET and DELETE /v1/responses/{id}, GET .../{id}/input_items and POST
.../{id}/cancel: the OpenAI Responses API over the chat path (template, tools, grammar, output
parser), answered whole or as typed stream events, or in the background (hearth.api.responses_background).

A follow-up (`previous_response_id`) renders the stored conversation plus its new input; when that
text starts with the previous prompt and output as generated, its ids are the stored ids plus the
new part's, so the prefix cache serves everything but the new tokens."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import replace

from fastapi import APIRouter, Request

from hearth.api.choices import settle
from hearth.api.errors import APIError, from_hearth_error
from hearth.api.generate import until_disconnect
from hearth.api.guard_extras import RequestGuard, answer_room
from hearth.api.guided import compiled
from hearth.api.logprobs import chat_logprobs
from hearth.api.media_parts import RequestImages
from hearth.api.read_before_load import read_before_load
from hearth.api.reasoning_tokens import reasoning_tokens
from hearth.api.responses_background import Run
from hearth.api.messages import openai_messages
from hearth.api.responses_items import (as_items, chat_tool_choice, chat_tools, input_messages, text_format,
                                        with_instructions)
from hearth.api.responses_options import MessageLogprobs, truncate_oldest, wants_logprobs
from hearth.api.responses_output import OutputBuilder, assistant_messages
from hearth.api.responses_protocol import ResponsesRequest
from hearth.api.responses_store import StoredResponse, items_page
from hearth.api.sampling import check_before_load, check_logprobs, common_fields
from hearth.api.sse import SSEResponse, named_event
from hearth.api.tool_layer import ChoicesRequest, reprompt_ids
from hearth.api.tool_router import extensions_before_load, routed_choices
from hearth.api.tools import forces_call, openai_tools, plan_tools, prompt_messages
from hearth.api.typed_options import effort_kwargs
from hearth.errors import HearthError
from hearth.tool_guard.routing import Ask

router = APIRouter()


@router.post("/v1/responses")
async def create_response(body: ResponsesRequest, request: Request):
    state = request.app.state
    store = state.responses
    prev = None
    if body.conversation is not None:
        raise APIError(400, "conversation: hearth keeps no conversations (/v1/conversations); chain turns with "
                       "previous_response_id, or send the history in input", param="conversation")
    if body.previous_response_id is not None:
        prev = store.get(body.previous_response_id)
        if prev is None:
            raise APIError(400, f"previous_response_id: no stored response {body.previous_response_id!r} "
                           "(never stored, deleted, or expired)", param="previous_response_id")
        if prev.run is not None and prev.run.active:
            raise APIError(400, f"previous_response_id: response {body.previous_response_id!r} is still "
                           f"{prev.run.status} (background): poll it until it ends", param="previous_response_id")
    if body.background and not body.store:
        raise APIError(400, "background: a background response must be stored (store=true), as it is polled "
                       "by its id", param="background")
    # no `model` (OpenAI requires one; hearth takes it missing): a follow-up stays on its conversation's model
    model = body.model or (prev.body.get("model") if prev else None)
    check_before_load(state.models, model, state.limits, {**common_fields(body), "max_tokens": body.max_output_tokens},
                      {"max_tokens": "max_output_tokens", **body.llama_names()})
    reading = read_before_load(state.models, model, lambda images: _conversation(body, prev, images),
                               lambda vision: prev.images.continued(vision) if prev and prev.images
                               else RequestImages(vision))
    choice = chat_tool_choice(body.tool_choice)  # the tools and format need no model either: read before it loads
    offered = openai_tools(chat_tools(body.tools), fn_at="")  # Responses' shape: name, parameters at the top
    fmt = compiled(text_format(body.text), "text.format.schema")
    if forces_call(offered, choice) and fmt is not None:
        raise APIError(400, "text.format: cannot be combined with a tool_choice that forces a call",
                       param="text.format")
    ext = extensions_before_load(state, model, body.hearth, offered)
    served = await state.models.get(model)
    conversation, images = reading.on(served)
    await served.load_images(images)
    items = (prev.input_items + prev.body.get("output", []) if prev else []) + as_items(body.input)
    guard = RequestGuard(ext, offered, conversation, choice)
    plan = plan_tools(served, guard.tools, choice)
    guard.prompt_hint(plan, body.parallel_tool_calls)

    k = check_logprobs("top_logprobs", body.top_logprobs, served)
    logprobs = (k or 0) if wants_logprobs(body.include) else None  # top_logprobs alone: none, as OpenAI's

    effort = effort_kwargs(body.reasoning.effort if body.reasoning else None)

    def render_whole(msgs: list[dict]) -> tuple[str, list[int]]:
        text = served.render_chat(prompt_messages(served, plan, with_instructions(body.instructions, msgs)),
                                  plan.tools if plan.in_template else None, template_kwargs=effort)
        return text, _prompt_ids(served, text, prev, images, msgs)

    def render(msgs: list[dict]) -> tuple[str, list[int]]:
        if body.truncation == "auto":  # room for the answer as a compaction leaves it
            limit = served.max_model_len - answer_room(body.max_output_tokens, served.max_model_len)
            msgs = truncate_oldest(lambda m: len(render_whole(m)[1]), msgs, limit)
        return render_whole(msgs)

    prompt, ids = guard.fit(render, conversation, served.max_model_len, body.max_output_tokens,
                           served.model_context)
    fields = {**common_fields(body, served), "max_tokens": body.max_output_tokens, "structured_output": plan.constraint or fmt,
              "logprobs": logprobs}

    def reprompt(extra: list[dict]) -> list[int]:
        text, ids = guard.fit(render, conversation + openai_messages(extra), served.max_model_len,
                              body.max_output_tokens, served.model_context)
        return reprompt_ids(served, text, body.max_output_tokens, ids)

    ask = Ask(guard.tools, choice, conversation, token_level=logprobs is not None, structured=fmt is not None,
              workflow=guard.ext.workflow is not None)

    def render_for(model, model_plan) -> tuple[str, list[int]]:
        msgs = with_instructions(body.instructions, conversation)
        text = model.render_chat(prompt_messages(model, model_plan, msgs),
                                 model_plan.tools if model_plan.in_template else None, template_kwargs=effort)
        return text, model.encode_chat_text(text, images, msgs)

    names = {"max_tokens": "max_output_tokens", "logprobs": "top_logprobs", **body.llama_names()}
    req = ChoicesRequest(served, plan, prompt, ids, fields, names, guard,
                         body.parallel_tool_calls, reprompt, request_id=f"resp_{_hex()}", streaming=bool(body.stream))
    source, _ = await routed_choices(state, model, ask, render_for, req)
    # what bounds the answer, as the response echoes it: the asked value (as OpenAI echoes it), else the
    # server's --max-tokens-limit that make_params applied, else null (the context's room bounds it)
    limit = body.max_output_tokens if body.max_output_tokens is not None else state.limits.max_tokens or None
    reply = _Reply(served, store, body, source, conversation, prompt, ids, items, logprobs, limit, images)
    if body.background:
        run = Run(reply, bool(body.stream), state.background)
        store.put(reply.id, StoredResponse(run.body(), conversation, None, [], input_items=items, run=run))
        return SSEResponse(run.follow()) if body.stream else run.body()  # a dropped stream leaves it running
    if body.stream:
        return SSEResponse(reply.events(), on_close=source.abort)
    result = await until_disconnect(request, reply.whole())
    return result if result is not None else {}


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request, stream: str = "false", starting_after: str = "-1"):
    """A background run's response as it stands; with stream=true its stream's events after starting_after
    (a streamed background response only: no other keeps its events)."""
    record = request.app.state.responses.get(response_id)
    if record is None:
        raise _not_found(response_id)
    if stream.lower() not in ("true", "1"):
        return record.run.body() if record.run and record.run.active else record.body
    if record.run is None or not record.run.streamed:
        raise APIError(400, f"stream: only a response created with background=true and stream=true can be "
                       f"streamed again, and {response_id!r} was not", param="stream")
    if not re.fullmatch(r"-1|[0-9]+", starting_after):
        raise APIError(400, f"starting_after: must be a sequence number (a whole number), not {starting_after!r}",
                       param="starting_after")
    return SSEResponse(record.run.follow(int(starting_after)))


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request):
    record = request.app.state.responses.get(response_id)
    if record is not None and record.run is not None:
        await record.run.cancel()  # nothing left to poll it by
    if not request.app.state.responses.delete(response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request, after: str | None = None, limit: str = "20",
                           order: str = "desc"):
    """OpenAI's list input items: the context the response answered, newest first unless order=asc."""
    record = request.app.state.responses.get(response_id)
    if record is None:
        raise _not_found(response_id)
    if not limit.isdigit() or not 1 <= int(limit) <= 100:
        raise APIError(400, f"limit: must be a whole number from 1 to 100, not {limit!r}", param="limit")
    if order not in ("asc", "desc"):
        raise APIError(400, f"order: must be 'asc' or 'desc', not {order!r}", param="order")
    try:
        return items_page(record.input_items, after, int(limit), order)
    except ValueError:
        raise APIError(400, f"after: no input item {after!r} in response {response_id!r}", param="after") from None


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request):
    """As OpenAI: only a response created with background=true; one that has ended is answered as it stands."""
    record = request.app.state.responses.get(response_id)
    if record is None:
        raise _not_found(response_id)
    if record.run is None:
        raise APIError(400, f"cannot cancel a synchronous response: only a response created with background=true "
                       f"can be cancelled, and {response_id!r} was not", param="response_id")
    return await record.run.cancel()


def _not_found(response_id: str) -> APIError:
    return APIError(404, f"no stored response {response_id!r} (never stored, deleted, or expired)",
                    param="response_id", code="not_found")


def _conversation(body: ResponsesRequest, prev: StoredResponse | None, images: RequestImages) -> list[dict]:
    """The stored conversation a follow-up continues, then `input`'s messages (their images added to `images`)."""
    before = prev.messages if prev else []
    conversation = before + input_messages(body.input, before, images)
    if not conversation:  # `[]` or "" read "is required", as if none had been sent
        why = "is required" if body.input is None else "is empty: it must hold a message"
        raise APIError(400, f"input: {why} (a string or a list of items)", param="input")
    return conversation


def _hex() -> str:
    return uuid.uuid4().hex


def _prompt_ids(served, prompt: str, prev: StoredResponse | None, images=None, msgs: list[dict] = ()) -> list[int]:
    """The previous prompt + output ids + the new part's, when the render continues them; else
    the whole prompt encoded (the prefix cache still serves what matches). Another model's ids
    are never reused: its tokenizer may spell the same text otherwise; nor those of an output the
    tool guard retried (text None: they continue no single prompt); nor a conversation with images
    (its rows are placed anew; the prefix cache keys them by content)."""
    same_model = prev is not None and prev.body.get("model") == served.name
    if (same_model and not images and prev.text is not None and prompt.startswith(prev.text)
            and len(prompt) > len(prev.text)):
        rest = served.tokenizer.encode(prompt[len(prev.text):], add_special_tokens=False, parse_special=True)
        return prev.token_ids + rest
    return served.encode_chat_text(prompt, images, msgs)


class _Reply:
    def __init__(self, served, store, body: ResponsesRequest, gen, conversation: list[dict], prompt: str,
                 ids: list[int], items: list[dict], top_logprobs: int | None = None,
                 max_output_tokens: int | None = None, images=None):
        """gen: the response's choices (hearth.api.choices / hearth.api.guarded): parsed updates;
        items: its input items (StoredResponse.input_items); top_logprobs: None unless include asks
        for output_text logprobs; max_output_tokens: the effective limit, echoed."""
        self.max_output_tokens = max_output_tokens
        self.images = images
        self.run: Run | None = None  # set by a background run
        self.error: HearthError | None = None  # what ended it early, if anything did
        self.ended: dict | None = None  # the response once stored
        self.k, self.logprobs = top_logprobs, MessageLogprobs()
        self.served, self.store, self.body, self.gen = served, store, body, gen
        self.conversation, self.prompt, self.ids, self.items = conversation, prompt, ids, items
        self.id = gen.request_id
        self.created = int(time.time())
        self.builder = OutputBuilder()
        self.output_ids: list[int] = []
        self.finish_reason: str | None = None
        self.seq = 0

    @property
    def status(self) -> str:
        """completed or incomplete, once the answer has ended."""
        return self.builder.status

    def response(self, status: str) -> dict:
        b = self.body
        text = b.text.model_dump(by_alias=True, exclude_none=True) if b.text else {}
        text["format"] = text.get("format") or {"type": "text"}
        r = b.reasoning
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        running = status in ("queued", "in_progress")
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "background": bool(b.background), "error": self._error() if status == "failed" else None,
                "incomplete_details": incomplete, "instructions": b.instructions,
                "max_output_tokens": self.max_output_tokens, "model": self.served.answer_name(self.body.model),
                "output": self.builder.items if not running else [],
                "parallel_tool_calls": b.parallel_tool_calls, "previous_response_id": b.previous_response_id,
                "reasoning": {"effort": r.effort if r else None, "summary": (r.summary or r.generate_summary) if r else None},
                "store": b.store, "temperature": b.temperature, "top_p": b.top_p, "text": text,
                "tool_choice": b.tool_choice if b.tool_choice is not None else "auto", "tools": b.tools or [],
                "truncation": b.truncation, "user": b.user, "metadata": b.metadata or {},
                "usage": self.usage() if not running else None}

    def _error(self) -> dict:
        err = from_hearth_error(self.error, "/v1/responses")
        return {"code": err.code or "server_error", "message": err.message}

    def usage(self) -> dict:
        p, c = self.gen.num_prompt_tokens, len(self.output_ids)
        reasoning = reasoning_tokens(self.served, [i["content"][0]["text"] for i in self.builder.items
                                                   if i["type"] == "reasoning"], c)
        return {"input_tokens": p, "input_tokens_details": {"cached_tokens": self.gen.num_cached_tokens,
                                                            "cache_write_tokens": 0},
                "output_tokens": c, "output_tokens_details": {"reasoning_tokens": reasoning},
                "total_tokens": p + c}

    def _on_output(self, out, logprobs: list[dict] | None = None) -> list[dict]:
        """logprobs: the message text's in this update (None: taken from it, as a stream goes)."""
        self.output_ids += out.token_ids
        events = out.events
        if out.finished:
            self.finish_reason = out.finish_reason
            if out.finish_reason == "length":
                self.builder.status = "incomplete"
        if logprobs is None:
            logprobs = self._message_logprobs(out)
        return self.builder.feed(events, logprobs) + (self.builder.close() if out.finished else [])

    def _message_logprobs(self, out) -> list[dict]:
        if self.k is None or not out.logprobs:
            return []
        return self.logprobs.take(out.events, chat_logprobs(self.served.tokenizer, out.token_ids, out.logprobs, self.k))

    def _finish(self) -> dict:
        status = self.builder.status
        body = self.response(status)
        ext = self.gen.report(0)
        if ext is not None:
            body["hearth"] = ext
        if self.body.store:
            messages = self.conversation + assistant_messages(self.builder.items)
            # retried, or answered by a router's small model: the output ids continue no single prompt of this model
            retried = bool(ext and (ext.get("retries") or (ext.get("router") or {}).get("decision") == "accepted"))
            text = None if retried else self.prompt + self.served.tokenizer.decode(self.output_ids)
            ids = [] if retried else list(self.ids + self.output_ids)  # plain ids: no image's pixels kept
            images = self.images.continued(self.images.vision) if self.images else None  # bytes only
            self.store.put(self.id, StoredResponse(body, messages, text, ids, input_items=self.items, images=images,
                                                   run=self.run))
        self.ended = body
        return body

    def store_unfinished(self, status: str) -> None:
        """A response that failed (streamed, or a background run) or was cancelled: what it had said by then,
        for GET and follow-ups."""
        messages = self.conversation + assistant_messages(self.builder.items)
        images = self.images.continued(self.images.vision) if self.images else None  # a follow-up shows them again
        self.ended = self.response(status)
        self.store.put(self.id, StoredResponse(self.ended, messages, None, [], input_items=self.items, images=images,
                                               run=self.run))

    async def whole(self) -> dict:
        events, tokens, logprobs, last = [], [], [], None
        async for _, out in self.gen.updates():
            events, last = settle(events, out), out
            tokens += out.token_ids
            logprobs += self._message_logprobs(out)
        if last is not None:  # one update of the whole answer (settle: its text as a whole answer reads)
            self._on_output(replace(last, events=events, token_ids=tokens), logprobs)
        return self._finish()

    def _event(self, payload: dict) -> str:
        payload = {"type": payload["type"], "sequence_number": self.seq, **payload}
        self.seq += 1
        return named_event(payload["type"], payload)

    async def events(self, first: str = "in_progress"):
        """first: the status response.created says (a background run's: queued)."""
        yield self._event({"type": "response.created", "response": self.response(first)})
        yield self._event({"type": "response.in_progress", "response": self.response("in_progress")})
        try:
            async for _, out in self.gen.updates():
                for e in self._on_output(out):
                    yield self._event(e)
        except HearthError as e:
            self.error = e
            err = from_hearth_error(e, "/v1/responses")
            yield self._event({"type": "error", "code": err.code or "server_error", "message": err.message,
                               "param": err.param})
            if self.body.store and self.run is None:  # kept failed, as OpenAI keeps it (a run stores its own)
                self.store_unfinished("failed")
            # a stream ends with a lifecycle event (completed, incomplete or failed): clients that wait for
            # one (Codex) read a stream without it as a dropped connection and retry
            yield self._event({"type": "response.failed", "response": self.ended or self.response("failed")})
            return
        body = self._finish()
        kind = "response.completed" if body["status"] == "completed" else "response.incomplete"
        yield self._event({"type": kind, "response": body})
