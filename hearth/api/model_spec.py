"""What a server knows of each model it serves before loading it (hearth.api.model_pool loads them):
its names, its footprint against the memory budget, whether it is pinned, its keep-alive."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hearth.api.media_parts import ANY_IMAGES
from hearth.api.served import FileFacts, ServedModel
from hearth.tool_guard.routing import RouterConfig


@dataclass
class ModelSpec:
    names: list[str]
    """What clients may put in `model` and /v1/models lists: the id first (never a path), then the
    aliases the user gave (vLLM lists each --served-model-name); unique across the pool."""
    footprint: int = 0
    """Bytes it holds once loaded (the planner's weights + KV budget); counted against the budget."""
    pinned: bool = False
    """Loaded at start and never unloaded."""
    max_model_len: int = 0
    """Its context, for /v1/models before it is loaded; 0 = not known yet."""
    router: RouterConfig | None = None
    """A small model of this pool that answers its single-turn tool calls when sure (hearth.api.tool_router)."""
    kv_bytes: int = 0
    """The KV cache's part of footprint (what --kv-cache-memory-gb and a shorter context lower); 0: not known."""
    file_names: list[str] = field(default_factory=list)
    """Other names `model` may give, never listed (MODEL as given, its file's stem and name): one that
    several models share (the same file served twice) is a 400 naming them, not a guess."""
    facts: FileFacts | None = None
    """Its file's header facts (hearth.api.served.FileFacts), its vision projector's with them, for Ollama's routes
    while it is not loaded and the routes' checks before its load (ModelPool.known)."""
    adapters: dict[str, str] = field(default_factory=dict)
    """vLLM's --lora-modules of this model: NAME (one of `names`) -> the adapter's file as given; /v1/models lists
    each as its own model, `parent` this model's id and `root` the file, as vLLM's."""
    keep_alive: float = math.inf
    """Seconds it stays loaded once idle, each time it loads (a request's keep_alive sets its own until the
    next); inf: until another model needs its room."""
    pinned_why: str = ""
    """Why it is pinned, in the words a refused unload (`ollama stop`) says; "": its pinned flag alone."""
    lora_count: int | None = None
    """Its LoRA adapters (--lora, --lora-scaled, --lora-modules: the first model's; 0 the others'), which a request's
    `lora` ids and POST /lora-adapters are checked against before its load; None: not known."""
    kv_disk: bool | None = None
    """Whether its server has a KV disk tier (--kv-disk-dir), which /slots/save and /slots/restore need: False is
    their 400 before its load; True: none still for a model with recurrent layers (FileFacts.recurrent: ModelPool.known
    says so before its load); None: not known."""

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True, slots=True)
class Known:
    """What a route checks a request against before its model loads (ModelPool.known), under ServedModel's
    names: the loaded model's own figures, else its file header's (ModelSpec.facts). Not known (a pool built
    without facts): 0 for the context, None for the rest, and then not checked; the route checks again after
    the load."""

    name: str
    max_model_len: int = 0
    vocab_size: int | None = None
    embedding_size: int | None = None
    embeds_only: bool | None = None
    pooling: str | None = None
    """ModelConfig.pooling ("rank": a reranker)."""
    lora_count: int | None = None
    """Its LoRA adapters (ModelSpec.lora_count)."""
    vision: Any = ANY_IMAGES
    """How it takes images (hearth.api.media_parts.Vision: how many a request may hold; None: it reads text only):
    what a request's messages are read against before the load (hearth.api.read_before_load). Not known: ANY_IMAGES,
    which takes any image (None says text only here)."""
    kv_disk: bool | None = None
    """Whether it has a KV disk tier (ModelSpec.kv_disk; loaded: its snapshot store)."""

    @classmethod
    def of(cls, name: str, max_model_len: int, model, lora_count: int | None = None,
           kv_disk: bool | None = None) -> Known:
        """model: a ServedModel or FileFacts (the same names), or None."""
        if model is None:
            return cls(name, max_model_len, lora_count=lora_count, kv_disk=kv_disk)
        return cls(name, max_model_len, model.vocab_size, model.embedding_size, model.embeds_only, model.pooling,
                   lora_count, model.vision, kv_disk)


Loader = Callable[[ModelSpec], ServedModel]
"""Loads one model (blocking: it runs in a worker thread) and returns it with its engine not started."""
