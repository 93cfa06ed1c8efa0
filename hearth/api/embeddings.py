"""POST /v1/embeddings: OpenAI's embeddings from the served model's final hidden states, pooled as
its GGUF says (`{arch}.pooling_type`: mean or last; else the last token's, vLLM's default for a
decoder) and L2-normalized, as `float` lists or `base64` (little-endian f32, what the OpenAI SDK asks
for). Each input runs as a prompt alone (hearth.api.generate's prompt_only), at most as many at once
as the engine holds: a batch of thousands (an ingestion's) goes in waves, not as a 429. A chat model's
embeddings are what llama-server's --embeddings gives; a model trained for them (e.g. a
Qwen3-Embedding GGUF) is what retrieval wants."""

from __future__ import annotations

import base64
import struct

from fastapi import APIRouter, Request

from hearth.api.errors import APIError
from hearth.api.generate import Generation, until_disconnect
from hearth.api.openai_protocol import EmbeddingRequest
from hearth.api.sampling import prompt_token_ids
from hearth.loader.tokenizer import lone_surrogate
from hearth.sampling_params import SamplingParams

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingRequest, request: Request):
    state = request.app.state
    served = await state.models.get(body.model)
    if body.dimensions is not None and body.dimensions != served.embedding_size:
        raise APIError(400, f"dimensions: this model's embeddings have {served.embedding_size} dimensions "
                            f"(no shortening), got {body.dimensions}", param="dimensions")
    prompts = inputs(served, body.input)
    vectors = await embed(request, served, prompts)
    if vectors is None:  # the client went away: its requests are aborted
        return {}
    tokens = sum(map(len, prompts))
    return {"object": "list", "model": served.name,
            "data": [{"object": "embedding", "index": i, "embedding": _encoded(v, body.encoding_format)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


async def embed(request: Request, served, prompts: list[list[int]]) -> list[list[float]] | None:
    """One embedding per prompt, in order, at most as many prompts at once as the engine holds; None
    when the client went away (what was running is aborted)."""
    params = SamplingParams(max_tokens=1, temperature=0.0, pooling=served.pooling)
    wave = getattr(served.engine, "max_in_flight", None) or len(prompts)
    vectors = []
    for at in range(0, len(prompts), wave):
        gen = Generation(served.engine, prompts[at:at + wave], params, request.app.state.metrics.of(served.name),
                         prompt_only=True)
        choices = await until_disconnect(request, gen.collect())
        if choices is None:
            return None
        vectors += [c.embedding for c in choices]
    return vectors


def inputs(served, value, truncate: bool = False) -> list[list[int]]:
    """Token ids per input; an empty one, or one the context cannot hold (unless `truncate`: its first
    tokens that fit, as asked), is a 400 naming it (OpenAI refuses "" too)."""
    if isinstance(value, str) or value and isinstance(value[0], int):
        value = [value]
    if not value:
        raise APIError(400, "input: must not be empty", param="input")
    ids = []
    for i, v in enumerate(value):
        where = f"input[{i}]"
        if isinstance(v, str):
            if not v:
                raise APIError(400, f"{where}: must not be empty", param="input")
            if why := lone_surrogate(v):
                raise APIError(400, f"{where}: {why}", param="input")
            ids.append(served.encode_text(v))
        else:
            ids.append(prompt_token_ids(v, served.vocab_size, where))
        room = served.max_model_len - 1  # a prompt alone computes one token more
        if len(ids[-1]) > room and truncate:
            ids[-1] = ids[-1][:room]
        elif len(ids[-1]) > room:
            raise APIError(400, f"{where}: {len(ids[-1])} tokens, more than the context holds for one "
                                f"({room}); shorten it", param="input", code="context_length_exceeded")
    return ids


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
