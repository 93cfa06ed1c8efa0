"""GET /slots: llama-server's slot monitor (tools/server/README.md), from the engine's running requests.

hearth has no fixed slots: its scheduler runs up to --max-num-seqs requests (/props' total_slots), so this
lists that many entries, the running requests first in the scheduler's order (slot i is "the i-th running
request" now, not a place a request keeps), the rest idle. Each has llama-server's `id`, `n_ctx`,
`speculative`, `is_processing`; a running one also `id_task` (hearth's request id, a string: the response's
`id`), `n_prompt_tokens`, `n_prompt_tokens_processed`, `n_prompt_tokens_cache`, `params` (the request's
sampling, named as /completion's `generation_settings`), `next_token` [{has_next_token, has_new_line,
n_remain, n_decoded}], `prompt` and `generated` (their text). An idle entry has no last task (llama-server
shows the slot's previous one; hearth keeps none). `?fail_on_no_slot` (any value): a 503 when none is idle;
`?model=` picks a model (default: the first), loaded as /props loads it. `hearth serve --no-slots` turns it
off: a 501, as llama-server's."""

from __future__ import annotations

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.llama_names import LLAMA_SAMPLERS

router = APIRouter()


@router.get("/slots")
async def slots(request: Request, model: str | None = None):
    if not request.app.state.slots_endpoint:
        raise APIError(501, "This server does not support slots endpoint. Start it with `--slots` (hearth serve "
                            "was started with --no-slots)", code="not_supported")
    served = await request.app.state.models.get(model)
    running = getattr(served.engine, "running_requests", None)
    if running is None:  # a cluster's front end: its replicas' requests are not read per call
        raise APIError(501, "This server's engine (hearth cluster serve's replicas) lists no slots: GET /metrics "
                            "counts running and waiting requests", code="not_supported")
    entries = [_running(i, served, r) for i, r in enumerate(running()[:served.total_slots])]
    entries += [_slot(i, served, False) for i in range(len(entries), served.total_slots)]
    if "fail_on_no_slot" in request.query_params and all(e["is_processing"] for e in entries):
        raise APIError(503, "no slot available", code="unavailable")
    return entries


def _slot(i: int, served, processing: bool) -> dict:
    return {"id": i, "n_ctx": served.max_model_len, "speculative": served.speculative, "is_processing": processing}


def _running(i: int, served, r) -> dict:
    """A running request (hearth.engine.async_engine.RunningRequest) as llama-server's busy slot."""
    p, n_prompt, n_decoded = r.params, len(r.prompt_token_ids), len(r.output_token_ids)
    generated = served.tokenizer.decode(r.output_token_ids)
    room = served.max_model_len - n_prompt  # where max_tokens is None: the context's room ends it
    limit = min(p.max_tokens, room) if p.max_tokens is not None else room
    return {**_slot(i, served, True), "id_task": r.request_id, "n_prompt_tokens": n_prompt,
            "n_prompt_tokens_processed": min(r.num_computed_tokens, n_prompt) - r.num_cached_tokens,
            "n_prompt_tokens_cache": r.num_cached_tokens, "params": _params(p),
            "next_token": [{"has_next_token": True, "has_new_line": "\n" in generated,
                            "n_remain": max(limit - n_decoded, 0), "n_decoded": n_decoded}],
            "prompt": served.tokenizer.decode(r.prompt_token_ids), "generated": generated}


def _params(p) -> dict:
    """SamplingParams as llama-server's slot params name them (n_predict -1: no limit; seed -1: none)."""
    return {"n_predict": -1 if p.max_tokens is None else p.max_tokens, "temperature": p.temperature,
            "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p, "typical_p": p.typical_p,
            "repeat_penalty": p.repetition_penalty, "presence_penalty": p.presence_penalty,
            "frequency_penalty": p.frequency_penalty, **{k: getattr(p, k) for k in LLAMA_SAMPLERS},
            "repeat_last_n": -1 if p.repeat_last_n is None else p.repeat_last_n,  # vLLM's rule reads all of it
            "seed": -1 if p.seed is None else p.seed,
            "stop": list(p.stop), "ignore_eos": p.ignore_eos, "n_probs": p.logprobs or 0}
