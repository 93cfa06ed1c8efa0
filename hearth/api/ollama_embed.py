"""Ollama's embeddings: POST /api/embed (`input`: a text or texts -> `embeddings`, one L2-normalized
vector each) and the older POST /api/embeddings (`prompt`: one text -> `embedding`), over the same
engine path as /v1/embeddings (hearth.api.embeddings). Ollama cuts an input past the context unless
`truncate` is false; hearth cuts only when `truncate` is true, else a 400 naming the input. The older
route's vectors are normalized too (Ollama's are not). `keep_alive: 0` unloads the model once answered; another sets how long it stays once idle."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from hearth.api.embeddings import check_before_load, check_dimensions, check_embeds, embed, inputs
from hearth.api.ollama_models import answered, resolve, served_model, unload_after
from hearth.api.ollama_options import keep_alive_seconds
from hearth.api.ollama_protocol import EmbedRequest

router = APIRouter()


@router.post("/api/embed")
async def embed_texts(body: EmbedRequest, request: Request):
    started = time.perf_counter()
    keep_alive = keep_alive_seconds(body.keep_alive)  # a bad one: a 400 before any work
    texts = [body.input] if isinstance(body.input, str) else body.input or []
    pool = request.app.state.models
    name = resolve(pool, body.model).spec.name  # an unknown model: Ollama's 404, before the checks
    # no text (none, "" or []): the model is loaded and nothing embedded, as Ollama answers a preload
    check_before_load(pool, name, texts if any(texts) else None, body.dimensions, body.truncate is True)
    served, load_s = await served_model(pool, body.model, keep_alive)
    check_embeds(served)
    then = unload_after(pool, served.name, keep_alive)
    check_dimensions(served, body.dimensions)
    prompts = inputs(served, texts, truncate=body.truncate is True) if any(texts) else []
    vectors = await embed(request, served, prompts) if prompts else []
    if vectors is None:
        return answered({}, then)
    return answered({"model": body.model or served.name, "embeddings": vectors,
                     "total_duration": int((time.perf_counter() - started) * 1e9), "load_duration": int(load_s * 1e9),
                     "prompt_eval_count": sum(map(len, prompts))}, then)


@router.post("/api/embeddings")
async def embed_prompt(body: EmbedRequest, request: Request):
    keep_alive = keep_alive_seconds(body.keep_alive)
    pool = request.app.state.models
    name = resolve(pool, body.model).spec.name
    check_before_load(pool, name, [body.prompt] if body.prompt else None, None, body.truncate is True,
                      field="prompt")
    served, _ = await served_model(pool, body.model, keep_alive)
    check_embeds(served)
    then = unload_after(request.app.state.models, served.name, keep_alive)
    if not body.prompt:  # a preload, as Ollama answers it
        return answered({"embedding": []}, then)
    vectors = await embed(request, served, inputs(served, [body.prompt], truncate=body.truncate is True, field="prompt"))
    return answered({} if vectors is None else {"embedding": vectors[0]}, then)
