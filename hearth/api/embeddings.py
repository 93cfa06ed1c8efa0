"""POST /v1/embeddings: OpenAI's embeddings from the served model's final hidden states, pooled as
its GGUF says (`{arch}.pooling_type`: mean or last; else the last token's, vLLM's default for a
decoder) and L2-normalized, as `float` lists or `base64` (little-endian f32, what the OpenAI SDK asks
for). Each input runs as a prompt alone (hearth.api.generate's prompt_only), in waves that fit the room
the engine has beside other requests: a batch of thousands (an ingestion's) is not a 429. A chat model's
embeddings are what llama-server's --embeddings gives; a model trained for them (e.g. a
Qwen3-Embedding GGUF) is what retrieval wants."""

from __future__ import annotations

import asyncio
import base64
import struct

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.generate import Generation, until_disconnect
from hearth.api.openai_protocol import EmbeddingRequest
from hearth.api.sampling import prompt_token_ids
from hearth.engine.async_engine import EngineFullError
from hearth.engine.pairs import a_reranker
from hearth.loader.tokenizer import lone_surrogate
from hearth.sampling_params import SamplingParams

router = APIRouter()

FULL_POLL_S, FULL_WAIT_S = 0.05, 60.0
"""How often a batch looks again for room in an engine others have filled, and for how long in all."""


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request):
    state = request.app.state
    check_before_load(state.models, body.model, body.input, body.dimensions, keep_last=body.truncate_prompt_tokens)
    served = await state.models.get(body.model)
    check_embeds(served)
    check_dimensions(served, body.dimensions)
    prompts = inputs(served, body.input, keep_last=body.truncate_prompt_tokens)
    vectors = await embed(request, served, prompts)
    if vectors is None:  # the client went away: its requests are aborted
        return {}
    tokens = sum(map(len, prompts))
    return {"object": "list", "model": served.name,
            "data": [{"object": "embedding", "index": i, "embedding": _encoded(v, body.encoding_format)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def check_before_load(pool, model: str | None, value, dimensions: int | None, truncate: bool | None = None,
                      field: str = "input", keep_last: int | None = None) -> None:
    """The embedding routes' checks that need no loaded model, against what the pool knows of the one `model`
    names (ModelPool.known: its header's pooling, width, vocabulary and context), before the route loads it:
    a bad request loads nothing (nor unloads another for it). A text's length needs the tokenizer: `inputs`
    checks it after the load, with the rest again. Arguments: inputs' (value None: none to check)."""
    known = pool.known(model)
    check_embeds(known)
    check_dimensions(known, dimensions)
    if value is not None:
        _read(known, value, truncate, field, keep_last, None)


def check_embeds(served) -> None:
    """A reranker's pooled states are no embedding: its requests are pairs (hearth.api.rerank_routes)."""
    if served.pooling == "rank":
        raise APIError(400, a_reranker(f"model: {served.name!r}"), param="model")


def check_dimensions(served, dimensions: int | None) -> None:
    """`dimensions` as the model's width (None: not known before its load, not checked)."""
    if dimensions is not None and served.embedding_size is not None and dimensions != served.embedding_size:
        raise APIError(400, f"dimensions: this model's embeddings have {served.embedding_size} dimensions "
                            f"(no shortening), got {dimensions}", param="dimensions")


async def embed(request: Request, served, prompts: list[list[int]],
                pair_starts: list[int] | None = None) -> list[list[float]] | None:
    """One embedding per prompt, in order (a reranker's: [logit] per pair, pair_starts[i] where pair i's
    second text starts); None when the client went away (what was running is aborted)."""
    metrics = request.app.state.metrics.of(served.name)
    return await until_disconnect(request, _waves(served, prompts, metrics, pair_starts))


async def _waves(served, prompts: list[list[int]], metrics, pair_starts: list[int] | None = None) -> list[list[float]]:
    """The prompts in waves that fit the room the engine has left beside what else runs (at least one
    prompt: a full engine is waited on, up to FULL_WAIT_S, then its 429 stands)."""
    engine, params = served.engine, SamplingParams(max_tokens=1, temperature=0.0, pooling=served.pooling)
    limit = getattr(engine, "max_in_flight", None)
    vectors: list[list[float]] = []
    waited = 0.0
    with served.holds.held():  # waiting for room, none of its requests is in flight: the model must stay loaded
        while len(vectors) < len(prompts):
            rest = prompts[len(vectors):]
            room = len(rest) if limit is None else max(1, limit - engine.num_in_flight)
            try:
                starts = None if pair_starts is None else pair_starts[len(vectors):len(vectors) + room]
                gen = Generation(engine, rest[:room], params, metrics, prompt_only=True, pair_starts=starts)
            except EngineFullError:
                if waited >= FULL_WAIT_S:
                    raise
                await asyncio.sleep(FULL_POLL_S)
                waited += FULL_POLL_S
                continue
            waited = 0.0
            vectors += [c.embedding for c in await gen.collect()]
    return vectors


def room(served) -> int:
    """Tokens one prompt alone may hold: a decoder computes one token past it (an encoder, or a model not yet
    known to be a decoder, the whole context)."""
    return served.max_model_len - (served.embeds_only is False)


def inputs(served, value, truncate: bool | None = None, field: str = "input",
           keep_last: int | None = None) -> list[list[int]]:
    """Token ids per input; an empty one, or one the context cannot hold (unless `truncate`: its first
    tokens that fit, as asked), is a 400 naming it (OpenAI refuses "" too); `field`: the body's name for them.
    truncate None: the route has no such field (False: Ollama's, which the 400 names). keep_last: vLLM's
    truncate_prompt_tokens k (-1: the context's room): an input past k tokens keeps its last k."""
    return _read(served, value, truncate, field, keep_last, served.encode_text)


def _read(served, value, truncate: bool | None, field: str, keep_last: int | None, encode) -> list[list[int]]:
    """inputs', where `served` may be a model not yet loaded (hearth.api.model_spec.Known: its context 0 when
    not known, then not checked) and encode None (no tokenizer yet: a text is checked, not encoded)."""
    limit = room(served) if served.max_model_len else None
    if keep_last is not None and limit is not None and not (keep_last == -1 or 1 <= keep_last <= limit):
        raise APIError(400, f"truncate_prompt_tokens: must be -1 or 1 to {limit} (the context's room), got {keep_last}",
                       param="truncate_prompt_tokens")
    if isinstance(value, str) or value and isinstance(value[0], int):
        value = [value]
    if not value:
        raise APIError(400, f"{field}: must not be empty", param=field)
    ids = []
    for i, v in enumerate(value):
        where = f"input[{i}]" if field == "input" else field  # Ollama's older route embeds one `prompt`
        if isinstance(v, str):
            if not v:
                raise APIError(400, f"{where}: must not be empty", param=field)
            if why := lone_surrogate(v):
                raise APIError(400, f"{where}: {why}", param=field)
            if encode is None:
                continue
            ids.append(encode(v))
        else:
            ids.append(prompt_token_ids(v, served.vocab_size, where))
        if keep_last is not None and limit is not None:
            ids[-1] = ids[-1][-(limit if keep_last == -1 else keep_last):]
        if limit is not None and len(ids[-1]) > limit and truncate:
            ids[-1] = ids[-1][:limit]
        elif limit is not None and len(ids[-1]) > limit:
            raise APIError(400, f"{where}: {len(ids[-1])} tokens, more than the context holds for one "
                                f"({limit}); shorten it or send " + ('"truncate": true' if truncate is False
                                                                   else '"truncate_prompt_tokens": -1'),
                                param=field, code="context_length_exceeded")
    return ids


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
