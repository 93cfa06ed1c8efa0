"""Ollama's embeddings: POST /api/embed (`input`: a text or texts -> `embeddings`, one L2-normalized
vector each) and the older POST /api/embeddings (`prompt`: one text -> `embedding`), over the same
engine path as /v1/embeddings (hearth.api.embeddings). Ollama cuts an input past the context unless
`truncate` is false; hearth cuts only when `truncate` is true, else a 400 naming the input. The older
route's vectors are normalized too (Ollama's are not)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from hearth.api.embeddings import embed, inputs
from hearth.api.errors import APIError
from hearth.api.ollama_models import served_model
from hearth.api.ollama_protocol import EmbedRequest

router = APIRouter()


@router.post("/api/embed")
async def embed_texts(body: EmbedRequest, request: Request):
    started = time.perf_counter()
    if body.input is None:
        raise APIError(400, "input: is required (a text or a list of texts)", param="input")
    served, load_s = await served_model(request.app.state.models, body.model)
    if body.dimensions is not None and body.dimensions != served.embedding_size:
        raise APIError(400, f"dimensions: this model's embeddings have {served.embedding_size} dimensions "
                            f"(no shortening), got {body.dimensions}", param="dimensions")
    prompts = inputs(served, body.input, truncate=body.truncate is True)
    vectors = await embed(request, served, prompts)
    if vectors is None:
        return {}
    return {"model": body.model or served.name, "embeddings": vectors,
            "total_duration": int((time.perf_counter() - started) * 1e9), "load_duration": int(load_s * 1e9),
            "prompt_eval_count": sum(map(len, prompts))}


@router.post("/api/embeddings")
async def embed_prompt(body: EmbedRequest, request: Request):
    if body.prompt is None:
        raise APIError(400, "prompt: is required (the text to embed)", param="prompt")
    served, _ = await served_model(request.app.state.models, body.model)
    vectors = await embed(request, served, inputs(served, body.prompt, truncate=body.truncate is True))
    return {} if vectors is None else {"embedding": vectors[0]}
