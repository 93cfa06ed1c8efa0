"""The model a server serves: its names, tokenizer, chat template and the AsyncEngine that runs it.

Built from an LLM by `hearth serve`; tests build one around a fake engine. Everything the routes
need from the model goes through here, so the routes never touch torch."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from hearth.api.chat_template import RESERVED_VARS, ChatTemplate
from hearth.api.media_prompt import encode_with_images
from hearth.api.model_holds import Holds
from hearth.config import MAX_LOGPROBS
from hearth.loader.file_type import quantization
from hearth.tool_parsers import (Marks, detect_channels, detect_format, detect_reasoning, prompt_opens_reasoning,
                                 reasoning_marks, supports_tools)


@dataclass
class ServedModel:
    names: list[str]
    """What clients may put in `model` and /v1/models lists; the first is its id."""
    tokenizer: Any
    """encode(text, add_special_tokens=, parse_special=), decode(ids), bos_token, add_bos."""
    chat_template: ChatTemplate
    engine: Any
    """An AsyncEngine, a cluster's ClusterEngine (or a fake with add_request/stats/start/shutdown and
    total_slots/speculative, which /props reads from it: each figure is the engine's own, never a copy)."""
    max_model_len: int
    vocab_size: int | None = None
    model_context: int | None = None
    """The model's own context (max_model_len is at most it; None: unknown): whether to say "raise it"."""
    snapshots: Any = None
    """A hearth.kvstore.snapshot.SnapshotStore when the server has a KV disk tier (/slots)."""
    created: int = field(default_factory=lambda: int(time.time()))
    owner: Any = None
    """What must live as long as it is served: the LLM (whose collection closes its KV disk tier)."""
    max_logprobs: int = MAX_LOGPROBS
    """The engine's EngineConfig.max_logprobs (-1: no cap), which the routes name by their wire's field."""
    file_names: list[str] = field(default_factory=list)
    """More names `model` may give, never listed (hearth.api.model_spec.ModelSpec.file_names)."""
    path: str = ""
    """The model's file (/props' model_path; "": not known)."""
    pooling: str = "last"
    """How /v1/embeddings pools its prompts (ModelConfig.pooling)."""
    embedding_size: int | None = None
    """Its embeddings' dimensions (the hidden size; None: not known)."""
    embeds_only: bool = False
    """An encoder (bert, nomic-bert): embeddings only, each input the whole context's (LLM.embeds_only)."""
    metadata: dict = field(default_factory=dict)
    """The GGUF's metadata, small values only (general.*, {arch}.*): Ollama's /api/show `model_info`."""
    parameter_count: int = 0
    """Weights in the file (0: not known)."""
    quantization: str = ""
    """The file's type as llama.cpp names it (Q4_K_M, Q4_1, ...; without general.file_type the type most of
    its weight matrices have; "": not known): Ollama's quantization_level."""
    file_size: int = 0
    """The model's bytes, every part of a split GGUF's (0: not known; then `path`'s): Ollama's `size`."""
    lora: Any = None
    """Its LoRA adapters and their global scales (hearth.engine.lora_adapters.LoraAdapters; None: none):
    GET/POST /lora-adapters, a request's `lora`."""
    lora_names: dict[str, int] = field(default_factory=dict)
    """vLLM's --lora-modules: a request whose `model` is one of these names runs that adapter at scale 1."""
    vision: Any = None
    """How it takes images (hearth.api.media_parts.Vision: the --mmproj file's config and preparer); None:
    it reads text only, and an image part is a 400 naming --mmproj."""
    vision_stats: Any = None
    """Its image counters (hearth.media.vision_stats.VisionStats: /metrics); None: none kept."""
    holds: Holds = field(default_factory=Holds)
    """Answers under way that may queue more engine requests (a guarded one between attempts): it stays loaded."""

    async def load_images(self, images) -> None:
        """A request's images fetched and prepared (RequestImages.load, in threads) with this model held: the
        request chose it and queues its engine requests only after (hearth.api.model_holds)."""
        with self.holds.held():
            await images.load()

    @classmethod
    def from_llm(cls, llm, names: list[str], engine, file_names: list[str] = (),
                 lora_names: dict[str, int] | None = None, vision=None) -> ServedModel:
        """vision: a hearth.api.media_parts.Vision when served with --mmproj."""
        return cls(names, llm.tokenizer, llm.chat_template, engine, llm.max_model_len,
                   llm.model_config.vocab_size, llm.engine.model_context, llm.snapshots, owner=llm,
                   max_logprobs=llm.config.max_logprobs, file_names=list(file_names), path=str(llm.path),
                   pooling=llm.model_config.pooling, embedding_size=llm.model_config.hidden_size,
                   lora=llm.lora, lora_names=dict(lora_names or {}), embeds_only=llm.embeds_only,
                   vision=vision, **gguf_facts(llm.gguf))

    @property
    def name(self) -> str:
        return self.names[0]

    @property
    def total_slots(self) -> int:
        """Sequences the engine decodes together (EngineConfig.max_num_seqs; a cluster's: its replicas'
        sum): llama-server's total_slots."""
        return self.engine.total_slots

    @property
    def speculative(self) -> bool:
        """Speculative decoding runs for it (/props' default_generation_settings.speculative)."""
        return self.engine.speculative

    def answer_name(self, requested: str | None) -> str:
        """The `model` a response names: a --lora-modules name as sent (vLLM echoes the adapter's), else the id
        (an alias or file name answers as the id)."""
        return requested if requested in self.lora_names else self.name

    @property
    def template_source(self) -> str:
        return self.chat_template.source

    @cached_property
    def template_supports_tools(self) -> bool:
        return not self.chat_template.is_fallback and supports_tools(self.template_source)

    @cached_property
    def tool_format(self) -> str | None:
        """The format the template teaches, when it takes tools; None: we prompt with hermes."""
        return detect_format(self.template_source) if self.template_supports_tools else None

    @cached_property
    def knows_reasoning(self) -> bool:
        return detect_reasoning(self.template_source)[0]

    @cached_property
    def reasoning_marks(self) -> Marks | None:
        return reasoning_marks(self.template_source)

    @cached_property
    def channels(self) -> str | None:
        """A format that parses the model's whole output, with or without tools (harmony: gpt-oss's
        analysis and final channels); None: `<think>` reasoning, if any, and the tool format."""
        return detect_channels(self.template_source)

    def render_chat(self, messages: list[dict], tools: list[dict] | None = None,
                    add_generation_prompt: bool = True, continue_final: bool = False,
                    template_kwargs: dict | None = None) -> str:
        """`template_kwargs`: extra template variables (chat_template_kwargs: enable_thinking, ...)."""
        kwargs = {k: v for k, v in (template_kwargs or {}).items() if k not in RESERVED_VARS}
        if not continue_final:
            return self.chat_template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                             **kwargs)
        # vLLM's continue_final_message: render the whole chat, cut right after the last message's text
        text = self.chat_template.render(messages, tools=tools, add_generation_prompt=False, **kwargs)
        final = messages[-1].get("content") or ""
        at = text.rfind(final) if final else -1
        return text[:at + len(final)] if at >= 0 else text

    def encode_chat_text(self, text: str, images=None, messages: list[dict] = ()) -> list[int]:
        """Prompt ids with BOS exactly once, whether or not the template wrote it (as LLM.encode_chat).
        images: the request's (hearth.api.media_parts.RequestImages), `text` rendered from `messages`:
        a PromptIds with the images' rows and MediaInputs (hearth.api.media_prompt)."""
        if images:
            return encode_with_images(self, text, images, messages)
        tok = self.tokenizer
        bos = getattr(tok, "bos_token", None)
        if getattr(tok, "add_bos", False) and bos and text.startswith(bos):
            text = text[len(bos):]
        return tok.encode(text, add_special_tokens=True, parse_special=True)

    def encode_text(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        """parse_special False: special tokens' texts stay characters (code, as fill-in-the-middle reads it)."""
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens, parse_special=parse_special)

    def starts_in_reasoning(self, prompt_text: str) -> bool:
        return self.knows_reasoning and prompt_opens_reasoning(prompt_text)


_LISTED = 64
"""Longest metadata list kept (a vocabulary's arrays are not metadata a client reads)."""


def gguf_facts(gguf) -> dict:
    """ServedModel's metadata, parameter_count and quantization from a GGUFFile (its tensors' shapes
    and types: nothing is read from the weights)."""
    def small(v) -> bool:
        plain = (str, int, float, bool)
        listed = isinstance(v, list) and len(v) <= _LISTED
        return isinstance(v, plain) or listed and all(isinstance(x, plain) for x in v)

    metadata = {k: v for k, v in gguf.metadata.items() if k != "tokenizer.chat_template" and small(v)}
    count = sum(math.prod(t.shape) for t in gguf.tensors.values())
    return {"metadata": metadata, "parameter_count": count, "file_size": gguf.file_size,
            "quantization": quantization(gguf)}


@dataclass(frozen=True)
class FileFacts:
    """What Ollama's /api/tags and /api/show say of a model before it loads, from its file's header alone
    (the fields a ServedModel has under the same names): built with the pool, where its footprint is."""

    path: str
    metadata: dict
    parameter_count: int
    quantization: str
    file_size: int
    template_source: str
    embeds_only: bool
    pooling: str
    """ModelConfig.pooling ("rank": a reranker)."""
    vocab_size: int | None = None
    embedding_size: int | None = None
    """ModelConfig's vocab_size and hidden_size, as ServedModel's (None: not known): what a request's token ids
    and `dimensions` are checked against before the load (hearth.api.model_pool.ModelPool.known)."""
    vision: Any = None
    """How it will take images, as ServedModel.vision (hearth.api.media_parts.Vision: its mmproj's header config, the
    server's --limit-mm-per-prompt and fetch policy; `hearth serve` adds it to the header's facts); None: it reads
    text only. A request's images are checked against it before the load (ModelPool.known)."""
    recurrent: bool = False
    """Its layers keep a recurrent state (ModelConfig.recurrent_layers: qwen35's Gated DeltaNet), so it runs without
    the server's KV disk tier (hearth.llm_recurrent): its slots are refused before its load (ModelPool.known)."""
    tokenizer = None  # not built before the load: FIM ("insert") is said once loaded

    @property
    def knows_reasoning(self) -> bool:
        return detect_reasoning(self.template_source)[0]

    @property
    def channels(self) -> str | None:
        return detect_channels(self.template_source)


def file_facts(gguf, embeds_only: bool, config, vision=None) -> FileFacts:
    """FileFacts of an open GGUFFile (its header: nothing is read from the weights) and its ModelConfig; vision:
    FileFacts.vision."""
    return FileFacts(str(gguf.path), template_source=str(gguf.metadata.get("tokenizer.chat_template") or ""),
                     embeds_only=embeds_only, pooling=config.pooling, vocab_size=config.vocab_size,
                     embedding_size=config.hidden_size, vision=vision, recurrent=any(config.recurrent_layers),
                     **gguf_facts(gguf))
