"""Ollama's model routes: GET /api/tags (the served models), POST /api/show (one model's details,
template and capabilities), GET /api/ps (the loaded ones), GET /api/version; and Ollama's model
management (pull, push, create, copy, delete, blobs), which hearth does another way or not at all: a
400 that says what to do instead, never a 404 page. Embeddings: hearth.api.ollama_embed.

Names: a model's id or alias, or either with Ollama's default tag (`smollm2-135m:latest`); listed with
it, as Ollama lists every model. A model not yet loaded is described by what the pool knows of it
(/api/show does not load it: clients call it for every model they list)."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from hearth.api.errors import APIError
from hearth.api.model_pool import TAG
from hearth.api.ollama_protocol import ShowRequest, rfc3339
from hearth.api.infill import has_fim

router = APIRouter()

API_VERSION = "0.33.0"
"""The Ollama release whose API (docs/api.md, api/types.go) these routes follow: clients that check the
server's version for a feature see one that has it."""
NEVER = "2318-01-01T00:00:00Z"
"""/api/ps' expires_at of a model kept until another needs its room (pinned, or kept forever: Ollama's
keep_alive -1 reads as a date this far)."""

REFUSED = {
    "pull": "hearth does not download models over its API: run `hearth pull NAME` on the server's machine "
            "(`hearth models` lists the catalog; a Hugging Face `org/repo:file.gguf` works too), then serve it",
    "push": "hearth has no model registry to push to: a model is a GGUF file, served in place",
    "create": "hearth does not build models from a Modelfile: serve the GGUF file itself (`hearth serve PATH "
              "--served-model-name NAME`) and send sampling settings per request in `options`",
    "copy": "hearth does not copy models: give a model more names with --served-model-name A B, or `aliases` "
            "in a --models file",
    "delete": "hearth does not delete models over its API: they are files in ~/.cache/hearth/models "
              "(`hearth models` lists them)",
    "blobs": "hearth does not take model files over its API: put the GGUF file on the server's machine and "
             "serve it (`hearth serve PATH`)",
}


def resolve(pool, requested: str | None):
    """The pool's slot for `requested` (an id, an alias, either with `:latest`: ModelPool.resolve); unknown:
    Ollama's 404."""
    try:
        return pool.resolve(requested)
    except APIError as e:
        if e.status != 404:
            raise
    raise APIError(404, f"model '{requested}' not found", param="model", code="model_not_found")


async def served_model(pool, requested: str | None, keep_alive: float | None = None):
    """The served model (loaded if need be) and the seconds its load took; `keep_alive` (seconds, None: not
    given) becomes how long it stays once idle, as Ollama's scheduler sets it when it hands the runner out. 0
    applies when the answer ends (unload_after): set here, an idle tick could unload the model before the
    request reaches its engine."""
    slot = resolve(pool, requested)
    t0 = time.perf_counter()
    served = await pool.get(slot.spec.name)
    if keep_alive:
        pool.keep(slot.spec.name, keep_alive)
    return served, time.perf_counter() - t0


def unload_after(pool, name: str, keep_alive: float | None) -> Callable[[], Awaitable] | None:
    """keep_alive 0 (seconds) on a request that is answered: the model unloads once the answer is sent, as
    Ollama's scheduler expires a runner with a zero keep_alive when its last request ends (where the model
    stays: ModelPool.unload)."""
    async def unload() -> None:  # a coroutine function: Starlette's BackgroundTask would thread a lambda
        await pool.unload(name)
    return unload if keep_alive == 0 else None


def answered(body: dict, then: Callable[[], Awaitable] | None) -> JSONResponse:
    """A whole answer, with `then` (unload_after's) run once it is sent."""
    return JSONResponse(body, background=then and BackgroundTask(then))


def _tagged(name: str) -> str:
    return name if ":" in name else name + TAG


def _details(served) -> dict:
    family = served.metadata.get("general.architecture", "") if served else ""
    return {"parent_model": "", "format": "gguf", "family": family, "families": [family] if family else None,
            "parameter_size": _count(served.parameter_count) if served else "",
            "quantization_level": served.quantization if served else ""}


def _count(n: int) -> str:
    """Ollama's parameter_size: 134515008 -> "134.52M"."""
    if not n:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}".rstrip("0").rstrip(".") + unit
    return str(n)


def _file(served) -> tuple[int, str | None]:
    """(size in bytes, modified time) of a loaded model's file(s): a split GGUF's size is every part's,
    its first file's alone understates it; (0, None) where not known."""
    try:
        st = os.stat(served.path)
    except (OSError, TypeError, AttributeError):
        return 0, None
    return served.file_size or st.st_size, rfc3339(datetime.fromtimestamp(st.st_mtime, timezone.utc))


def _facts(slot):
    """What the routes say of a slot's model: the loaded model's, else its file header's (None: not known)."""
    return slot.served or slot.spec.facts


def _entry(slot, name: str) -> dict:
    served = _facts(slot)
    size, modified = _file(served) if served else (0, None)
    return {"name": _tagged(name), "model": _tagged(name),
            "modified_at": modified or rfc3339(datetime.fromtimestamp(slot.created, timezone.utc)),
            "size": size, "digest": "", "details": _details(served)}


@router.api_route("/api/tags", methods=["GET", "HEAD"])
async def tags(request: Request):
    pool = request.app.state.models
    return {"models": [_entry(slot, name) for slot in pool.slots for name in slot.spec.names]}


@router.get("/api/ps")
async def ps(request: Request):
    pool = request.app.state.models
    return {"models": [{**_entry(slot, name), "size": slot.spec.footprint or _file(slot.served)[0],
                        "expires_at": _expiry(pool.expires_at(slot)), "size_vram": 0,
                        "context_length": slot.served.max_model_len}
                       for slot in pool.slots if slot.served is not None for name in slot.spec.names[:1]]}


def _expiry(at: float | None) -> str:
    return NEVER if at is None else rfc3339(datetime.fromtimestamp(at, timezone.utc))


def _capabilities(served) -> list[str]:
    """Every served model takes tools (a template without them gets hearth's tool prompt: hearth.api.tools);
    an encoder only embeds (Ollama lists nomic-embed-text's as ["embedding"]); a reranker ("rank") embeds
    nothing (/api/embed refuses it) and Ollama has no word for what it does: none."""
    if served is not None and served.pooling == "rank":  # a cross-encoder's or a decoder's (Qwen3-Reranker)
        return []
    if served is not None and served.embeds_only:
        return ["embedding"]
    caps = ["completion", "tools"]
    if served is not None and served.tokenizer is not None and has_fim(served.tokenizer):
        caps.append("insert")
    if served is not None and thinks(served):
        caps.append("thinking")
    if getattr(served, "vision", None) is not None:  # served with an mmproj (before its load: its file's facts say)
        caps.append("vision")
    return caps


def thinks(served) -> bool:
    """Ollama's "thinking" capability: the template has a reasoning channel (<think>, harmony's analysis) or
    a switch for one (enable_thinking, reasoning_effort)."""
    source = served.template_source or ""
    return bool(served.knows_reasoning or served.channels or "enable_thinking" in source or "reasoning_effort" in source)


@router.post("/api/show")
async def show(body: ShowRequest, request: Request):
    requested = body.model or body.name
    slot = resolve(request.app.state.models, requested)
    served = _facts(slot)
    context = slot.served.max_model_len if slot.served else slot.spec.max_model_len
    info = dict(served.metadata) if served else {}
    family = info.get("general.architecture")
    if served is not None and served.parameter_count:
        info["general.parameter_count"] = served.parameter_count
    if family and context:  # what a client sizes num_ctx by: the served context, which num_ctx may not pass
        info[f"{family}.context_length"] = context
    path = served.path if served else ""
    # `parameters` in the Modelfile's syntax: Continue sizes its requests' num_ctx by this line
    out = {"modelfile": f"# hearth serves {slot.spec.name}\nFROM {path or slot.spec.name}\n",
           "parameters": f"num_ctx {context}" if context else "",
           "template": served.template_source if served else "", "details": _details(served), "model_info": info,
           "capabilities": _capabilities(served), "hearth": {"loaded": slot.served is not None, "context_length": context}}
    if served is not None:
        out["modified_at"] = _file(served)[1] or rfc3339(datetime.fromtimestamp(slot.created, timezone.utc))
    vision = getattr(served, "vision", None)
    if vision is not None and vision.path and (projector := projector_info(vision.path)):
        out["projector_info"] = projector
    return out


def projector_info(path: str) -> dict | None:
    """Ollama's `projector_info`: the mmproj GGUF's metadata (as model_info is the model's; `ollama show` reads
    its general.architecture, general.parameter_count and clip.vision.embedding_length); None where the file
    is gone since it loaded (the model still reads images: its tower is in memory)."""
    from hearth.api.served import gguf_facts
    from hearth.errors import HearthError
    from hearth.loader.gguf_loader import GGUFFile

    try:
        facts = gguf_facts(GGUFFile(path))
    except (OSError, ValueError, HearthError):
        return None
    return {**facts["metadata"], "general.parameter_count": facts["parameter_count"]}


@router.api_route("/api/version", methods=["GET", "HEAD"])
async def version(request: Request):
    return {"version": API_VERSION, "hearth": request.app.state.config.build_info}


@router.head("/")
async def heartbeat():
    """`ollama` and other clients check a server is up with HEAD / (GET / is the chat page)."""
    return Response(status_code=200)


def _refuse(what: str):
    async def refuse():
        raise APIError(400, REFUSED[what])
    return refuse


for _what, _method, _path in (("pull", "POST", "/api/pull"), ("push", "POST", "/api/push"),
                              ("create", "POST", "/api/create"), ("copy", "POST", "/api/copy"),
                              ("delete", "DELETE", "/api/delete"), ("blobs", "POST", "/api/blobs/{digest}"),
                              ("blobs", "HEAD", "/api/blobs/{digest}")):
    router.add_api_route(_path, _refuse(_what), methods=[_method])
