"""llama-server's /completion reply, which /completion and /infill share: `content`, `stop`, `stop_type`
(eos, word, limit), `stopping_word`, `tokens_predicted`, `tokens_evaluated`, `tokens_cached`, `prompt`,
`truncated`, `timings`, `generation_settings` ... Streamed, each chunk is one `data: {...}` delta with
`stop: false`, then a last one with `stop: true` and the totals, and no `[DONE]` (llama-server's
non-OpenAI stream). Also the sampling both routes run: llama-server's options -> SamplingParams, and
n_predict 0 (the prompt into the cache, an empty answer)."""

from __future__ import annotations

import logging
import time

from hearth.api.errors import error_body, from_hearth_error
from hearth.api.guided import guided
from hearth.api.generate import PROMPT_ONLY_TOKENS, Generation, until_disconnect
from hearth.api.infill import Dropped
from hearth.api.infill_stops import EditorStops
from hearth.api.llama_chain import left_out, ran
from hearth.api.llama_names import LLAMA_SAMPLERS, LLAMA_WIRE_NAMES, breakers
from hearth.api.llama_protocol import LlamaOptions
from hearth.api.sampling import check_before_load, logit_bias, lora_scales, make_params
from hearth.api.sse import SSEResponse, data_event
from hearth.errors import HearthError

log = logging.getLogger("hearth.api")


def answer_room(body: LlamaOptions) -> int | None:
    """The tokens the request's answer takes in the context (None: no limit): n_predict, and for n_predict
    0 (llama.vim's ring_update, llama.vscode's prepare: the prompt into the prefix cache, run as a
    prompt-only Generation, as /v1/completions' prompt scoring) the token the engine computes."""
    limit = body.limit()
    return PROMPT_ONLY_TOKENS if limit == 0 else limit


def llama_params(body: LlamaOptions, state, served, prompt_tokens: int):
    """llama-server's sampling options -> SamplingParams, errors named by llama-server's fields (n_predict 0:
    no max_tokens, which the prompt-only Generation sets)."""
    return make_params(_fields(body, served), state.limits, served.max_model_len, LLAMA_WIRE_NAMES,
                       prompt_tokens=prompt_tokens)


def _fields(body: LlamaOptions, served) -> dict:
    """The options as SamplingParams fields; served None (before the load): logit_bias, which reads the model's
    vocabulary, left out (a `lora` list's ids are checked against the adapters the pool knows of)."""
    loaded = served is not None
    return {
        "temperature": body.temperature, "top_k": body.top_k, "top_p": body.top_p, "min_p": body.min_p,
        "typical_p": body.typical_p, "repetition_penalty": body.repeat_penalty,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty, "logit_bias": logit_bias(body.logit_bias, served) if loaded else None,
        **{k: getattr(body, k) for k in LLAMA_SAMPLERS},
        "dry_sequence_breakers": breakers(body.dry_sequence_breakers),
        "seed": None if body.seed < 0 else body.seed,
        "max_tokens": body.limit() or None, "stop": list(body.stop), "ignore_eos": body.ignore_eos,
        "structured_output": guided(body, {}), "lora": lora_scales(body, served),
        **left_out(body.samplers, body.mirostat)}


def with_server_defaults(body: LlamaOptions, defaults: dict) -> LlamaOptions:
    """The body with the server's default sampling (hearth serve --temp ...; SamplingParams names) in place of
    llama-server's (LlamaOptions') for each field it does not give, as llama-server's own flags set its defaults:
    what it samples with and what its generation_settings say."""
    unset = {LLAMA_WIRE_NAMES.get(k, k): v for k, v in defaults.items()}
    unset = {k: v for k, v in unset.items() if k not in body.model_fields_set}
    return body.model_copy(update=unset) if unset else body


def check_options(request, body: LlamaOptions) -> None:
    """What llama_params checks without the model loaded (n_predict against the context, the samplers' ranges),
    before the route loads it (hearth.api.sampling.check_before_load)."""
    state = request.app.state
    body = with_server_defaults(body, state.limits.defaults)
    check_before_load(state.models, body.model, state.limits, _fields(body, None), LLAMA_WIRE_NAMES)


async def respond(request, served, ids: list[int], body: LlamaOptions, dropped: Dropped = Dropped()):
    """Run `ids` with the body's options; the reply whole, or its stream."""
    state = request.app.state
    body = with_server_defaults(body, state.limits.defaults)
    params = llama_params(body, state, served, len(ids))
    if dropped:  # said once the request is valid: a 400 for its options dropped nothing
        log.info("/infill: dropped %s tokens to fit the context (%d)", dropped.as_dict(), served.max_model_len)
    gen = Generation(served.engine, ids, params, state.metrics.of(served.name), prompt_only=body.limit() == 0)
    reply = LlamaReply(served, gen, ids, body, dropped)
    if body.stream:
        return SSEResponse(reply.events(request.url.path), on_close=gen.abort)
    result = await until_disconnect(request, reply.body())
    return result if result is not None else {}


def generation_settings(b: LlamaOptions) -> dict:
    """The options a reply ran with, as llama-server's generation_settings name them (its /props shows
    the defaults': hearth.api.props)."""
    return {"n_predict": b.n_predict_read(), "temperature": b.temperature, "top_k": b.top_k, "top_p": b.top_p,
            "min_p": b.min_p, "typical_p": b.typical_p, "repeat_penalty": b.repeat_penalty,
            "presence_penalty": b.presence_penalty,
            "frequency_penalty": b.frequency_penalty, **{k: getattr(b, k) for k in LLAMA_SAMPLERS},
            "dry_sequence_breakers": breakers(b.dry_sequence_breakers), "seed": b.seed, "stop": list(b.stop),
            "ignore_eos": b.ignore_eos, "stream": b.stream, "samplers": ran(b.samplers)}


class LlamaReply:
    """One answer in llama-server's /completion shape, whole (`body`) or streamed (`events`)."""

    def __init__(self, served, gen: Generation, ids: list[int], body: LlamaOptions, dropped: Dropped = Dropped()):
        """ids: the prompt run; dropped: what /infill left out to fit (/completion drops nothing)."""
        self.served, self.gen, self.ids, self.dropped, self.request = served, gen, ids, dropped, body
        self.tokens: list[int] = []
        self.text = ""
        self.start = time.monotonic()
        self.first: float | None = None
        """When the first token came (the prompt's time ends there)."""
        self.stops = EditorStops(body.n_indent, body.t_max_predict_ms)

    async def _deltas(self):
        """(text to send, its token ids, (finish_reason, stop_reason) once it ends) per engine output; an
        editor stop ends it early, as a limit, and aborts the rest. Text an n_indent cut could still take
        back waits (EditorStops.settled), so the deltas join to the whole reply's content."""
        sent = 0
        async for _, out in self.gen.outputs():
            self.first = self.first or time.monotonic()
            self.tokens += out.new_token_ids
            cut = self.stops.feed(out.new_text, (time.monotonic() - self.first) * 1e3) if self.stops.active else None
            self.text = self.stops.text[:cut] if cut is not None else self.text + out.new_text
            end = ("length", None) if cut is not None else (out.finish_reason, out.stop_reason) if out.finished else None
            if cut is not None:
                self.gen.abort()
            upto = len(self.text) if end is not None or not self.stops.active else self.stops.settled()
            yield self.text[sent:upto], out.new_token_ids, end
            if cut is not None:
                return
            sent = max(sent, upto)

    def _final(self, content: str, finish: str | None, stop_reason, whole: bool) -> dict:
        """llama-server's last /completion object (server_task_result_cmpl_final); a stream's last one
        holds no content or tokens (the deltas did)."""
        word = stop_reason if isinstance(stop_reason, str) else ""
        stop_type = "limit" if finish == "length" else "word" if word else "eos" if finish == "stop" else "none"
        body = {"index": 0, "content": content, "tokens": self.tokens if whole and self.request.return_tokens else [],
                "stop": True, "model": self.served.name, "tokens_predicted": len(self.tokens),
                "tokens_evaluated": len(self.ids), "generation_settings": generation_settings(self.request),
                "prompt": self.served.tokenizer.decode(self.ids), "has_new_line": "\n" in self.text,
                "truncated": bool(self.dropped), "stop_type": stop_type, "stopping_word": word,
                "tokens_cached": self.gen.num_cached_tokens, "timings": self._timings()}
        if self.dropped:
            body["hearth"] = {"dropped_tokens": self.dropped.as_dict()}
        return body

    def _timings(self) -> dict:
        """llama-server's timings: the prompt until the first token, the rest for the predicted ones; with
        speculative decoding the request's drafts verified and accepted."""
        end = time.monotonic()
        first = self.first or end
        prompt_n, predicted_n = len(self.ids) - self.gen.num_cached_tokens, len(self.tokens)
        prompt_ms, predicted_ms = (first - self.start) * 1e3, (end - first) * 1e3
        drafted, accepted = self.gen.drafts
        return {"prompt_n": prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
                "prompt_per_second": prompt_n / prompt_ms * 1e3 if prompt_ms else 0.0,
                "predicted_n": predicted_n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
                "predicted_per_second": predicted_n / predicted_ms * 1e3 if predicted_ms else 0.0,
                # as llama-server: only where this request drafted
                **({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {})}

    async def body(self) -> dict:
        end = (None, None)
        async for _, _, ended in self._deltas():
            end = ended or end
        return self._final(self.text, *end, whole=True)

    async def events(self, path: str):
        try:
            async for text, ids, ended in self._deltas():
                if text or ids:
                    yield data_event({"index": 0, "content": text,
                                      "tokens": ids if self.request.return_tokens else [],
                                      "stop": False, "tokens_predicted": len(self.tokens),
                                      "tokens_evaluated": len(self.ids)})
                if ended:
                    yield data_event(self._final("", *ended, whole=False))
        except HearthError as e:
            err = from_hearth_error(e, path)
            yield data_event(error_body(path, err.status, err.message, err.param, err.code))
