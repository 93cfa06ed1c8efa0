"""Constrained rows: before the lm head, what each allows next and which token ids a step's
head scores; after it, the mask (mask_row). A row's logits outside what its grammar allows are
masked to -inf anyway, so where a step's grammars allow few tokens only those are computed (each
value the whole head's, bit for bit: hearth.backends `logits(head, hidden, ids)`); rows without a
grammar, or asking a raw (pre-mask) logprob, need every token. Measured in docs/performance.md
("Grammar rows")."""

from __future__ import annotations

import numpy as np
import torch

from hearth.sample.grammar import GrammarMatcher, constraint_kind
from hearth.sampling_params import raw_pattern

SCORED_SHARE = 1 / 8
"""A step whose grammars allow at most this share of the vocabulary scores only those tokens: the
head's rows for 4,096 of Qwen2.5-Coder's 151,936 tokens took 1.2 / 1.7 ms against 10 / 16 ms for all
(0.5B Q8_0 / 1.5B Q6_K, one thread), 16,384 4.1 / 6.6 ms: the gather costs about what it saves near 1/3."""


def allowed_of(m: GrammarMatcher, vocab: int) -> torch.Tensor:
    """The grammar's next-token bitmask (bit i of little-endian 32-bit word i // 32) as [vocab] bool:
    byte by byte, low bit first, is the same order (9 us at 152k tokens; shifts in torch took 190)."""
    bits = np.unpackbits(np.frombuffer(m.bitmask(), dtype=np.uint8), bitorder="little")[:vocab]
    return torch.from_numpy(bits.view(np.bool_))


def wants_raw(s, m: GrammarMatcher | None) -> bool:
    """Whether sequence s's row must report a raw logprob here (then every token is scored)."""
    p = s.params
    return p.raw_logprobs and (p.raw_logprobs_at is None or m is None or m.ends_with(raw_pattern(p.raw_logprobs_at)))


def reached(seqs: list, matchers: dict[str, GrammarMatcher], vocab: int) -> tuple[dict[str, list[torch.Tensor]], bool]:
    """For a step with drafts, per constrained chain (whose matcher exists): what each row its drafts
    reach allows, [V] bool per row (its matcher walks the grammar-valid drafts and back; rows past a
    forbidden draft are never read). The runner masks those rows with them (_constrain_rows), so each
    is computed once a step. And whether they narrow the whole step: every sequence such a chain and
    no row needing a raw logprob (then the head may score only their union, scored_ids)."""
    masks: dict[str, list[torch.Tensor]] = {}
    narrow = True
    for s in seqs:
        m = matchers.get(s.request_id)
        if s.params.structured_output is None or s.is_tree or m is None:
            narrow = False
            continue
        valid = m.valid_prefix(s.spec_token_ids)
        rows = masks[s.request_id] = []
        for j in range(valid + 1):
            narrow = narrow and not wants_raw(s, m)
            rows.append(allowed_of(m, vocab))
            if j < valid:
                m.accept(s.spec_token_ids[j])
        m.rollback(valid)
    return masks, narrow


def scored_ids(masks: list[torch.Tensor] | None) -> torch.Tensor | None:
    """The token ids a step's head scores: the union of its rows' allowed tokens where that is at
    most SCORED_SHARE of the vocabulary; else None (every token)."""
    if not masks:
        return None
    union = torch.stack(masks).any(0)  # [V]
    if not 0 < int(union.sum()) <= SCORED_SHARE * union.shape[0]:
        return None
    return union.nonzero().flatten()


def mask_row(row: torch.Tensor, m: GrammarMatcher, keep_raw: bool = False, ban: list[int] = (),
             allowed: torch.Tensor | None = None) -> float | None:
    """Mask row [V] in place to what the grammar allows, less `ban` (min_tokens' end-of-generation
    and stop ids) unless that leaves no token: a grammar that allows only its end has ended and
    wins, as in vLLM, where min_tokens only holds back EOS and stop ids (an all -inf row sampled
    garbage with a NaN logprob). keep_raw: return log(mass the mask kept) = logsumexp after -
    logsumexp before (the ban applied), so an allowed token's raw logprob is its masked one plus
    this (no [V] copy per row); None when the mask removes nothing (the masked logprobs are then
    the raw ones) or when not asked. allowed: m's [V] bool mask, where already read."""
    if allowed is None or allowed.shape[0] != row.shape[0]:
        allowed = allowed_of(m, row.shape[0])
    banned = ~allowed  # [V]
    if ban:
        with_ban = banned.clone()
        with_ban[ban] = True
        if not bool(with_ban.all()):
            row[ban] = float("-inf")
            banned = with_ban
    before = row.logsumexp(-1) if keep_raw and bool(banned.any()) else None
    row.masked_fill_(banned, float("-inf"))
    return None if before is None else float(row.logsumexp(-1) - before)


def dead_ends(logits: torch.Tensor, rows: list[tuple[int, object]]) -> dict[str, str]:
    """logits: [R, V] after sampling's bans (the sampler bans bad words in place); rows: (row, sequence) of
    the constrained sequences' last sampled rows. Request id -> why, for those whose bad words removed every
    token their grammar allows: such a row has no finite logit, so its sampled token (the first, 0) is none
    the grammar allows. Only rows with bad words can end so: one [len(rows)] check a step, none without them."""
    rows = [(r, s) for r, s in rows if s.params.bad_words_token_ids]
    if not rows:
        return {}
    dead = (logits[[r for r, _ in rows]].amax(-1) == float("-inf")).tolist()
    return {s.request_id: f"left no token the {constraint_kind(s.params.structured_output)} allows "
                          "at this point of the answer (ban fewer words)"
            for (_, s), d in zip(rows, dead) if d}
