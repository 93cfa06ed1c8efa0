"""A step's grammar matchers (SamplingParams.structured_output), one per constrained request, made on its
first row: what each row allows, its logits masked to that (a chain's drafts or a tree's nodes walked with
the matcher), and the tokens the grammar forces next. The masks themselves: grammar_rows."""

from __future__ import annotations

import torch

from hearth.runner.grammar_rows import allowed_of, mask_row
from hearth.sample.grammar import GrammarCompiler, GrammarMatcher


def matched(matchers: dict[str, GrammarMatcher], grammar: GrammarCompiler, vocab_size: int,
            seqs: list) -> dict[int, torch.Tensor]:
    """Row -> [V] bool, the tokens its grammar allows next, for the rows under one (their matchers
    made on a request's first row), before the head: where they are few, only they are scored."""
    out = {}
    for i, s in enumerate(seqs):
        if s.params.structured_output is not None:
            m = matchers.get(s.request_id)
            if m is None:
                m = matchers[s.request_id] = grammar.matcher(s.params.structured_output)
            out[i] = allowed_of(m, vocab_size)
    return out


def constrain(matchers: dict[str, GrammarMatcher], seqs: list, logits: torch.Tensor, allowed: dict[int, torch.Tensor],
              raw_known: bool = True) -> tuple[list[tuple[int, GrammarMatcher]], dict[int, float]]:
    """Mask (in place) the logits of rows under a structured-output constraint (allowed: row ->
    its grammar's mask, from matched): (row, matcher) per such row, and row -> the log of the
    mass its mask kept where raw logprobs were asked for and every token was scored (raw_known)."""
    out, raw = [], {}
    for i, s in enumerate(seqs):
        if i not in allowed:
            continue
        m = matchers[s.request_id]
        kept = mask_row(logits[i], m, s.params.raw_logprobs and raw_known, s.banned_token_ids, allowed[i])
        if kept is not None:
            raw[i] = kept
        out.append((i, m))
    return out, raw


def constrain_tree(matchers: dict[str, GrammarMatcher], grammar: GrammarCompiler | None, s, logits: torch.Tensor,
                   r0: int, raw: dict | None = None) -> int:
    """Mask the rows of a constrained sequence's tree: each node's row by the grammar state after
    its path, found by walking the tree depth first (accept, recurse, roll back). A node the
    grammar forbids is masked in its parent's row, so rejected, and its subtree never reached.
    The matcher ends where it began; the caller then feeds it the committed tokens. `raw` gets,
    per row it narrows, the log of the probability mass the mask kept (mask_row), when the request
    asked for raw logprobs."""
    m = matchers.get(s.request_id)
    if m is None:
        m = matchers[s.request_id] = grammar.matcher(s.params.structured_output)
    kids: list[list[int]] = [[] for _ in range(len(s.spec_parents) + 1)]
    for c, p in enumerate(s.spec_parents):
        kids[p + 1].append(c)

    keep = raw is not None and s.params.raw_logprobs

    def visit(node: int, depth: int) -> None:  # node -1: the row before the tree
        row = r0 + 1 + node
        kept = mask_row(logits[row], m, keep, s.banned_token_ids if depth < s.banned_rows else ())
        if kept is not None:
            raw[row] = kept
        for c in kids[node + 1]:
            if m.valid_prefix([s.spec_token_ids[c]]) == 1:
                m.accept(s.spec_token_ids[c])
                visit(c, depth + 1)
                m.rollback(1)

    visit(-1, 0)
    return 0


def constrain_rows(matchers: dict[str, GrammarMatcher], grammar: GrammarCompiler | None, s, logits: torch.Tensor,
                   r0: int, raw: dict | None = None, masks: list[torch.Tensor] | None = None) -> int:
    """Mask rows r0.. of a constrained sequence with drafts: the matcher walks the drafts the
    grammar allows (a forbidden one is masked, so rejected; the rows after it are never
    reached). Returns how many drafts it consumed (the caller rolls back the rejected ones);
    `raw` as in constrain_tree. masks: the reached rows' [V] masks where already read (as
    many as the valid drafts + 1, grammar_rows.reached), else read here."""
    m = matchers.get(s.request_id)
    if m is None:
        m = matchers[s.request_id] = grammar.matcher(s.params.structured_output)
    valid = m.valid_prefix(s.spec_token_ids) if masks is None else len(masks) - 1
    keep = raw is not None and s.params.raw_logprobs
    for j in range(valid + 1):
        kept = mask_row(logits[r0 + j], m, keep, s.banned_token_ids if j < s.banned_rows else (),
                          None if masks is None else masks[j])
        if kept is not None:
            raw[r0 + j] = kept
        if j < valid:
            m.accept(s.spec_token_ids[j])
    return valid


def forced(matchers: dict[str, GrammarMatcher], seqs, on: bool) -> dict[str, list[int]]:
    """The grammar-forced next tokens of these constrained sequences (their matchers are past
    this step's tokens), where `on` (ModelRunner.forced_drafts)."""
    if not on:
        return {}
    out = {}
    for s in seqs:
        tokens = matchers[s.request_id].forced()
        if tokens:
            out[s.request_id] = tokens
    return out
