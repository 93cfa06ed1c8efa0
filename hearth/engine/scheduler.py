"""Token-budget continuous batching without prefill/decode modes.

Every step hands out at most `max_num_batched_tokens`: running requests first (a decode is one token,
an unfinished prompt gets its next chunk), then waiting requests in arrival order. A request's only
progress counter is num_computed_tokens, so chunked prefill, decode and recompute after preemption
are one rule."""

from __future__ import annotations

from collections import deque

from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.request import Request, RequestStatus
from hearth.runner.messages import RunnerOutput, SampledToken, ScheduledSequence, SchedulerOutput


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._finished_ids: list[str] = []
        self.num_preemptions = 0

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        """Requests to run, or full blocks still to hand to the disk tier (one more step reads them)."""
        return bool(self.waiting or self.running or self.kv.pending_saves)

    def finish_request(self, request_id: str, status: RequestStatus = RequestStatus.FINISHED_ABORTED,
                       reason: int | str | None = None) -> Request | None:
        """End a request now (abort, or a stop string found by the detokenizer) and free its blocks."""
        for queue in (self.running, self.waiting):
            for req in queue:
                if req.request_id == request_id:
                    queue.remove(req)
                    req.finish(status, reason)
                    self._release(req)
                    return req
        return None

    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []
        for req in list(self.running):
            if req not in self.running:  # preempted earlier in this loop
                continue
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if n <= 0:
                continue
            if not self._allocate_or_preempt(req, n):
                continue
            scheduled.append((req, n))
            budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            cached = self.kv.find_cached_prefix(req)
            loads = self.kv.find_disk_prefix(req, len(cached))
            n = min(req.num_tokens - (len(cached) + len(loads)) * self.kv.block_size, budget)
            if not self.kv.allocate_slots(req, n, cached, loads):
                break
            if req.status is RequestStatus.WAITING:
                req.num_cached_tokens = req.num_computed_tokens
            self.waiting.popleft()
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            scheduled.append((req, n))
            budget -= n
        finished, self._finished_ids = self._finished_ids, []
        loads, saves = self.kv.take_transfers()
        return SchedulerOutput([self._message(r, n) for r, n in scheduled], finished, loads, saves)

    def idle_output(self) -> SchedulerOutput | None:
        """With nothing to run: the message naming the never-used blocks one full step would take
        next (None when there are none left)."""
        blocks = self.kv.pool.untouched(self.kv.blocks_needed(self.max_num_batched_tokens))
        return SchedulerOutput([], prefault_blocks=blocks) if blocks else None

    def _allocate_or_preempt(self, req: Request, n: int) -> bool:
        """Make room for req by preempting the newest running requests (recomputed later)."""
        while not self.kv.allocate_slots(req, n):
            victim = self.running.pop()
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request) -> None:
        self.num_preemptions += 1
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(req)

    def _message(self, req: Request, n: int) -> ScheduledSequence:
        start = req.num_computed_tokens
        p = req.params
        # the token history travels only when a penalty reads it: a copy per step is O(length)
        penalties = p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty
        return ScheduledSequence(
            request_id=req.request_id,
            token_ids=req.token_slice(start, n),
            start_pos=start,
            block_ids=list(req.block_ids),
            sample=start + n == req.num_tokens,
            params=p,
            output_token_ids=list(req.output_token_ids) if penalties else [],
            prompt_token_ids=req.prompt_token_ids if penalties else [],
            banned_token_ids=self._banned(req),
        )

    @staticmethod
    def _banned(req: Request) -> list[int]:
        """min_tokens, as vLLM: end-of-generation and stop token ids cannot be sampled before it."""
        p = req.params
        if len(req.output_token_ids) >= p.min_tokens:
            return []
        return sorted(set(p.stop_token_ids) | (set() if p.ignore_eos else req.eos_ids))

    def update(self, out: SchedulerOutput, result: RunnerOutput) -> list[tuple[Request, SampledToken]]:
        """Advance every scheduled request; returns those that got a new token (some now finished)."""
        if out.kv_saves:
            self.kv.saved(out.kv_saves, result.kv_saved)
        running = {r.request_id: r for r in self.running}
        changed = []
        for seq in out.seqs:
            req = running.get(seq.request_id)
            if req is None:  # aborted while the step ran
                continue
            req.num_computed_tokens += len(seq.token_ids)
            self.kv.cache_full_blocks(req)
            sampled = result.sampled.get(seq.request_id)
            if sampled is None:
                continue
            req.append_token(sampled.token_id)
            changed.append((req, sampled))
            if req.status.finished:
                self.running.remove(req)
                self._release(req)
        return changed

    def _release(self, req: Request) -> None:
        self.kv.free(req)
        self._finished_ids.append(req.request_id)
