"""llama-server's --embedding (--embeddings): a server that only embeds. Each generating route answers 501 naming
the flag, as llama-server answers a completion in that mode ("This server does not support completions. Start it
without `--embeddings`"), in the route's own error shape; /v1/embeddings, /api/embed and the rerank routes answer,
and so do Ollama's load and unload requests (/api/chat and /api/generate with nothing to generate: `ollama stop`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.routing import APIRoute

from hearth.api.errors import APIError


async def refuse():
    raise APIError(501, "this server only embeds (hearth serve --embedding, llama-server's embeddings-only mode): it "
                        "does not generate; use /v1/embeddings or /api/embed, or start it without --embedding",
                   code="not_supported", permanent=True)


def refusing(router: APIRouter) -> APIRouter:
    """A router with `router`'s paths and methods, each answering the 501."""
    out = APIRouter()
    for route in router.routes:
        if isinstance(route, APIRoute):
            out.add_api_route(route.path, refuse, methods=sorted(route.methods))
    return out
