"""The engine of a model that only embeds (an encoder: hearth.models.encoder): EngineCore's surface
(add_request / step / abort, what AsyncEngine, LLM and the API drive) over a plain queue, with no
scheduler, paged KV cache or sampling, since those are for causal decoding. A step embeds up to
max_num_seqs queued requests in one runner call; a request that asks for text (no pooling) is refused
with one line, as llama-server refuses completions from an --embedding model. A reranker's (pooling
"rank") requests are query-document pairs scored by its classification head, never embeddings; an
embedding model takes no pair."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hearth.engine.engine_core import InvalidPromptError
from hearth.engine.pairs import a_reranker, not_a_reranker
from hearth.errors import HearthError, PromptTooLongError
from hearth.outputs import EngineOutput
from hearth.sampling_params import SamplingParams


class EmbeddingOnlyError(HearthError):
    """A request for text (or a KV export) from a model that only embeds."""


def embedding_only(arch: str, reranker: bool = False) -> str:
    if reranker:
        return a_reranker(f"this model ({arch})")
    return (f"this model ({arch}) is an embedding model: it serves embeddings (POST /v1/embeddings, /api/embed, "
            "LLM.embed), not text generation")


@dataclass(slots=True)
class EncoderQueue:
    """What AsyncEngine and LLM read of a scheduler: the slots, the waiting and the running (none
    between steps), no KV cache."""

    max_num_seqs: int
    waiting: list[tuple[str, list[int], SamplingParams]] = field(default_factory=list)
    """(request id, prompt ids, params), in arrival order."""
    running: tuple = ()
    kv: None = None


class EncoderCore:
    spec = None
    """No speculative decoding (EngineCore's proposer)."""

    def __init__(self, runner, tokenizer, arch: str, max_model_len: int, vocab_size: int, max_num_seqs: int,
                 model_context: int | None = None, reranker: bool = False):
        """runner: embed(prompts, poolings, pair_starts) -> one normalized vector each, or [logit] for a
        reranker's (hearth.runner.encoder_runner)."""
        self.runner, self.tokenizer, self.arch, self.reranker = runner, tokenizer, arch, reranker
        self.scheduler = EncoderQueue(max_num_seqs)
        self.max_model_len, self.vocab_size, self.model_context = max_model_len, vocab_size, model_context
        self.stalled = False
        self.executing: list[str] | None = None
        self.last_sequence: list[int] = []
        self._ids = itertools.count()

    def check_prompt(self, prompt_token_ids: list[int]) -> None:
        """An encoder computes no token past the prompt: the whole context is the prompt's."""
        n = len(prompt_token_ids)
        if n == 0:
            raise InvalidPromptError("prompt is empty: give at least one token")
        if n > self.max_model_len:
            raise PromptTooLongError(n, self.max_model_len, self.model_context)
        if bad := [t for t in prompt_token_ids if not 0 <= t < self.vocab_size]:
            raise InvalidPromptError(f"token id {bad[0]} is outside the vocabulary (0..{self.vocab_size - 1})")

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams, media=()) -> None:
        if media:
            raise InvalidPromptError(f"this model ({self.arch}) embeds text only: it reads no images")
        if params.pooling is None or self.reranker and params.pooling != "rank":  # text, or a reranker's embedding
            raise EmbeddingOnlyError(embedding_only(self.arch, self.reranker))
        if params.pooling == "rank" and not self.reranker:
            raise EmbeddingOnlyError(not_a_reranker(f"this model ({self.arch})", "an embedding model"))
        self.check_prompt(prompt_token_ids)
        if params.pair_start is not None and params.pair_start >= len(prompt_token_ids):
            raise InvalidPromptError(f"pair_start {params.pair_start} is past the prompt's {len(prompt_token_ids)} "
                                     "tokens: the second text is empty")

    def add_request(self, prompt_token_ids: list[int], params: SamplingParams,
                    request_id: str | None = None, checked: bool = False, media=()) -> str:
        if not checked or media:
            self.check_request(prompt_token_ids, params, media)
        rid = request_id if request_id is not None else str(next(self._ids))
        if any(r == rid for r, _, _ in self.scheduler.waiting):
            raise ValueError(f"request id {rid!r} is already in the engine")
        self.scheduler.waiting.append((rid, list(prompt_token_ids), params))
        return rid

    def abort(self, request_id: str) -> None:
        self.scheduler.waiting = [r for r in self.scheduler.waiting if r[0] != request_id]

    def has_unfinished(self) -> bool:
        return bool(self.scheduler.waiting)

    def step(self) -> list[EngineOutput]:
        q = self.scheduler
        taken, q.waiting = q.waiting[:q.max_num_seqs], q.waiting[q.max_num_seqs:]
        self.executing = [rid for rid, _, _ in taken]
        vectors = self.runner.embed([ids for _, ids, _ in taken], [p.pooling for _, _, p in taken],
                                    [p.pair_start for _, _, p in taken])
        self.executing = None
        if taken:
            self.last_sequence = taken[-1][1]
        return [EngineOutput(rid, [], "", finished=True, finish_reason="length", num_prompt_tokens=len(ids),
                             embedding=v) for (rid, ids, _), v in zip(taken, vectors)]

    def failed_step(self) -> list[str] | None:
        """After step() raised: the requests the runner call held (already out of the queue)."""
        failed, self.executing = self.executing, None
        return failed

    def export_prefix(self, token_ids: list[int]) -> list[bytes]:
        raise EmbeddingOnlyError(f"{embedding_only(self.arch, self.reranker)}; it keeps no KV cache to save")

    def close(self) -> None:
        pass
