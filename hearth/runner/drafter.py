"""The draft model's runner half (speculative_config method "draft"): a small model with the
target's vocabulary writes the drafts into the slots the scheduler gave (num_draft_slots).

Its K/V live in their own tensors with the target's num_blocks and block_size, indexed by the same
block tables: one block id holds the target's and the draft's K/V of the same positions, so the
scheduler's block accounting (allocation, rollback, preemption, prefix caching) covers both.

The draft computes a sequence's tokens only in a step where it drafts for it: a sequence without
slots (a prefill chunk, a request the policy paused, a step too big to draft in) only queues its
tokens, and the next step with slots catches all of them up in one batched forward (in pieces of
at most max_rows rows), which also gives the first draft; k - 1 batched one-token steps give the
rest. Its K/V only shape the proposals, never the output (the target verifies every draft), so the
lag costs nothing in correctness. Blocks shared through the prefix cache keep their draft K/V only
where the draft wrote them for their present tokens (valid_blocks): a block loaded from the disk
tier, or filled while its owner's draft lagged, is caught up by the next request that hits it.

A draft with recurrent layers (a small qwen35 drafting for a bigger one) keeps its state per request in a slot of
its own (draft_states), zeroed where its K/V start at position 0; a prefix-cache hit's tokens are caught up from
position 0 (its blocks hold no state). Its drafts fold into that state, so the state right after the catch-up (the
request's next token) is copied aside before they are fed, and restored after the verification where a fed draft
was rejected: the accepted ones are then re-fed with the next step's catch-up, a row each.

Greedy requests draft the draft model's argmax; sampled ones draw
each draft from q, the draft's distribution after the request's temperature / top-k / top-p / min-p,
with the request's generator, and hand q to the target's rejection sampling
(hearth.sample.speculative), so the output stays distributed as the target's."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from hearth.config import ModelConfig, layer_caches
from hearth.kvstore.codecs import CODECS
from hearth.runner.draft_tree import best_first_tree
from hearth.runner.draft_states import DraftStates
from hearth.runner.draft_vocab import DraftVocab
from hearth.runner.messages import RunnerOutput, SchedulerOutput
from hearth.sample.sampler import target_probs
from hearth.sample.speculative import race


TREE_TOP_K = 4
"""Candidates per position a draft tree may branch into."""
LAG = 8
"""Queued tokens from which a sequence's catch-up runs as a prefill before its last token."""


@dataclass(slots=True)
class _DraftState:
    valid: int
    """The draft's K/V hold positions [0, valid) of this request's committed tokens."""
    pending: list[int] = field(default_factory=list)
    """Committed tokens at positions valid.. that the draft has not computed yet: an accepted last
    draft (the target computed it, the draft only proposed it), the tokens of steps without slots,
    a prefix-cache hit's blocks whose draft K/V are not valid."""
    hit: int = 0
    """The first `hit` pending tokens are a prefix hit's: computed as a prefill of their own (as the
    target computed them) when the request first drafts, not before: a batch too big to draft in
    never pays for them."""



def paged_rows(batch: list[tuple[int, list[int], list[int]]], bs: int):
    """(first position, tokens, block table) per sequence -> a step's flat rows over blocks of bs tokens: (ids,
    positions, KV slots, query_start_loc, seq_lens, block tables)."""
    ids, positions, slots, qsl, seq_lens, tables = [], [], [], [0], [], []
    for start, toks, table in batch:
        pos = range(start, start + len(toks))
        ids.extend(toks)
        positions.extend(pos)
        slots.extend(table[p // bs] * bs + p % bs for p in pos)
        qsl.append(qsl[-1] + len(toks))
        seq_lens.append(start + len(toks))
        tables.append(table)
    return ids, positions, slots, qsl, seq_lens, tables

class DraftModel:
    def __init__(self, model: torch.nn.Module, cfg: ModelConfig, num_blocks: int, block_size: int,
                 max_rows: int = 512, vocab: DraftVocab | None = None, max_seqs: int = 16):
        """max_rows: most rows of one catch-up forward (the step's token budget is a fair size);
        vocab: a reduced-vocabulary head to draft from (speculative_config.draft_vocab), or None;
        max_seqs: requests a recurrent draft keeps a state for (the target's max_num_seqs)."""
        self.model, self.cfg, self.block_size, self.max_rows = model, cfg, block_size, max_rows
        self.vocab = vocab
        codec = CODECS["f16"]  # the draft's own format: plain, whatever the target's is
        # one tensor per layer (LayerCache): [parts, num_blocks, block_size, heads, dim]
        self.kv_caches = [model.backend.kv_zeros(c.shape(num_blocks, block_size), codec.dtype)
                          for c in layer_caches(cfg)]
        self.states: dict[str, _DraftState] = {}
        self.recurrent = DraftStates(cfg, max_seqs, model.backend.kv_zeros) if any(cfg.recurrent_layers) else None
        """A recurrent draft's per-request states (None for any other draft)."""
        self.valid_blocks: set[int] = set()
        """Full blocks whose draft K/V the draft wrote for the tokens they hold now."""
        self._prefix_work: list[tuple[int, list[int], list[int], str]] = []
        self._last: dict[str, tuple[int, list[int]]] = {}
        """request id -> (start of its drafts, the drafts) of the step being verified."""
        self._lookup: list[str] = []
        """Requests verifying another proposer's chain this step (the draft computed none of it)."""
        self.probs: dict[str, torch.Tensor] = {}
        """request id -> q [k, V]: the distributions its drafts were drawn from (sampled requests)."""
        self._due: dict[str, int] = {}
        """request id -> the tokens its next step catches up when it drafts right after this one."""
        self.steady = True
        """False after a draft() that computed more than a step's catch-up (a prompt, the tokens of
        a pause): that step's time is not what its rows cost."""
        self.caught_up = (0, 0.0)
        """The last draft()'s prefills (a prompt, a pause, a prefix hit): rows and seconds, what
        the policy prices a lag's catch-up by (hearth.spec_decode.cost)."""
        self.tree_depth = 0
        """Trees (speculative_config.tree_budget): the chain drafted is this deep at most, and the
        slots past it take DDTree's best-first branches from the chain's per-position top-k. 0:
        chains as long as the slots."""

    def forget(self, request_id: str) -> None:
        self.states.pop(request_id, None)
        if self.recurrent is not None:
            self.recurrent.forget(request_id)
        self._due.pop(request_id, None)
        if self.vocab is not None:
            self.vocab.forget(request_id)

    def lags(self, request_ids: list[str]) -> dict[str, int]:
        """request id -> the tokens the draft has yet to compute before it drafts for it again
        (after observe): its prompt until it first drafts, the tokens of a pause."""
        return {rid: len(self.states[rid].pending) for rid in request_ids if rid in self.states}

    def invalidate(self, block_ids: list[int]) -> None:
        """These blocks' target K/V were replaced without the draft's (loaded from the disk tier)."""
        self.valid_blocks.difference_update(block_ids)

    @torch.inference_mode()
    def draft(self, so: SchedulerOutput, generator) -> SchedulerOutput:
        """so with every sequence's draft slots filled by the draft model (chains, or trees);
        generator: (request id, params) -> the request's torch.Generator (None for greedy)."""
        self._last, self.probs = {}, {}
        qs: dict[int, list[torch.Tensor]] = {}
        self.steady, self.caught_up = True, (0, 0.0)
        if not so.seqs:
            return so
        work = [i for i, s in enumerate(so.seqs) if s.num_draft_slots]
        # chains another proposer gave (draft_lookup_min): their accepted tokens join the queue
        self._lookup = [s.request_id for s in so.seqs if s.spec_token_ids and not s.num_draft_slots]
        self._prefix_work = []
        catch_up = {i: self._queue(s, i in work) for i, s in enumerate(so.seqs)}  # i -> (valid before, first position, tokens)
        # a step catches up what the last one's verification left (observe) and its new token;
        # more is a prompt or a pause made up for once
        due = [self._due.pop(s.request_id, 1) for s in so.seqs]
        self.steady = not self._prefix_work and all(len(catch_up[i][2]) <= due[i] for i in work)
        self._prefill(self._prefix_work)
        self._track_blocks(so, [catch_up[i][0] for i in range(len(so.seqs))])
        if not work:
            return so
        seqs_w = [so.seqs[i] for i in work]
        slots = [s.num_draft_slots for s in seqs_w]
        k_of = [min(k, self.tree_depth) if self.tree_depth else k for k in slots]  # the chain's length
        tops: dict[int, list] = {i: [] for i, (k, n) in enumerate(zip(slots, k_of)) if k > n}  # trees
        drafts: list[list[int]] = [[] for _ in seqs_w]
        live = list(range(len(work)))
        logits = self._catch_up([(*catch_up[i][1:], so.seqs[i].block_ids, so.seqs[i].request_id) for i in work],
                                live, [s.request_id for s in seqs_w])
        if self.recurrent is not None:  # the state after each one's next token: where a rejection goes back to
            self.recurrent.keep([s.request_id for s in seqs_w])
        tokens = self._pick(seqs_w, live, logits, qs, generator, tops)
        for step in range(1, max(k_of) + 1):
            for i, t in zip(live, tokens):
                drafts[i].append(t)
            live = [i for i in live if len(drafts[i]) < k_of[i]]
            if not live:
                break
            # draft j - 1 (at its position) gives draft j; its K/V written as it goes
            batch = [(seqs_w[i].start_pos + len(seqs_w[i].token_ids) + step - 1, [drafts[i][-1]],
                      seqs_w[i].block_ids, seqs_w[i].request_id) for i in live]
            logits = self._forward(batch, list(range(len(live))), [seqs_w[i].request_id for i in live])
            tokens = self._pick(seqs_w, live, logits, qs, generator, tops)
        filled = dict(zip(work, self._fill(seqs_w, drafts, slots, tops, qs)))
        return replace(so, seqs=[filled.get(i, s) for i, s in enumerate(so.seqs)])

    def _fill(self, seqs: list, drafts: list[list[int]], slots: list[int], tops: dict, qs: dict) -> list:
        """Each sequence with its drafts as spec tokens (a tree where tops has its top-k)."""
        out = []
        for i, (s, d) in enumerate(zip(seqs, drafts)):
            self._last[s.request_id] = (s.start_pos + len(s.token_ids), d)
            nodes, parents = d, []
            if i in tops:
                top = tops[i][: len(d)]
                nodes, parents, _ = best_first_tree(d, [p for _, p in top], [t for t, _ in top], slots[i])
            if i in qs:  # a tree's chain (first children) was drawn from these; its branches are point masses
                self.probs[s.request_id] = torch.stack(qs[i][: len(d)])  # [k, V]
            out.append(replace(s, spec_token_ids=nodes, spec_parents=parents, num_draft_slots=0))
        return out

    def observe(self, out: RunnerOutput) -> None:
        """After verification: the draft's K/V are valid up to its last accepted draft that it
        computed itself (a fully accepted chain leaves its last draft pending). It wrote its chain's
        K/V at the chain's positions, so a tree path accepted along the chain needs no move there;
        where the path leaves the chain, the accepted tokens after it are pending (computed next step)."""
        for rid, (start, d) in self._last.items():
            st = self.states.get(rid)
            if st is None:
                continue
            accepted = [t.token_id for t in out.accepted.get(rid, [])]
            on_chain = next((j for j, (a, c) in enumerate(zip(accepted, d)) if a != c), min(len(accepted), len(d)))
            v = min(on_chain, len(d) - 1)  # drafts 1..k-1 were fed through the draft
            if self.recurrent is not None and v < len(d) - 1:  # a fed draft rejected: back to before the drafts
                self.recurrent.restore(rid)
                v = 0
            st.valid = start + v
            st.pending = accepted[v:]
            self._due[rid] = len(st.pending) + 1
        self._last = {}
        for rid in self._lookup:
            if rid in self.states:
                self.states[rid].pending.extend(t.token_id for t in out.accepted.get(rid, []))
        self._lookup = []

    def _queue(self, s, now: bool) -> tuple[int, int, list[int]]:
        """Queue s's tokens behind what the draft has not computed; now: take the whole queue.
        -> (draft-valid position before, first position to compute now, the tokens to compute
        now); the state then says they are computed."""
        st = self.states.get(s.request_id)
        # admitted (position 0, or a prefix-cache hit whose tokens come along), or out of step
        admitted = st is None or s.start_pos == 0 or s.prefix_token_ids or st.valid + len(st.pending) != s.start_pos
        if admitted:
            st = self.states[s.request_id] = self._admitted(s)
        before = st.valid
        if admitted:
            st.hit = len(st.pending)
            if self.vocab is not None:
                self.vocab.see(s.request_id, s.prefix_token_ids or [])
        if self.vocab is not None:
            self.vocab.see(s.request_id, s.token_ids)
        st.pending.extend(s.token_ids)
        if not now:
            return before, st.valid, []
        if st.hit:  # a hit's blocks without valid draft K/V: a prefill, as the target computed them
            self._prefix_work.append((st.valid, st.pending[: st.hit], s.block_ids, s.request_id))
            st.valid, st.pending, st.hit = st.valid + st.hit, st.pending[st.hit :], 0
        start, tokens = st.valid, st.pending
        st.valid, st.pending = start + len(tokens), []
        return before, start, tokens

    def _admitted(self, s) -> _DraftState:
        """The state of a request starting at s.start_pos: its prefix blocks' draft K/V are valid up
        to the first block not in valid_blocks, the rest is queued from s.prefix_token_ids (without
        them, as a caller that sends none: trusted)."""
        if self.recurrent is not None:  # its state starts at 0 where its K/V do (a hit's blocks hold none)
            self.recurrent.start(s.request_id, zeroed=bool(s.prefix_token_ids) or s.start_pos == 0)
        if not s.prefix_token_ids:
            return _DraftState(s.start_pos)
        bs, n = self.block_size, s.start_pos // self.block_size
        first = 0 if self.recurrent is not None else next(
            (j for j, b in enumerate(s.block_ids[:n]) if b not in self.valid_blocks), n)
        return _DraftState(first * bs, list(s.prefix_token_ids[first * bs : s.start_pos]))

    def _track_blocks(self, so: SchedulerOutput, was_valid: list[int]) -> None:
        """After _queue (was_valid: each sequence's draft-valid position before it): the blocks
        caught up to the new one are valid, the ones the target writes this step past it are not."""
        bs = self.block_size
        for s, before in zip(so.seqs, was_valid):
            st = self.states[s.request_id]
            table = s.block_ids
            self.valid_blocks.update(table[before // bs : st.valid // bs])
            end = s.start_pos + s.num_tokens  # the target writes [start_pos, end): tokens and drafts
            self.valid_blocks.difference_update(table[max(st.valid, s.start_pos) // bs : -(-end // bs)])

    def _catch_up(self, batch: list[tuple[int, list[int], list[int], str]], out_seqs: list[int],
                  rids: list[str]) -> torch.Tensor:
        """_forward over batch, giving the logits after each sequence's last token. A queue longer
        than LAG is computed as a prefill first, in pieces of at most max_rows rows, and its last
        token with the others' few: a row among hundreds sums in another kernel regime than a
        decode row, so a draft's first token would drift from what the target decodes there
        (SmolLM2 drafting for itself on a story: 75 of 77 drafts accepted with the last token in
        the prefill, at least 98% apart)."""
        head, rest = [], []
        for pos, toks, table, rid in batch:
            if len(toks) > LAG:
                head.append((pos, toks[:-1], table, rid))
                pos, toks = pos + len(toks) - 1, toks[-1:]
            rest.append((pos, toks, table, rid))
        self._prefill(head)
        return self._forward(rest, out_seqs, rids)

    def _prefill(self, head: list[tuple[int, list[int], list[int], str]]) -> None:
        """K/V only for head's (first position, tokens, block table, request id), in pieces of at most max_rows
        rows; their rows and time added to caught_up."""
        t0, rows = time.perf_counter(), sum(len(toks) for _, toks, _, _ in head)
        while head:
            room, piece, left = self.max_rows, [], []
            for pos, toks, table, rid in head:
                take = min(len(toks), room)
                if take:
                    piece.append((pos, toks[:take], table, rid))
                    room -= take
                if take < len(toks):
                    left.append((pos + take, toks[take:], table, rid))
            self._forward(piece, [])
            head = left
        if rows:
            n, seconds = self.caught_up
            self.caught_up = (n + rows, seconds + time.perf_counter() - t0)

    @staticmethod
    def _pick(seqs: list, live: list[int], logits: torch.Tensor, qs: dict, generator, tops: dict) -> list[int]:
        """The next draft of each sequence in live from its row of logits [len(live), V]: the argmax
        (greedy), or a draw from q (kept in qs[i] for the verification); for a sequence in tops, the
        position's top TREE_TOP_K (token, probability) and the draft's probability are kept too
        (greedy: the draft's softmax; sampled: q)."""
        if not live:
            return []
        out = logits.argmax(-1).tolist()
        for j, i in enumerate(live):
            p = seqs[i].params
            dist = None
            if not p.greedy:
                dist = target_probs(logits[j : j + 1], [p])[0]  # [V]: q
                qs.setdefault(i, []).append(dist)
                out[j] = race(dist, generator(seqs[i].request_id, p))
            if i in tops:
                dist = logits[j].softmax(-1) if dist is None else dist
                vals, idx = dist.topk(TREE_TOP_K)
                tops[i].append((list(zip(idx.tolist(), vals.tolist())), float(dist[out[j]])))
        return out

    def _forward(self, batch: list[tuple[int, list[int], list[int], str]], out_seqs: list[int],
                 rids: list[str] = ()) -> torch.Tensor:
        """batch: (first position, tokens, block table, request id) per sequence; K/V written for every token
        (a recurrent draft's state moved along).
        -> [len(out_seqs), V] f32: the logits after the last token of each sequence in out_seqs
        (rids: their request ids, for a reduced vocabulary's per-request rows)."""
        ids, positions, slots, qsl, seq_lens, tables = paged_rows([(a, t, b) for a, t, b, _ in batch], self.block_size)
        meta = self.model.backend.metadata(qsl, seq_lens, tables, slots, self.block_size)
        if self.recurrent is not None:
            meta.recurrent = self.recurrent.step([rid for *_, rid in batch])
        rows = [qsl[i + 1] - 1 for i in out_seqs]
        hidden = self.model(torch.tensor(ids, dtype=torch.long), torch.tensor(positions, dtype=torch.long),
                            meta, self.kv_caches, out_rows=rows)  # [len(rows), hidden]
        if not rows:
            return torch.empty(0, 0)
        if self.vocab is not None:
            return self.vocab.logits(hidden, list(rids))
        return self.model.compute_logits(hidden).float()
