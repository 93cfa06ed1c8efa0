"""The body of one replica actor: a whole hearth engine (LLM + AsyncEngine) in its own Ray worker
process, with its own model, KV cache and threads. The front end calls generate() as a Ray
streaming generator and reads EngineOutput deltas as they come.

Nothing here raises across Ray: a failed load is kept and reported by ready(), and a request's error
is yielded as a ReplicaError record, so the front end re-raises the engine's own error class (an
exception pickled across processes may not rebuild: PromptTooLongError takes two numbers)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from hearth.config import MAX_LOGPROBS
from hearth.engine.async_engine import AsyncEngine, EngineFullError, EngineStats, EngineStepError
from hearth.errors import HearthError
from hearth.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """What the front end needs from a loaded replica: limits to check requests against, and the
    prefix cache's root hash and block size, so the router computes the engine's own block keys."""
    max_model_len: int
    vocab_size: int
    model_context: int | None
    """The model's own context (max_model_len is at most it): whether a prompt's error says to raise it."""
    block_size: int
    cache_root: bytes
    capacity: int
    """Requests it takes at once: max_num_seqs + max_queued."""
    pid: int
    host: str
    max_logprobs: int = MAX_LOGPROBS
    """EngineConfig.max_logprobs (-1: no cap): the front end refuses past it, as the replica would."""
    max_num_seqs: int = 1
    """Sequences it decodes together (EngineConfig.max_num_seqs): /props' total_slots sums them."""
    speculative: bool = False
    """Speculative decoding runs in it (/props' default_generation_settings.speculative)."""


@dataclass(frozen=True, slots=True)
class LoadFailure:
    message: str


@dataclass(frozen=True, slots=True)
class ReplicaError:
    """A request's error, by kind; as_error() gives the engine's class back."""
    kind: str
    message: str

    KINDS = {"full": EngineFullError, "step": EngineStepError, "request": HearthError}

    @classmethod
    def of(cls, e: BaseException) -> ReplicaError:
        kind = next((k for k, c in cls.KINDS.items() if isinstance(e, c)), "step")
        return cls(kind, str(e) if isinstance(e, HearthError) else f"{type(e).__name__}: {e}")

    def as_error(self) -> HearthError:
        return self.KINDS[self.kind](self.message)


class Replica:
    """Wrapped with ray.remote by launch.py. `engine_args` are LLM's keyword arguments; `name` (r0,
    r1, ...) is kept across restarts, and names the replica's own folder in a shared disk tier."""

    def __init__(self, model: str, engine_args: dict, max_queued: int, name: str = ""):
        self.engine = None
        try:
            from hearth.engine.encoder_core import embedding_only
            from hearth.llm import LLM

            if engine_args.get("kv_disk_dir"):
                engine_args = {**engine_args, "kv_disk_owner": name}
            self.llm = llm = LLM(model, progress=False, **engine_args)  # held: its finalizer closes the disk tier
            if llm.embeds_only or llm.reranker:  # the front end checks and routes text decoders' requests
                raise HearthError(f"{embedding_only(llm.model_config.arch, llm.reranker)}; a cluster (--replicas) "
                                  "runs text decoders only: serve it in one process")
            llm.runner.grammar.prepare_in_background()
            self.engine = AsyncEngine(llm.engine, max_queued=max_queued)
            self.engine.start()
            kv = llm.engine.scheduler.kv
            self.result = ReplicaInfo(llm.max_model_len, llm.model_config.vocab_size, llm.engine.model_context,
                                      kv.block_size, kv.cache_key,
                                      self.engine.max_in_flight, os.getpid(), socket.gethostname(),
                                      llm.config.max_logprobs, self.engine.total_slots, self.engine.speculative)
        except Exception as e:  # reported by ready(): the front end refuses to start half-ready
            self.result = LoadFailure(str(e) if isinstance(e, HearthError) else f"{type(e).__name__}: {e}")

    def ready(self) -> ReplicaInfo | LoadFailure:
        return self.result

    def stats(self) -> EngineStats:
        if self.engine is None:
            raise RuntimeError(self.result.message)
        return self.engine.stats()

    async def generate(self, prompt_token_ids: list[int], params: SamplingParams, request_id: str):
        """EngineOutput deltas, then the stream ends; a cancelled call (the client went away)
        leaves the `async with` and aborts the request, freeing its KV blocks."""
        try:
            stream = self.engine.add_request(prompt_token_ids, params, request_id=request_id)
        except Exception as e:
            yield ReplicaError.of(e)
            return
        async with stream:
            try:
                async for out in stream:
                    yield out
            except Exception as e:
                yield ReplicaError.of(e)
