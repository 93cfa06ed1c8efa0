"""The MTP head's runner half (speculative_config method "mtp"; llama.cpp's common_speculative_impl_draft_mtp for a
single head): the target's own multi-token-prediction block (hearth.models.mtp_head) writes the drafts into the
slots the scheduler gave.

The head's row at position p pairs the token there with the target's hidden row at p - 1 (after its final norm), so
it can only compute a committed position once the target has computed the one before: the runner hands it every
row of each step (see_hidden), and observe() queues (token, h) pairs of the step's committed positions. A step
that drafts for a sequence catches its queue up and the new token (its h is the last committed row: known) in one
forward, whose last row gives the first draft; each further draft is the head on its own output row (llama.cpp's
recursion). Positions past the new one were computed from the head's own rows: after the verification the accepted
drafts are queued again with the target's rows, so the next catch-up overwrites them (as llama.cpp's process()
re-runs the verify batch), and the rejected ones are written over later.

Its K/V: one layer's tensor with the target's num_blocks and block_size, indexed by the same block tables (as a
draft model's: hearth.runner.drafter), so the scheduler's block accounting and rollback cover it. A sequence
admitted past position 0 (a prefix-cache hit) starts there with h zeros (llama.cpp's first pending row): the hit's
blocks hold whatever head K/V the request that wrote them left, so its drafts may be poorer, never wrong (the
target verifies each)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from hearth.config import ModelConfig, mtp_cache
from hearth.kvstore.codecs import CODECS
from hearth.runner.drafter import DraftModel, paged_rows
from hearth.runner.messages import RunnerOutput, SchedulerOutput


@dataclass(slots=True)
class _MtpState:
    valid: int
    """The head's K/V hold positions [0, valid) of this request's committed tokens, from the target's rows."""
    pairs: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    """(token, the target's h [hidden] at the position before) for committed positions valid.. not computed yet."""
    last_h: torch.Tensor | None = None
    """The target's h [hidden] at position valid + len(pairs) - 1: what the next token pairs with (None: zeros)."""


class MtpDrafter:
    wants_hidden = True
    """The runner hands it every row's hidden state of each step (see_hidden)."""

    def __init__(self, head, cfg: ModelConfig, num_blocks: int, block_size: int, max_rows: int = 512):
        self.head, self.block_size, self.max_rows, self.hidden = head, block_size, max_rows, cfg.hidden_size
        # [2 (k, v), num_blocks, block_size, kv_heads, head_dim]
        self.kv_cache = head.backend.kv_zeros(mtp_cache(cfg).shape(num_blocks, block_size), CODECS["f16"].dtype)
        self.states: dict[str, _MtpState] = {}
        self._rows: dict[str, torch.Tensor] = {}
        """request id -> the target's hidden rows [tokens + drafts, hidden] of the step being run."""
        self._seqs: list = []
        self._last: dict[str, tuple[int, list[int]]] = {}
        """request id -> (position of its new token, its drafts) of the step being verified."""
        self.probs: dict[str, torch.Tensor] = {}
        """request id -> q [k, V]: the distributions its drafts were drawn from (sampled requests)."""
        self.steady, self.caught_up, self.tree_depth = True, (0, 0.0), 0

    def forget(self, request_id: str) -> None:
        self.states.pop(request_id, None)

    def lags(self, request_ids: list[str]) -> dict[str, int]:
        """request id -> committed positions the head has yet to compute before it drafts again."""
        return {rid: len(self.states[rid].pairs) for rid in request_ids if rid in self.states}

    def invalidate(self, block_ids: list[int]) -> None:
        """Blocks loaded from the disk tier hold the target's K/V only: the head's there are stale (poorer drafts)."""

    def _state(self, s) -> _MtpState:
        st = self.states.get(s.request_id)
        if st is None or s.start_pos == 0 or s.prefix_token_ids or st.valid + len(st.pairs) != s.start_pos:
            st = self.states[s.request_id] = _MtpState(s.start_pos)
        return st

    @torch.inference_mode()
    def draft(self, so: SchedulerOutput, generator) -> SchedulerOutput:
        """so with the slots of each sequence decoding one new token filled with the head's chain (any other
        sequence's slots dropped: its new tokens' h are computed in this very step)."""
        self._last, self.probs, self._rows = {}, {}, {}
        self.steady, self.caught_up = True, (0, 0.0)
        qs: dict[int, list[torch.Tensor]] = {}
        for s in so.seqs:
            self._state(s)
        work = [s for s in so.seqs if s.num_draft_slots and len(s.token_ids) == 1]
        out = {s.request_id: replace(s, num_draft_slots=0) for s in so.seqs if s.num_draft_slots}
        if work:
            rows = self._catch_up(work)  # [W, hidden]: each one's row at its new token
            live = list(range(len(work)))
            drafts: list[list[int]] = [[] for _ in work]
            tokens = DraftModel._pick(work, live, self.head.compute_logits(rows), qs, generator, {})
            for step in range(1, max(s.num_draft_slots for s in work) + 1):
                for i, t in zip(live, tokens):
                    drafts[i].append(t)
                live = [i for i in live if len(drafts[i]) < work[i].num_draft_slots]
                if not live:
                    break
                # draft `step` at its position, paired with the head's own row before it
                batch = [(work[i].start_pos + step, [drafts[i][-1]], rows[i:i + 1], work[i].block_ids) for i in live]
                rows = torch.zeros(len(work), self.hidden)
                rows[live] = self._forward(batch)
                tokens = DraftModel._pick(work, live, self.head.compute_logits(rows[live]), qs, generator, {})
            for i, (s, d) in enumerate(zip(work, drafts)):
                self._last[s.request_id] = (s.start_pos, d)
                if i in qs:
                    self.probs[s.request_id] = torch.stack(qs[i][:len(d)])  # [k, V]
                out[s.request_id] = replace(s, spec_token_ids=d, spec_parents=[], num_draft_slots=0)
        filled = replace(so, seqs=[out.get(s.request_id, s) for s in so.seqs])
        self._seqs = filled.seqs
        return filled

    def _catch_up(self, work: list) -> torch.Tensor:
        """Each sequence's queued pairs and its new token (with the last committed h) through the head, in pieces
        of at most max_rows rows -> [len(work), hidden]: the head's row at each new token."""
        todo, t0 = [], time.perf_counter()
        for s in work:
            st = self.states[s.request_id]
            h = st.last_h if st.last_h is not None else torch.zeros(self.hidden)
            pairs = [*st.pairs, (s.token_ids[0], h)]
            todo.append((st.valid, pairs, s.block_ids))
            st.valid, st.pairs, st.last_h = s.start_pos + 1, [], None
        last = torch.zeros(len(work), self.hidden)
        todo = rows_of = [(i, *t) for i, t in enumerate(todo)]  # (work index, first position, pairs, block table)
        while todo:
            room, piece, at, left = self.max_rows, [], [], []
            for i, pos, pairs, table in todo:
                take = min(len(pairs), room)
                if take:
                    piece.append((pos, [t for t, _ in pairs[:take]], torch.stack([h for _, h in pairs[:take]]), table))
                    at.append(i if take == len(pairs) else -1)
                    room -= take
                if take < len(pairs):
                    left.append((i, pos + take, pairs[take:], table))
            out = self._forward(piece)
            for j, i in enumerate(at):
                if i >= 0:
                    last[i] = out[j]
            todo = left
        # more than a step's catch-up (a prompt, the tokens of a pause): that step's time is not what its rows cost
        rows = sum(len(pairs) for _, _, pairs, _ in rows_of)
        self.steady = all(len(pairs) <= s.num_draft_slots + 1 for (_, _, pairs, _), s in zip(rows_of, work))
        self.caught_up = (0, 0.0) if self.steady else (rows, time.perf_counter() - t0)
        return last

    def _forward(self, batch: list[tuple[int, list[int], torch.Tensor, list[int]]]) -> torch.Tensor:
        """batch: (first position, tokens, their h rows [n, hidden], block table) per sequence; K/V written for
        every row -> [len(batch), hidden]: the head's row at each sequence's last token."""
        ids, positions, slots, qsl, seq_lens, tables = paged_rows([(a, t, b) for a, t, _, b in batch], self.block_size)
        hs = [h for _, _, h, _ in batch]
        meta = self.head.backend.metadata(qsl, seq_lens, tables, slots, self.block_size)
        out = self.head(torch.tensor(ids, dtype=torch.long), torch.cat(hs).float(),
                        torch.tensor(positions, dtype=torch.long), meta, self.kv_cache)  # [T, hidden]
        return out[[q - 1 for q in qsl[1:]]]

    def see_hidden(self, seqs: list, hidden: torch.Tensor, query_start_loc: list[int]) -> None:
        """The target's step: hidden [T, hidden], every row of seqs (after the final norm)."""
        self._rows = {s.request_id: hidden[a:b].float().clone()
                      for s, a, b in zip(seqs, query_start_loc, query_start_loc[1:])}

    def observe(self, out: RunnerOutput) -> None:
        """After verification: queue (token, h) for each committed position the target computed this step; a
        drafting sequence's accepted drafts again, with the target's rows (the head computed them from its own)."""
        for s in self._seqs:
            rid = s.request_id
            st, rows = self.states.get(rid), self._rows.get(rid)
            if st is None or rows is None:
                continue
            if rid in self._last:  # its new token is computed (valid = start + 1); its accepted drafts are not
                accepted = [t.token_id for t in out.accepted.get(rid, [])]
                st.pairs = [(t, rows[j]) for j, t in enumerate(accepted)]
                st.last_h = rows[len(accepted)]
                continue
            h = [st.last_h if st.last_h is not None else torch.zeros(self.hidden), *rows[:len(s.token_ids) - 1]]
            st.pairs.extend(zip(s.token_ids, h))
            st.last_h = rows[len(s.token_ids) - 1]
        self._rows, self._seqs, self._last = {}, [], {}
