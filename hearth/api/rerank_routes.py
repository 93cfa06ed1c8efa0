"""Reranking over a reranker GGUF (pooling_type 4): POST /rerank, /v1/rerank, /v2/rerank, /reranking,
/v1/reranking (llama-server's, Jina's, Cohere's and vLLM's shape: results sorted by score, the best
first, `top_n` of them; a body with `texts` gets TEI's, a bare list, as llama-server answers it) and vLLM's POST /score, /v1/score (`data` in pair order). Each query-document
pair is one prompt, the file's rerank template's (Qwen3-Reranker's) or [CLS] query [SEP] document [SEP] with
token types 0 then 1 (hearth.engine.pairs), run through the embeddings' engine path in waves; its score is
the sigmoid of the head's logit, as vLLM, TEI, Jina and Cohere answer (`use_activation: false`: the logit,
llama-server's number for a cross-encoder; a decoder reranker's sigmoid is llama-server's p("yes")). A pair
past the context is a 400 naming both numbers unless `truncate_prompt_tokens` cuts its document."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request

from hearth.api.embeddings import embed, room
from hearth.api.errors import APIError
from hearth.api.rerank_protocol import RerankRequest, ScoreRequest
from hearth.engine.pairs import PairError, activated, check_truncate, not_a_reranker, pair_prompts, paired
from hearth.loader.tokenizer import lone_surrogate

router = APIRouter()

RERANK_PATHS = ("/rerank", "/v1/rerank", "/v2/rerank", "/reranking", "/v1/reranking")
SCORE_PATHS = ("/score", "/v1/score")


async def rerank(body: RerankRequest, request: Request):
    # every check before the load: a bad request loads nothing (nor unloads another model for it)
    known = check_reranker(request.app.state.models.known(body.model))
    tei, field, texts = _documents(body)
    truncate = -1 if body.truncate and body.truncate_prompt_tokens is None else body.truncate_prompt_tokens
    _check_truncate(known, truncate)
    served = await reranker(request, body.model)
    scored = await _scores(request, served, [(body.query, t) for t in texts], truncate,
                           [f"{field}[{i}]" for i in range(len(texts))], field, body.max_tokens_per_doc)
    if scored is None:  # the client went away: its requests are aborted
        return {}
    logits, tokens = scored
    # no order is promised among near-ties: one pair's logit moves by ~1e-9 with the batch (padding) it ran in
    best = sorted(range(len(texts)), key=lambda i: -logits[i])[:body.top_n or None]
    if tei:  # TEI's bare list, as llama-server answers a body with `texts`
        return [{"index": i, "score": activated(logits[i], not body.raw_scores),
                 **({"text": texts[i]} if body.return_text else {})} for i in best]
    docs = body.documents  # an object comes back whole, as Cohere keeps its other fields
    results = [{"index": i, "relevance_score": activated(logits[i], body.use_activation),
                **({"document": docs[i] if isinstance(docs[i], dict) else {"text": texts[i]}}
                   if body.return_documents else {})} for i in best]
    return {"id": f"rerank-{uuid.uuid4().hex}", "object": "list", "model": served.name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}, "results": results}


async def score(body: ScoreRequest, request: Request):
    known = check_reranker(request.app.state.models.known(body.model))
    names = body.pair_fields()  # (text_1, text_2) or vLLM's other names for them
    first, second = (getattr(body, n) for n in names)
    for name, value in zip(names, (first, second)):
        if not value:
            raise APIError(400, f"{name}: must not be empty", param=name)
        for i, t in enumerate([value] if isinstance(value, str) else value):
            _check_text(t, name if isinstance(value, str) else f"{name}[{i}]", name)
    try:
        pairs = paired(first, second, names)
    except ValueError as e:
        raise APIError(400, f"{names[1]}: {e}", param=names[1]) from None
    _check_truncate(known, body.truncate_prompt_tokens)
    served = await reranker(request, body.model)
    many = not isinstance(second, str)
    scored = await _scores(request, served, pairs, body.truncate_prompt_tokens,
                           [f"{names[1]}[{i}]" if many else names[1] for i in range(len(pairs))], names[1])
    if scored is None:
        return {}
    logits, tokens = scored
    return {"id": f"score-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()), "model": served.name,
            "data": [{"index": i, "object": "score", "score": activated(x, body.use_activation)}
                     for i, x in enumerate(logits)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}}


for _path in RERANK_PATHS:
    router.add_api_route(_path, rerank, methods=["POST"])
for _path in SCORE_PATHS:
    router.add_api_route(_path, score, methods=["POST"])


def _documents(body: RerankRequest) -> tuple[bool, str, list[str]]:
    """(TEI's shape, the documents' field, their texts), each checked: a 400 naming what is wrong."""
    if body.documents is not None and body.texts is not None:
        raise APIError(400, "texts: give documents or texts (TEI's), not both", param="texts")
    tei = body.texts is not None
    field, texts = "texts" if tei else "documents", body.document_texts()
    if not texts:
        raise APIError(400, f"{field}: must not be empty (give at least one document)", param=field)
    if body.top_n is not None and body.top_n < 0:
        raise APIError(400, f"top_n: must be 0 (all) or more, got {body.top_n}", param="top_n")
    if body.max_tokens_per_doc is not None and body.max_tokens_per_doc < 1:
        raise APIError(400, f"max_tokens_per_doc: must be at least 1, got {body.max_tokens_per_doc}",
                       param="max_tokens_per_doc")
    _check_text(body.query, "query", "query")
    for i, t in enumerate(texts):
        _check_text(t, f"{field}[{i}]", field)
    return tei, field, texts


def check_reranker(model):
    """`model` (a ServedModel, or what the pool knows before its load: hearth.api.model_spec.Known, its pooling
    None where not known) must be a reranker: any other is a 400 naming it and why. Returns it."""
    if model.pooling not in ("rank", None):
        kind = "an embedding model" if model.embeds_only else "a text generation model"
        raise APIError(400, not_a_reranker(f"model: {model.name!r}", kind), param="model")
    return model


async def reranker(request: Request, model: str | None):
    """The served model `model` names, loaded, which must be a reranker (check_reranker)."""
    return check_reranker(await request.app.state.models.get(model))


def _check_truncate(known, truncate: int | None) -> None:
    """truncate_prompt_tokens' range against the context (before the load: not checked where it is not known)."""
    if not known.max_model_len:
        return
    try:
        check_truncate(truncate, room(known))
    except PairError as e:
        raise APIError(400, str(e), param="truncate_prompt_tokens") from None


async def _scores(request: Request, served, pairs: list[tuple[str, str]], truncate: int | None,
                  where: list[str], field: str, doc_tokens: int | None = None) -> tuple[list[float], int] | None:
    """(each pair's logit, the prompt tokens of all), or None when the client went away. A pair the context
    cannot hold is a 400 naming it and both numbers, unless `truncate` cuts it (hearth.engine.pairs);
    doc_tokens (max_tokens_per_doc) cuts each document first."""
    try:
        prompts, starts = pair_prompts(served.tokenizer, pairs, truncate, room(served), where, doc_tokens)
    except PairError as e:
        if e.index is None:
            raise APIError(400, str(e), param="truncate_prompt_tokens") from None
        raise APIError(400, str(e), param=field, code="context_length_exceeded") from None
    vectors = await embed(request, served, prompts, starts)
    return None if vectors is None else ([v[0] for v in vectors], sum(map(len, prompts)))


def _check_text(text: str, where: str, field: str) -> None:
    if not text:
        raise APIError(400, f"{where}: must not be empty", param=field)
    if why := lone_surrogate(text):
        raise APIError(400, f"{where}: {why}", param=field)
