"""Token-budget continuous batching without prefill/decode modes.

Every step hands out at most `max_num_batched_tokens`: running requests first (a decode is one token,
an unfinished prompt gets its next chunk), then waiting requests in arrival order (one whose prefix
another request is computing waits for it, then hits the cache). A request's only
progress counter is num_computed_tokens, so chunked prefill, decode and recompute after preemption
are one rule."""

from __future__ import annotations

from collections import deque

from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.media_spans import chunk_tokens, encoded_tokens, hit_blocks
from hearth.engine.request import Request, RequestStatus
from hearth.media.inputs import overlapping
from hearth.media.mrope import delta_before
from hearth.runner.messages import RunnerOutput, SampledToken, ScheduledSequence, SchedulerOutput
from hearth.sample.bad_words import history_needed
from hearth.sample.history import context_needed, tail
from hearth.spec_decode.policy import DraftOutcome
from hearth.spec_decode.tree import DraftTree


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 row_regimes: tuple[int, ...] = (), verify_rows: int = 0):
        """row_regimes: step sizes (rows) at which the runner's kernels change how they sum, so a row
        computed in a bigger step may differ in its last bits: drafts never push a step across one
        (greedy with speculation then equals greedy without, token for token). verify_rows: with
        real rows below the first regime, drafts may fill a step up to this many rows instead (the
        runner keeps such a step in the first regime: ModelRunner.verify_rows)."""
        self.kv = kv
        self.row_regimes = row_regimes
        self.verify_rows = verify_rows
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._finished_ids: list[str] = []
        self.num_preemptions = 0
        self._admitted_with_hit: set[str] = set()
        """Requests admitted this step with a prefix-cache hit: their message carries the prefix."""
        self.spec_results: list[DraftOutcome] = []
        """Per sequence with drafts since last taken: how many were verified and accepted."""
        self.encode_ahead = False
        """The runner encodes images beside the steps (ModelRunner.encodes_ahead): each request's images are
        announced when it is first seen, and no chunk reaches an image before the runner reports its rows
        ready; the others' rows go on meanwhile (and the text before the image)."""

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

    def set_drafts(self, req: Request, drafts: DraftTree | list[int] | int) -> None:
        """What the proposer offers req for the next step: a tree, a chain, or (a draft model's)
        number of draft slots. A sealing (quantized) KV format takes only a tree's top-1 chain: its
        drafts sit in the f16 staging of a block being filled, where moving an accepted side
        branch's K/V to its path slots is not implemented (the native quantized kernels have no
        per-row key remap either). So does a model with recurrent layers: their state follows one path
        (the suffix proposer's trees; hearth.llm_recurrent.chains_only turns tree_budget off)."""
        req.spec_token_ids, req.spec_parents, req.num_draft_slots = [], [], 0
        if isinstance(drafts, int):
            req.num_draft_slots = drafts
        elif (isinstance(drafts, DraftTree) and not drafts.is_chain and not self.kv.seals_full_blocks
              and not self.kv.needs_state):
            req.spec_token_ids, req.spec_parents = list(drafts.tokens), list(drafts.parents)
        else:
            req.spec_token_ids = drafts.chain() if isinstance(drafts, DraftTree) else list(drafts)

    def schedule(self) -> SchedulerOutput:
        """Two passes: every request's real tokens (running first, then admissions), then drafts
        only from the token budget, kernel regime and free blocks left over, so drafts never
        preempt a request, delay an admission or take a block another request's token needs."""
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Request, int]] = []  # (request, new tokens)
        self._admitted_with_hit = set()
        ahead = self._announce() if self.encode_ahead else []
        for req in list(self.running):
            if req not in self.running:  # preempted earlier in this loop
                continue
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if req.media:  # a bidirectional span comes whole: it waits for a step with room for it
                n = chunk_tokens(req.media, req.num_computed_tokens, n)
                if self.encode_ahead:  # and an image's rows wait for its encoder
                    n = encoded_tokens(req.media, req.media_ready, req.num_computed_tokens, n)
            n = self.kv.snapshot_chunk(req, req.num_computed_tokens, n)
            if n <= 0 or not self._allocate_or_preempt(req, n):
                continue
            scheduled.append((req, n))
            budget -= n
        budget = self._admit(scheduled, budget)
        with_drafts = self._add_drafts(scheduled, budget)
        seqs = [self._message(r, n, k) for r, n, k in with_drafts]
        finished, self._finished_ids = self._finished_ids, []  # taken last: a failure before keeps them
        loads, saves = self.kv.take_transfers()
        return SchedulerOutput(seqs, finished, loads, saves, media_ahead=ahead)

    def _announce(self) -> list[tuple[str, object]]:
        """The images the runner has not been asked for whose rows a request still has to compute (in arrival
        order: the runner encodes FCFS). A waiting request's images inside its cached prefix are not asked
        for (a hit needs no rows); should the hit shrink before admission, a later step asks."""
        out = []
        for req in (*self.running, *self.waiting):
            todo = [m for m in req.media if m.end > req.num_computed_tokens
                    and m.digest not in req.media_announced and m.digest not in req.media_ready]
            if todo and not req.num_computed_tokens and not (req.needs_prompt_logprobs or req.pools_every_row):
                cached = self.kv.find_cached_prefix(req)
                hit = hit_blocks(req.media, len(cached), self.kv.block_size) * self.kv.block_size
                todo = [m for m in todo if m.end > hit]
            for m in todo:
                req.media_announced.add(m.digest)
                out.append((req.request_id, m))
        return out

    def _admit(self, scheduled: list[tuple[Request, int]], budget: int) -> int:
        """Waiting requests in arrival order while the budget, max_num_seqs and free blocks allow;
        one whose next uncached block another request is computing steps aside (a step or a few
        later that block is a cache hit). A request whose bidirectional span does not fit the budget
        left stops admission (as vLLM's FCFS waiting loop breaks): later arrivals taking the budget
        each step would starve it. Returns the budget left."""
        computing = self._blocks_being_computed() if self.waiting else set()
        i = 0
        while i < len(self.waiting) and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[i]
            # cached positions would have no logits (as vLLM) nor hidden states: none taken
            fresh = req.needs_prompt_logprobs or req.pools_every_row
            cached = [] if fresh else self.kv.find_cached_prefix(req)
            if req.media:  # a hit ends outside every bidirectional span (and on a held state snapshot)
                cached = cached[:hit_blocks(req.media, len(cached), self.kv.block_size)]
                cached = cached[:self.kv.restorable(req, len(cached))]
            if not fresh and self._next_block_in(req, len(cached), computing):
                i += 1
                continue
            loads = [] if fresh else self.kv.find_disk_prefix(req, len(cached))
            if req.media and loads:
                loads = loads[:hit_blocks(req.media, len(cached) + len(loads), self.kv.block_size) - len(cached)]
            hit = (len(cached) + len(loads)) * self.kv.block_size
            n = self.kv.snapshot_chunk(req, hit, min(req.num_tokens - hit, budget))
            if req.media and (n := chunk_tokens(req.media, hit, n)) == 0:  # its span waits for a roomier step
                break
            if req.media and self.encode_ahead and (n := encoded_tokens(req.media, req.media_ready, hit, n)) == 0:
                i += 1  # its image is being encoded: the others go on
                continue
            if not self.kv.allocate_slots(req, n, cached, loads):
                break
            if req.status is RequestStatus.WAITING:
                req.num_cached_tokens = req.num_computed_tokens
            if req.num_computed_tokens:
                self._admitted_with_hit.add(req.request_id)
            del self.waiting[i]
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            scheduled.append((req, n))
            budget -= n
            computing.update(self.kv.pending_hashes(req))
        return budget

    def _blocks_being_computed(self) -> set[bytes]:
        """Hashes of the full blocks of known tokens running requests have still to compute."""
        return {h for req in self.running for h in self.kv.pending_hashes(req)}

    def _next_block_in(self, req: Request, num_cached: int, computing: set[bytes]) -> bool:
        """Whether the first block of req's prompt past its cached prefix is one another request is
        computing now: admitted, req would compute the same K/V again (two conversations opening
        with one system prompt, arrived together); a step or a few later it is a cache hit. SGLang
        defers such requests within a batch too (its in-batch prefix check)."""
        if not computing:
            return False
        hashes = self.kv.block_hashes(req, (req.num_tokens - 1) // self.kv.block_size)
        if self.kv.needs_state:  # a recurrent model's hit needs a snapshot: one being computed further on
            return any(h in computing for h in hashes[num_cached:])
        return num_cached < len(hashes) and hashes[num_cached] in computing

    def idle_output(self) -> SchedulerOutput | None:
        """With nothing to run: the message with the requests that ended since the last step (the
        runner drops their state now, not when the next request comes) and the never-used blocks one
        full step would take next; None when there are neither."""
        blocks = self.kv.pool.untouched(self.kv.blocks_needed(self.max_num_batched_tokens))
        finished, self._finished_ids = self._finished_ids, []
        return SchedulerOutput([], finished, prefault_blocks=blocks) if blocks or finished else None

    def _add_drafts(self, scheduled: list[tuple[Request, int]], budget: int) -> list[tuple[Request, int, int]]:
        """The second pass: drafts for the scheduled requests, in order, within the budget left, below
        the first kernel regime boundary above the step's real rows (or to verify_rows), and in KV slots that are free
        now (the request's last block, then free blocks): never by preempting anyone."""
        if not any(r.spec_token_ids or r.num_draft_slots for r, _ in scheduled):  # nothing proposed: no pass
            return [(req, n, 0) for req, n in scheduled]
        plain = sum(n for _, n in scheduled)
        # a draft's row is the one the next step would decode without drafts: a step whose prompt chunks
        # put it in another regime than the decode rows alone (16 rows, 3 of them decodes) sums it unlike that
        decoding = sum(1 for r, n in scheduled if r.num_computed_tokens + n == r.num_tokens)
        if self._regime(plain) != self._regime(decoding):
            return [(req, n, 0) for req, n in scheduled]
        cap = min((b - 1 for b in self.row_regimes if b > plain), default=plain + budget)
        if self.verify_rows and self.row_regimes and plain < self.row_regimes[0]:
            cap = self.verify_rows
        room = min(budget, cap - plain)
        out = []
        for req, n in scheduled:
            k = self._num_drafts(req, n, room)
            k = min(k, self.kv.free_slots(req, n))
            if k and not self.kv.allocate_slots(req, n + k):
                raise RuntimeError(f"{k} draft slots counted free for {req.request_id} could not be allocated")
            room -= k
            out.append((req, n, k))
        return out

    def _regime(self, rows: int) -> int:
        """Which of the kernels' row regimes a step of `rows` rows runs in (0: below the first boundary)."""
        return sum(rows >= b for b in self.row_regimes)

    def _num_drafts(self, req: Request, n: int, room: int) -> int:
        """How many of req's drafts fit this step: within room (what is left of the step's tokens),
        max_tokens and max_len (the step may append all of them and a bonus token) and, with a
        sealing KV format, before the next block's last slot. Only a request decoding its one next
        token verifies drafts."""
        want = len(req.spec_token_ids) or req.num_draft_slots
        # mirostat: a verify row's state would need each draft's distribution (hearth.sample.mirostat)
        if n != 1 or not want or room <= 0 or req.params.mirostat:
            return 0
        left = req.max_len - req.num_tokens - 1
        if req.params.max_tokens is not None:
            left = min(left, req.params.max_tokens - len(req.output_token_ids) - 1)
        return max(0, self.kv.max_drafts(req, min(want, room, left)))

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
        req.spec_token_ids, req.spec_parents, req.num_draft_slots = [], [], 0  # proposed for the step it lost
        req.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(req)

    def _message(self, req: Request, n: int, k: int) -> ScheduledSequence:
        start = req.num_computed_tokens
        restore, req.state_restore = req.state_restore, -1  # once: its first step after a hit
        p = req.params
        # the token history travels only as far back as a penalty, DRY or a bad word reads it: a copy per
        # step is O(length)
        prompt, out = tail(req.prompt_token_ids, req.output_token_ids, context_needed(p),
                           history_needed(p.bad_words_token_ids))
        return ScheduledSequence(
            request_id=req.request_id,
            token_ids=req.token_slice(start, n),
            start_pos=start,
            block_ids=list(req.block_ids),
            sample=start + n == req.num_tokens,
            params=p,
            output_token_ids=list(out),
            prompt_token_ids=prompt,
            banned_token_ids=self._banned(req),
            banned_rows=p.min_tokens - len(req.output_token_ids),
            spec_token_ids=req.spec_token_ids[:k],
            spec_parents=req.spec_parents[:k],  # a tree's first k nodes are a tree
            prefix_token_ids=req.token_slice(0, start) if req.request_id in self._admitted_with_hit else [],
            num_draft_slots=0 if req.spec_token_ids else k,
            prompt_targets=req.prompt_token_ids[start + 1:start + n + 1] if req.needs_prompt_logprobs else [],
            media=overlapping(req.media, start, start + n) if req.media else [],
            rope_delta=delta_before(req.media, start) if req.media else 0,
            state_slot=req.state_slot,
            state_restore=restore,
            state_snapshot=self.kv.snapshot_after(req, start, n) if req.state_slot >= 0 else -1,
        )

    @staticmethod
    def _banned(req: Request) -> list[int]:
        """min_tokens, as vLLM: end-of-generation and stop token ids cannot be sampled before it."""
        p = req.params
        if len(req.output_token_ids) >= p.min_tokens:
            return []
        return sorted(set(p.stop_token_ids) | (set() if p.ignore_eos else req.eos_ids))

    def step_failed(self, out: SchedulerOutput) -> None:
        """The runner raised on `out`: the full blocks it was to hand to the disk tier hold committed
        K/V all the same, so a later step saves them (KVCacheManager.unsaved: once)."""
        if out.kv_saves:
            self.kv.unsaved(out.kv_saves)
        self.kv.snapshots.cancel()  # saves it may not have made: their slots go back empty
        live = {r.request_id: r for r in (*self.running, *self.waiting)}
        for rid, m in out.media_ahead:  # the runner may not have them: announced again next step
            if rid in live:
                live[rid].media_announced.discard(m.digest)

    def update(self, out: SchedulerOutput, result: RunnerOutput) -> list[tuple[Request, list[SampledToken]]]:
        """Advance every scheduled request; returns those that got new tokens (some now finished)."""
        if out.kv_saves:
            self.kv.saved(out.kv_saves, result.kv_saved)
        self.kv.snapshots.written(result.snapshots)
        if result.media_ready:
            live = {r.request_id: r for r in (*self.running, *self.waiting)}
            for rid, digests in result.media_ready.items():
                if rid in live:
                    live[rid].media_ready.update(digests)
        running = {r.request_id: r for r in self.running}
        changed = []
        for seq in out.seqs:
            req = running.get(seq.request_id)
            if req is None:  # aborted while the step ran
                continue
            req.num_computed_tokens += len(seq.token_ids)
            if seq.prompt_targets:
                req.add_prompt_logprobs(seq.start_pos, result.prompt_logprobs[seq.request_id],
                                        result.prompt_ranks[seq.request_id])
            if seq.request_id in result.pooled:
                req.add_pooled(seq.start_pos, result.pooled[seq.request_id])
            sampled = result.sampled.get(seq.request_id)
            if sampled is None:
                self.kv.cache_full_blocks(req)
                continue
            changed.append((req, self._commit(req, seq, result.accepted.get(seq.request_id, []), sampled,
                                              result.drafted)))
            if req.status.finished:
                self.running.remove(req)
                self._release(req)
        return changed

    def _commit(self, req: Request, seq: ScheduledSequence, accepted: list[SampledToken],
                sampled: SampledToken, drafted_by_runner: dict) -> list[SampledToken]:
        """Append the accepted drafts and the bonus token one by one (a stop, EOS, max_tokens or
        max_len ends the run there, dropping the rest), roll the K/V of rejected drafts back and
        register the blocks now full of committed tokens. Returns the tokens appended."""
        drafted = seq.num_drafts
        accepted = accepted[:drafted]
        req.spec_token_ids, req.spec_parents, req.num_draft_slots = [], [], 0
        if drafted:
            ids = [t.token_id for t in accepted]
            if req.request_id in drafted_by_runner:  # what the runner's draft model wrote into the slots
                self.spec_results.append(DraftOutcome.of(req.request_id, *drafted_by_runner[req.request_id], ids))
            elif seq.spec_token_ids:
                self.spec_results.append(DraftOutcome.of(req.request_id, seq.spec_token_ids, seq.spec_parents, ids))
            else:  # slots, as a chain
                self.spec_results.append(DraftOutcome(req.request_id, drafted, len(ids), drafted))
            outcome = self.spec_results[-1]
            req.drafts = (req.drafts[0] + outcome.drafted, req.drafts[1] + outcome.accepted)
        done = []
        for t in accepted + [sampled]:
            req.append_token(t.token_id)
            done.append(t)
            if req.status.finished:
                break
        # valid K/V: the next token's and the accepted drafts' (not the bonus token's: it is new)
        req.num_computed_tokens = min(req.num_computed_tokens + len(accepted), req.num_tokens)
        self.kv.trim(req)  # no-op without drafts
        self.kv.cache_full_blocks(req)
        return done

    def _release(self, req: Request) -> None:
        self.kv.free(req)
        self._finished_ids.append(req.request_id)
