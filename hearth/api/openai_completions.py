"""POST /v1/completions: a prompt (text, token ids, or a batch of either) -> text_completion
bodies or chunks. Choice index = prompt index * n + j, as OpenAI numbers them. With echo and
logprobs, the logprobs hold the prompt's tokens first (the first one's null), as OpenAI's legacy
API and vLLM return them; text_offset then counts from the first prompt token's text. max_tokens 0 with
echo scores the prompt: the reply holds the echo (and its logprobs), no generated token. vLLM's
`prompt_logprobs: N` puts each choice's prompt's logprobs, ranks and top N in its `prompt_logprobs`
(whole replies only, as vLLM: hearth.api.openai_protocol).

`suffix` (OpenAI's insert mode, vLLM's FIM) on a model with fill-in-the-middle tokens makes each prompt
the prefix of hearth.api.infill's layout, the one /infill builds; nothing is dropped to fit (a prompt too
long is a 400, as any). A model without them answers 400 naming `suffix`, as vLLM does."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from hearth.api.errors import APIError, error_body, from_hearth_error
from hearth.api.generate import Generation, until_disconnect
from hearth.api.guided import compiled, guided
from hearth.api.infill import has_fim, suffix_fim, suffix_prompt
from hearth.api.logprobs import completion_logprobs, prompt_logprobs
from hearth.api.openai_protocol import CompletionRequest, stream_usage
from hearth.api.sampling import check_logprobs, common_fields, logit_bias, make_params, response_format, stop_list
from hearth.api.sampling import asked_prompt_logprobs, check_before_load, prompt_token_ids, token_ids
from hearth.api.sse import DONE, SSEResponse, data_event
from hearth.errors import HearthError
from hearth.loader.tokenizer import lone_surrogate

router = APIRouter()


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request):
    state = request.app.state
    if body.suffix is not None and body.echo:  # the echo would be the prefix alone, not the prompt run
        raise APIError(400, "echo: is not supported with suffix", param="echo")
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of: is not supported (use n)", param="best_of")
    # prompt scoring (lm-eval's loglikelihood: echo, max_tokens 0, logprobs N), as vLLM answers it: the
    # echoed prompt and its logprobs alone (Generation's prompt_only)
    scoring = body.echo and body.max_tokens == 0
    if scoring and body.min_tokens:  # named with the client's 0, not the token computed
        raise APIError(400, f"min_tokens: must be at most max_tokens (0), got {body.min_tokens}", param="min_tokens")
    # OpenAI's default 16 is fitted to the prompt below; scoring's 0 limits no answer
    limit = body.max_tokens if "max_tokens" in body.model_fields_set and not scoring else None
    check_before_load(state.models, body.model, state.limits, {**common_fields(body), "n": body.n, "max_tokens": limit,
                      "stop": stop_list(body.stop)}, body.llama_names())
    # the constraint needs no model either: compiled before it loads
    constraint = guided(body, {"response_format": compiled(response_format(body.response_format),
                                                           "response_format.json_schema.schema")})
    served = await state.models.get(body.model)
    texts, prompts = _prompts(served, body.prompt, body.suffix)
    k = check_logprobs("logprobs", body.logprobs, served)
    longest = max(len(ids) for ids in prompts)
    max_tokens = None if scoring else body.max_tokens  # scoring: Generation's prompt_only sets it
    asked = asked_prompt_logprobs(body, served)
    echo_k = k if body.echo else None  # the echo's logprobs are the prompt's too
    engine_k = max((k for k in (asked, echo_k) if k is not None), default=None)
    if "max_tokens" not in body.model_fields_set:  # OpenAI's default of 16, not asked for: within the room
        cap = state.limits.max_tokens or max_tokens  # left and the server's --max-tokens-limit
        max_tokens = max(1, min(max_tokens, cap, served.max_model_len - longest))
    params = make_params({
        **common_fields(body, served), "n": body.n, "max_tokens": max_tokens, "stop": stop_list(body.stop),
        "stop_token_ids": token_ids("stop_token_ids", body.stop_token_ids, served.vocab_size),
        "logit_bias": logit_bias(body.logit_bias, served), "bad_words": body.bad_words,
        "logprobs": k, "prompt_logprobs": engine_k,
        "min_tokens": body.min_tokens, "ignore_eos": body.ignore_eos,
        "skip_special_tokens": body.skip_special_tokens, "include_stop_str_in_output": body.include_stop_str_in_output,
        "structured_output": constraint},
        state.limits, served.max_model_len, body.llama_names(), prompt_tokens=longest)
    gen = Generation(served.engine, prompts, params, state.metrics.of(served.name), prompt_only=scoring)
    reply = _Reply(served, gen, (texts, prompts) if body.echo else None, k, (prompts, asked), served.answer_name(body.model))
    if body.stream:
        usage, reply.continuous = stream_usage(body.stream_options)
        return SSEResponse(reply.events(usage, request.url.path), on_close=gen.abort)
    result = await until_disconnect(request, reply.body())
    return result if result is not None else {}


def _prompts(served, prompt, suffix: str | None = None) -> tuple[list[str], list[list[int]]]:
    """(texts for echo, token ids) per prompt; with a suffix, each prompt is the prefix of a FIM prompt."""
    if suffix == "" and not has_fim(served.tokenizer):  # OpenAI's "no suffix", which clients may send as ""
        suffix = None
    fim = suffix_fim(served) if suffix is not None else None
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise APIError(400, "prompt: must not be empty", param="prompt")
    if isinstance(prompt[0], int):
        prompt = [prompt]
    texts, ids = [], []
    for p in prompt:
        where = "prompt" if len(prompt) == 1 else f"prompt[{len(ids)}]"
        if isinstance(p, str):
            if why := lone_surrogate(p):  # the tokenizer's refusal named no field
                raise APIError(400, f"{where}: {why}", param="prompt")
            texts.append(p)
            # with a suffix the prompt is code before it: plain text (as /infill reads it), the layout adds the BOS
            ids.append(served.encode_text(p) if fim is None else
                       served.encode_text(p, add_special_tokens=False, parse_special=False))
            if not ids[-1] and fim is None:  # "" without a BOS: the engine's "prompt is empty" named no field
                raise APIError(400, f"{where}: must not be empty", param="prompt")
        else:  # token ids: checked here, where the error can name the field (decode failed on them)
            ids.append(prompt_token_ids(p, served.vocab_size, where))
            texts.append(served.tokenizer.decode(p))
    if fim is not None:
        ids = [suffix_prompt(served, fim, before, suffix) for before in ids]
    return texts, ids


class _Reply:
    def __init__(self, served, gen: Generation, echo: tuple[list[str], list[list[int]]] | None, k: int | None,
                 asked: tuple[list[list[int]], int | None] = ([], None), model: str | None = None):
        """echo: the prompts' (texts, token ids); asked: the prompts' ids and vLLM's prompt_logprobs as
        asked (None: not asked); model: the name the response gives (None: the served id)."""
        self.served, self.gen, self.k = served, gen, k
        self.model = model or served.name
        self.echo, self.echo_ids = echo or (None, None)
        self.id = f"cmpl-{gen.request_id}"
        self.created = int(time.time())
        self.completion_tokens = 0
        self.offsets: dict[int, int] = {}
        """Streaming: choice -> the text_offset of its next token."""
        self.prompts, self.prompt_k = asked
        self.continuous = False
        """stream_options.continuous_usage_stats (with include_usage): every chunk carries the usage so far."""

    def usage(self) -> dict:
        p, c = self.gen.num_prompt_tokens, self.completion_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                "prompt_tokens_details": {"cached_tokens": self.gen.num_cached_tokens}}

    def _payload(self, choices: list) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created,
                "model": self.model, "system_fingerprint": None, "choices": choices}

    def _echo(self, index: int) -> str:
        return self.echo[index // self.gen.n_per_prompt] if self.echo else ""

    def _logprobs(self, index: int, token_ids, entries, offset: int = 0, prompt=None):
        """prompt: the choice's prompt logprobs (echo): its prompt's tokens go first, from offset 0."""
        if self.k is None:
            return None
        if prompt is not None:
            token_ids, entries, offset = self.echo_ids[index // self.gen.n_per_prompt] + token_ids, prompt + entries, 0
        return completion_logprobs(self.served.tokenizer, token_ids, entries, self.k, offset)

    async def body(self) -> dict:
        choices = []
        for c in await self.gen.collect():
            self.completion_tokens += len(c.token_ids)
            prefix = self._echo(c.index)
            choice = {"index": c.index, "text": prefix + c.text,
                      "logprobs": self._logprobs(c.index, c.token_ids, c.logprobs, len(prefix),
                                                 c.prompt_logprobs if self.echo else None),
                      "finish_reason": "length" if c.finish_reason == "length" else "stop",
                      "stop_reason": c.stop_reason}
            if self.prompt_k is not None:
                choice["prompt_logprobs"] = prompt_logprobs(
                    self.served.tokenizer, self.prompts[c.index // self.gen.n_per_prompt], c.prompt_logprobs,
                    c.prompt_ranks, self.prompt_k)
            choices.append(choice)
        return {**self._payload(choices), "usage": self.usage()}

    def _usage_so_far(self, usage: bool) -> dict:
        """A chunk's usage field: the counts so far (continuous_usage_stats), null (include_usage), or none."""
        return {"usage": self.usage() if self.continuous else None} if usage else {}

    async def events(self, usage: bool, path: str):
        if self.echo and self.k is None:  # else with the prompt's logprobs, in the choice's first chunk
            for i in range(self.gen.n):
                yield data_event({**self._payload([_choice(i, self._echo(i))]), **self._usage_so_far(usage)})
        try:
            async for i, out in self.gen.outputs():
                ids, text, entries = out.new_token_ids, out.new_text, out.new_logprobs or []
                self.completion_tokens += len(ids)
                finish = ("length" if out.finish_reason == "length" else "stop") if out.finished else None
                echoed = self.echo is not None and out.prompt_logprobs is not None
                start = self.offsets.get(i, len(self._echo(i)))
                lp = self._logprobs(i, ids, entries, start, out.prompt_logprobs if echoed else None)
                if lp and lp["tokens"]:
                    self.offsets[i] = lp["text_offset"][-1] + len(lp["tokens"][-1])
                choice = _choice(i, self._echo(i) + text if echoed else text, lp, finish)
                if finish:
                    choice["stop_reason"] = out.stop_reason
                yield data_event({**self._payload([choice]), **self._usage_so_far(usage)})
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
