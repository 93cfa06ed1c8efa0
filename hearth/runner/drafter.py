"""The draft model's runner half (speculative_config method "draft"): a small model with the
target's vocabulary writes the drafts into the slots the scheduler gave (num_draft_slots).

Its K/V live in their own tensors with the target's num_blocks and block_size, indexed by the same
block tables: one block id holds the target's and the draft's K/V of the same positions, so the
scheduler's block accounting (allocation, rollback, preemption, prefix caching) covers both.

Per step: one batched forward catches the draft's K/V up on every scheduled sequence's new tokens
(prefill chunks included) and gives the first draft of the sequences with slots; k - 1 batched
one-token steps give the rest. Greedy requests draft the draft model's argmax; sampled ones draw
each draft from q, the draft's distribution after the request's temperature / top-k / top-p / min-p,
with the request's generator, and hand q to the target's rejection sampling
(hearth.sample.speculative), so the output stays distributed as the target's."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from hearth.config import ModelConfig
from hearth.kernels.attention import AttentionMetadata
from hearth.kvstore.codecs import CODECS
from hearth.kvstore.paged import lazy_zeros
from hearth.runner.draft_tree import best_first_tree
from hearth.runner.messages import RunnerOutput, SchedulerOutput
from hearth.sample.sampler import target_probs
from hearth.sample.speculative import race


TREE_TOP_K = 4
"""Candidates per position a draft tree may branch into."""


@dataclass(slots=True)
class _DraftState:
    valid: int
    """The draft's K/V hold positions [0, valid) of this request's committed tokens."""
    pending: list[int] = field(default_factory=list)
    """Committed tokens at positions valid.. that the draft has not computed yet (an accepted last
    draft: the target computed it, the draft only proposed it)."""


class DraftModel:
    def __init__(self, model: torch.nn.Module, cfg: ModelConfig, num_blocks: int, block_size: int):
        self.model, self.cfg, self.block_size = model, cfg, block_size
        codec = CODECS["f16"]  # the draft's own format: plain, whatever the target's is
        # one tensor per layer: [2 (k, v), num_blocks, block_size, kv_heads, head_dim]
        shape = codec.shape(num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.kv_caches = [lazy_zeros(shape, codec.dtype) for _ in range(cfg.num_layers)]
        self.states: dict[str, _DraftState] = {}
        self._last: dict[str, tuple[int, list[int]]] = {}
        """request id -> (start of its drafts, the drafts) of the step being verified."""
        self.probs: dict[str, torch.Tensor] = {}
        """request id -> q [k, V]: the distributions its drafts were drawn from (sampled requests)."""
        self.tree_depth = 0
        """Trees (speculative_config.tree_budget): the chain drafted is this deep at most, and the
        slots past it take DDTree's best-first branches from the chain's per-position top-k. 0:
        chains as long as the slots."""

    def forget(self, request_id: str) -> None:
        self.states.pop(request_id, None)

    @torch.inference_mode()
    def draft(self, so: SchedulerOutput, generator) -> SchedulerOutput:
        """so with every sequence's draft slots filled by the draft model (chains); generator:
        (request id, params) -> the request's torch.Generator (None for greedy)."""
        self._last, self.probs = {}, {}
        qs: dict[int, list[torch.Tensor]] = {}
        if not so.seqs:
            return so
        catch_up = [self._catch_up_tokens(s) for s in so.seqs]  # (first position, tokens)
        slots = [s.num_draft_slots for s in so.seqs]
        k_of = [min(k, self.tree_depth) if self.tree_depth else k for k in slots]  # the chain's length
        tops: dict[int, list] = {i: [] for i, (k, n) in enumerate(zip(slots, k_of)) if k > n}  # trees
        drafts: list[list[int]] = [[] for _ in so.seqs]
        live = [i for i, k in enumerate(k_of) if k]
        logits = self._forward([(p, t, so.seqs[i].block_ids) for i, (p, t) in enumerate(catch_up)], live)
        tokens = self._pick(so, live, logits, qs, generator, tops)
        for i, s in enumerate(so.seqs):
            self.states[s.request_id] = _DraftState(s.start_pos + len(s.token_ids))
        for step in range(1, max(k_of, default=0) + 1):
            for i, t in zip(live, tokens):
                drafts[i].append(t)
            live = [i for i in live if len(drafts[i]) < k_of[i]]
            if not live:
                break
            # draft j - 1 (at its position) gives draft j; its K/V written as it goes
            batch = [(so.seqs[i].start_pos + len(so.seqs[i].token_ids) + step - 1, [drafts[i][-1]],
                      so.seqs[i].block_ids) for i in live]
            tokens = self._pick(so, live, self._forward(batch, list(range(len(live)))), qs, generator, tops)
        seqs = []
        for i, (s, d) in enumerate(zip(so.seqs, drafts)):
            if d:
                self._last[s.request_id] = (s.start_pos + len(s.token_ids), d)
                nodes, parents = d, []
                if i in tops:
                    top = tops[i][: len(d)]
                    nodes, parents, _ = best_first_tree(d, [p for _, p in top], [t for t, _ in top], slots[i])
                if i in qs:  # a tree's chain (first children) was drawn from these; its branches are point masses
                    self.probs[s.request_id] = torch.stack(qs[i][: len(d)])  # [k, V]
                s = replace(s, spec_token_ids=nodes, spec_parents=parents, num_draft_slots=0)
            seqs.append(s)
        return replace(so, seqs=seqs)

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
            st.valid = start + v
            st.pending = accepted[v:]
        self._last = {}

    def _catch_up_tokens(self, s) -> tuple[int, list[int]]:
        """(first position, tokens) the draft computes for s: what it has not seen up to s's end."""
        st = self.states.get(s.request_id)
        # new, recomputed after preemption (start_pos 0) or out of step: start at start_pos. A
        # prefix-cache hit trusts the cached blocks' draft K/V (written when the target's were)
        if st is None or s.start_pos == 0 or st.valid + len(st.pending) != s.start_pos:
            return s.start_pos, list(s.token_ids)
        return st.valid, st.pending + list(s.token_ids)

    @staticmethod
    def _pick(so: SchedulerOutput, live: list[int], logits: torch.Tensor, qs: dict, generator, tops: dict) -> list[int]:
        """The next draft of each sequence in live from its row of logits [len(live), V]: the argmax
        (greedy), or a draw from q (kept in qs[i] for the verification); for a sequence in tops, the
        position's top TREE_TOP_K (token, probability) and the draft's probability are kept too
        (greedy: the draft's softmax; sampled: q)."""
        if not live:
            return []
        out = logits.argmax(-1).tolist()
        for j, i in enumerate(live):
            p = so.seqs[i].params
            dist = None
            if not p.greedy:
                dist = target_probs(logits[j : j + 1], [p])[0]  # [V]: q
                qs.setdefault(i, []).append(dist)
                out[j] = race(dist, generator(so.seqs[i].request_id, p))
            if i in tops:
                dist = logits[j].softmax(-1) if dist is None else dist
                vals, idx = dist.topk(TREE_TOP_K)
                tops[i].append((list(zip(idx.tolist(), vals.tolist())), float(dist[out[j]])))
        return out

    def _forward(self, batch: list[tuple[int, list[int], list[int]]], out_seqs: list[int]) -> torch.Tensor:
        """batch: (first position, tokens, block table) per sequence; K/V written for every token.
        -> [len(out_seqs), V] f32: the logits after the last token of each sequence in out_seqs."""
        ids, positions, slots, qsl, seq_lens, tables = [], [], [], [0], [], []
        bs = self.block_size
        for start, toks, table in batch:
            pos = range(start, start + len(toks))
            ids.extend(toks)
            positions.extend(pos)
            slots.extend(table[p // bs] * bs + p % bs for p in pos)
            qsl.append(qsl[-1] + len(toks))
            seq_lens.append(start + len(toks))
            tables.append(table)
        meta = AttentionMetadata(qsl, seq_lens, tables, torch.tensor(slots, dtype=torch.long), bs)
        rows = [qsl[i + 1] - 1 for i in out_seqs]
        hidden = self.model(torch.tensor(ids, dtype=torch.long), torch.tensor(positions, dtype=torch.long),
                            meta, self.kv_caches, out_rows=rows)  # [len(rows), hidden]
        if not rows:
            return torch.empty(0, 0)
        return self.model.compute_logits(hidden).float()
