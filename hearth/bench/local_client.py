"""The in-process engine, driven through AsyncEngine exactly as `hearth serve` drives it: requests
arrive on an event loop, the engine steps on its own thread, deltas come back per request.

Prompts are rendered and tokenized before the clock starts (and checked against the context then,
so a workload that cannot fit fails before any request), so TTFT here is queueing + prefill + the
first decode step, without the chat template."""

from __future__ import annotations

import time
from collections.abc import Callable

from hearth.bench import BenchError
from hearth.bench.records import RequestResult
from hearth.bench.workloads import BenchRequest, Workload, warmup_request
from hearth.engine.async_engine import AsyncEngine
from hearth.engine.engine_core import EngineCore
from hearth.errors import can_raise_context
from hearth.sampling_params import SamplingParams


class LocalClient:
    mode = "local"

    def __init__(self, core: EngineCore, encode_chat: Callable[[list[dict]], list[int]], max_model_len: int,
                 seed: int = 0, ignore_eos: bool = False):
        self.core, self.encode_chat, self.max_model_len = core, encode_chat, max_model_len
        self.seed, self.ignore_eos = seed, ignore_eos
        self._ids: dict[str, list[int]] = {}
        self._engine: AsyncEngine | None = None
        self._count = 0

    def prepare(self, workload: Workload) -> None:
        """Tokenize every prompt and check it fits with its output; a one-line error if not."""
        requests = [*(req for level in workload.levels for req in level.requests), warmup_request(1)]
        for req in requests:
            if req.prompt_sha not in self._ids:
                self._ids[req.prompt_sha] = self._encode(req, workload.name)

    def _encode(self, req: BenchRequest, workload: str) -> list[int]:
        ids = self.encode_chat(req.messages)
        if len(ids) + req.max_tokens > self.max_model_len:
            remedy = "lower --max-tokens or raise --ctx" if can_raise_context(self.max_model_len, self.core.model_context) \
                else "lower --max-tokens (--ctx is the model's own)"
            raise BenchError(f"{workload} prompt {req.index} is {len(ids):,} tokens + {req.max_tokens:,} to "
                             f"generate, more than the context of {self.max_model_len:,}; {remedy}")
        self.core.check_request(ids, self._params(req))
        return ids

    def _params(self, req: BenchRequest) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=req.max_tokens, seed=self.seed, ignore_eos=self.ignore_eos)

    def spec_counts(self) -> dict | None:
        """The engine's spec-decode counters now; None when it does not speculate."""
        spec = self.core.spec
        if spec is None:
            return None
        s = spec.stats
        return {"drafts": s.num_drafts, "draft_tokens": s.num_draft_tokens, "accepted_tokens": s.num_accepted_tokens,
                "steps": s.num_steps, "steps_drafting": s.num_steps_drafting,
                "steps_batch_off": s.num_steps_batch_off, "paused": s.num_paused,
                "paused_failing": s.num_paused_failing, "paused_not_paying": s.num_paused_not_paying}

    async def start(self, workload: Workload) -> None:
        self.prepare(workload)
        self._engine = AsyncEngine(self.core, max_queued=workload.max_concurrency)
        self._engine.start()

    async def stop(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

    async def send(self, req: BenchRequest, concurrency: int) -> RequestResult:
        ids = self._ids[req.prompt_sha]
        self._count += 1
        result = RequestResult(req.index, concurrency, req.prompt_sha, start=time.perf_counter(),
                               prompt_tokens=len(ids), token_ids=[])
        try:
            stream = self._engine.add_request(ids, self._params(req), f"bench-{self._count}")
            async with stream:
                async for out in stream:
                    if out.new_token_ids:
                        result.add_chunk(time.perf_counter(), out.new_text, out.new_token_ids)
                    elif out.new_text:
                        result.text += out.new_text  # held-back text flushed at the end: no new token
                    if out.finished:
                        result.finish_reason = out.finish_reason
        except Exception as e:  # one failed request is a number in the report, not a crash
            result.error = f"{type(e).__name__}: {e}"
        result.end = time.perf_counter()
        return result
