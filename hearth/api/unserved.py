"""Routes other servers have and hearth does not, each with one clause saying so: a client pointed at
hearth from vLLM, llama-server or Ollama got a bare "no route POST /v1/embeddings" and could not tell
a typo in its base URL from a feature hearth lacks."""

from __future__ import annotations

GENERATION = ("hearth serves text generation (/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, "
              "Ollama's /api/chat), embeddings (/v1/embeddings, /api/embed) and reranking (/v1/rerank, /v1/score)")

UNSERVED: tuple[tuple[str, str], ...] = (
    ("/v1/audio/", f"hearth runs text models only; {GENERATION}"),
    ("/v1/images/", f"hearth runs text models only; {GENERATION}"),
    ("/api/", "not one of the Ollama routes hearth serves (/api/chat, /api/generate, /api/embed, /api/tags, "
              "/api/show, /api/ps, /api/version)"),
)
"""(path prefix, why): the first whose prefix the path starts with."""


def unserved(path: str) -> str | None:
    """Why hearth has no such route, where another server has one; else None."""
    return next((why for prefix, why in UNSERVED if path.startswith(prefix)), None)
