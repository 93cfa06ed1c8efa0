"""POST /embedding (and /embeddings): llama-server's native embeddings route (tools/server/README.md), which
scripts written against `llama-server --embedding` call: `content` (or `input`) as a text, token ids, or a
list of either, and `embd_normalize` (llama.cpp's common_embd_normalize: -1 none, 0 max absolute scaled to
int16's range, 1 taxicab, 2 Euclidean (the default), p > 2 the p-norm). The reply is llama-server's: a bare
list, one `{"index", "embedding": [[...]]}` per input, `embedding` its rows: one pooled row here. hearth pools
every input (mean, cls or last; no per-token rows, llama-server's `--pooling none`, which `hearth serve`
refuses), and its vectors come L2-normalized from the engine, so every p-norm is a rescaling of them; -1,
the raw pooled vector, is a 400 (its length is not kept)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import StrictInt, field_validator

from hearth.api.embeddings import check_before_load, check_embeds, embed, inputs
from hearth.api.errors import APIError
from hearth.api.openai_protocol import _Request, prompt_shapes

router = APIRouter()

INT16_RANGE = 32760.0  # common_embd_normalize's max-absolute scale: "make an int16 range"
INT32_MAX = 2**31 - 1


class LlamaEmbeddingRequest(_Request):
    model: str | None = None
    content: str | list[str] | list[StrictInt] | list[list[StrictInt]] | None = None
    input: str | list[str] | list[StrictInt] | list[list[StrictInt]] | None = None
    """llama-server reads `input` first, else `content`; one of them is required."""
    embd_normalize: StrictInt = 2

    @field_validator("content", "input", mode="before")
    @classmethod
    def _one_of_the_prompt_shapes(cls, v):
        return v if v is None else prompt_shapes(v)


@router.post("/embedding")
@router.post("/embeddings")
async def embedding(body: LlamaEmbeddingRequest, request: Request):
    field = "input" if body.input is not None else "content"
    value = body.input if body.input is not None else body.content
    if value is None:
        raise APIError(400, 'content: "input" or "content" must be provided', param="content")
    if body.embd_normalize == -1:
        raise APIError(400, "embd_normalize: -1 (no normalization) is not supported: hearth's embeddings come "
                            "L2-normalized from the engine, without their length; use 2 (the default), 1, 0 or "
                            "a p-norm > 2", param="embd_normalize")
    if not -1 <= body.embd_normalize <= INT32_MAX:  # llama-server reads an int; 10**400 was no float, a 500
        raise APIError(400, f"embd_normalize: must be -1, 0, 1, 2 or a p-norm > 2 (at most {INT32_MAX}), got "
                            f"{body.embd_normalize}", param="embd_normalize")
    check_before_load(request.app.state.models, body.model, value, None, field=field)
    served = await request.app.state.models.get(body.model)
    check_embeds(served)
    prompts = inputs(served, value, field=field)
    vectors = await embed(request, served, prompts)
    if vectors is None:  # the client went away: its requests are aborted
        return []
    return [{"index": i, "embedding": [normalized(v, body.embd_normalize)]} for i, v in enumerate(vectors)]


def normalized(unit: list[float], p: int) -> list[float]:
    """An L2-unit vector renormalized as common_embd_normalize(p) would the raw one (each norm is scale-free,
    so the raw length cancels): 0 max |x| -> 32760, 2 as given, else the p-norm (1: taxicab) -> 1."""
    if p == 2:
        return unit
    if p == 0:
        size = max(map(abs, unit), default=0.0) / INT16_RANGE
    else:  # over the largest |x|: each |x| ** p of a unit vector underflowed to 0 at a large p (a zero vector)
        top = max(map(abs, unit), default=0.0)
        size = top * sum((abs(x) / top) ** p for x in unit) ** (1 / p) if top else 0.0
    return [x / size for x in unit] if size > 0 else [0.0] * len(unit)
