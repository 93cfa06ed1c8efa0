"""POST /v1/completions: a prompt (text, token ids, or a batch of either) -> text_completion
bodies or chunks. Choice index = prompt index * n + j, as OpenAI numbers them."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from hearth.api.errors import APIError, error_body, from_hearth_error
from hearth.api.generate import Generation, until_disconnect
from hearth.api.logprobs import completion_logprobs
from hearth.api.openai_protocol import CompletionRequest
from hearth.api.sampling import common_fields, logit_bias, make_params, response_format, stop_list
from hearth.api.sse import DONE, SSEResponse, data_event
from hearth.errors import HearthError

router = APIRouter()


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    state = request.app.state
    served = await state.models.get(body.model)
    texts, prompts = _prompts(served, body.prompt)
    if body.suffix:
        raise APIError(400, "suffix: is not supported", param="suffix")
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of: is not supported (use n)", param="best_of")
    if body.logprobs is not None and not 0 <= body.logprobs <= 20:
        raise APIError(400, f"logprobs: must be in [0, 20], got {body.logprobs}", param="logprobs")
    longest = max(len(ids) for ids in prompts)
    max_tokens = body.max_tokens
    if "max_tokens" not in body.model_fields_set:  # OpenAI's default of 16, not asked for: within the room left
        max_tokens = max(1, min(max_tokens, served.max_model_len - longest))
    params = make_params({
        **common_fields(body), "n": body.n, "max_tokens": max_tokens, "stop": stop_list(body.stop),
        "stop_token_ids": body.stop_token_ids or [], "logit_bias": logit_bias(body.logit_bias, served.vocab_size),
        "logprobs": body.logprobs, "min_tokens": body.min_tokens, "ignore_eos": body.ignore_eos,
        "skip_special_tokens": body.skip_special_tokens, "include_stop_str_in_output": body.include_stop_str_in_output,
        "structured_output": response_format(body.response_format)}, state.limits, served.max_model_len,
        prompt_tokens=longest)
    gen = Generation(served.engine, prompts, params, state.metrics.of(served.name))
    reply = _Reply(served, gen, texts if body.echo else None, body.logprobs)
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return SSEResponse(reply.events(usage, request.url.path), on_close=gen.abort)
    result = await until_disconnect(request, reply.body())
    return result if result is not None else {}


def _prompts(served, prompt) -> tuple[list[str], list[list[int]]]:
    """(texts for echo, token ids) per prompt."""
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise APIError(400, "prompt: must not be empty", param="prompt")
    if isinstance(prompt[0], int):
        prompt = [prompt]
    texts, ids = [], []
    for p in prompt:
        if isinstance(p, str):
            texts.append(p)
            ids.append(served.encode_text(p))
        else:
            texts.append(served.tokenizer.decode(p) if p else "")
            ids.append(list(p))
    return texts, ids


class _Reply:
    def __init__(self, served, gen: Generation, echo: list[str] | None, k: int | None):
        self.served, self.gen, self.echo, self.k = served, gen, echo, k
        self.id = f"cmpl-{gen.request_id}"
        self.created = int(time.time())
        self.completion_tokens = 0

    def usage(self) -> dict:
        p, c = self.gen.num_prompt_tokens, self.completion_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": self.gen.num_cached_tokens}}

    def _payload(self, choices: list) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.served.name, "system_fingerprint": None, "choices": choices}

    def _echo(self, index: int) -> str:
        return self.echo[index // self.gen.n_per_prompt] if self.echo else ""

    def _logprobs(self, token_ids, entries, offset: int = 0):
        if self.k is None:
            return None
        return completion_logprobs(self.served.tokenizer, token_ids, entries, self.k, offset)

    async def body(self) -> dict:
        choices = []
        for c in await self.gen.collect():
            self.completion_tokens += len(c.token_ids)
            prefix = self._echo(c.index)
            choices.append({"index": c.index, "text": prefix + c.text,
                            "logprobs": self._logprobs(c.token_ids, c.logprobs, len(prefix)),
                            "finish_reason": "length" if c.finish_reason == "length" else "stop",
                            "stop_reason": c.stop_reason})
        return {**self._payload(choices), "usage": self.usage()}

    async def events(self, usage: bool, path: str):
        extra = {"usage": None} if usage else {}
        if self.echo:
            for i in range(self.gen.n):
                yield data_event({**self._payload([_choice(i, self._echo(i))]), **extra})
        try:
            async for i, out in self.gen.outputs():
                self.completion_tokens += len(out.new_token_ids)
                finish = ("length" if out.finish_reason == "length" else "stop") if out.finished else None
                choice = _choice(i, out.new_text, self._logprobs(out.new_token_ids, out.new_logprobs or []), finish)
                if finish:
                    choice["stop_reason"] = out.stop_reason
                yield data_event({**self._payload([choice]), **extra})
        except HearthError as e:
            err = from_hearth_error(e, path)
            yield data_event(error_body(path, err.status, err.message, err.param, err.code))
            yield DONE
            return
        if usage:
            yield data_event({**self._payload([]), "usage": self.usage()})
        yield DONE


def _choice(i: int, text: str, logprobs=None, finish: str | None = None) -> dict:
    return {"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish}
