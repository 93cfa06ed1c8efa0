"""SuffixDecoding (vLLM's method "suffix", Arctic Inference's suffix cache): drafts from the text
that followed the request's latest tokens, in its own prompt and output and in the requests the
engine finished before, with occurrence counts as probabilities.

Two tries (hearth.spec_decode.suffix_trie): one per live request over its prompt + output so far,
extended by the tokens new since the last step; one global over the last
`suffix_decoding_max_cached_requests` finished requests' prompt + output, evicted oldest first.
Prompts go into the global trie too, so a request sent again drafts its earlier output from its
first decode step on.

For each match length m of the request's last tokens (m < max_tree_depth) in either trie, a draft
tree grows best-first from the matched string: a child's score is its parent's times
count(child) / count(parent), nodes scoring under min_token_prob are dropped, at most
min(num_tokens, max_spec_factor x m) nodes and max_tree_depth - m levels. The draft with the
largest sum of scores (the expected number of accepted tokens) wins; ties go to the longer match."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass

from hearth.spec_decode.proposer import DraftRequest, Proposer
from hearth.spec_decode.suffix_trie import State, SuffixTrie
from hearth.spec_decode.tree import DraftTree


@dataclass(slots=True)
class Draft:
    tree: DraftTree
    score: float
    match_len: int


def grow(trie: SuffixTrie, state: State, denom: int, budget: int, max_depth: int,
         min_prob: float) -> Draft | None:
    """The best-first draft tree below a matched string whose count (without the occurrence being
    drafted for) is denom. Siblings come out in falling score, ties by token id."""
    heap: list = []

    def push(st: State, den: int, p: float, parent: int, depth: int, path: tuple[int, ...]) -> None:
        for tok, ch, c in trie.children(st):
            q = p * c / den
            if q >= min_prob:
                heapq.heappush(heap, (-q, path + (tok,), ch, parent, depth))

    push(state, denom, 1.0, -1, 1, ())
    tokens, parents, scores = [], [], []
    while heap and len(tokens) < budget:
        negq, path, st, parent, depth = heapq.heappop(heap)
        tokens.append(path[-1])
        parents.append(parent)
        scores.append(-negq)
        if depth < max_depth:
            push(st, trie.count(st), -negq, len(tokens) - 1, depth + 1, path)
    if not tokens:
        return None
    return Draft(DraftTree(tokens, parents, scores), sum(scores), 0)


def best_draft(tries: list[tuple[SuffixTrie, bool]], context: list[int], num_tokens: int,
               depth: int, factor: float, min_prob: float) -> Draft | None:
    """The best draft to follow context over tries [(trie, holds context itself)]: a trie that
    holds the request counts its latest occurrence, which nothing follows yet, so it is left out."""
    cands = []  # (bound on the score, match length, trie rank, trie, state, denom)
    for rank, (trie, holds_self) in enumerate(tries):
        for m in range(1, min(depth - 1, len(context)) + 1):
            state = trie.locate(context[-m:])
            if state is None:
                break  # a longer suffix cannot occur either
            denom = trie.count(state) - holds_self
            bound = min(num_tokens, int(m * factor + 1e-6), depth - m)
            if denom > 0 and bound > 0:
                cands.append((bound, m, -rank, trie, state, denom))
    best, key = None, (0.0, 0, 0)
    for bound, m, neg_rank, trie, state, denom in sorted(cands, key=lambda c: c[:3], reverse=True):
        if (bound, m, neg_rank) <= key:  # a score is at most its bound: this one cannot win
            break
        d = grow(trie, state, denom, bound, depth - m, min_prob)
        if d is not None and (d.score, m, neg_rank) > key:
            d.match_len = m
            best, key = d, (d.score, m, neg_rank)
    return best


class _Live:
    __slots__ = ("request", "trie")

    def __init__(self, request: DraftRequest, depth: int):
        self.request = request
        self.trie = SuffixTrie(depth)  # one sequence, id 0


class SuffixProposer(Proposer, method="suffix"):
    def __init__(self, config, codec=None) -> None:
        super().__init__(config, codec)
        self.depth = config.suffix_decoding_max_tree_depth
        self.max_cached = config.suffix_decoding_max_cached_requests
        self.global_trie = SuffixTrie(self.depth)
        self.cached: deque[int] = deque()  # sequence ids in the global trie, oldest first
        self._ids = itertools.count()
        self.live: dict[str, _Live] = {}
        self.seen: dict[str, DraftRequest] = {}
        """Requests that decoded without being offered drafts yet: their text is cached at the end."""

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, DraftTree]:
        c, out = self.config, {}
        for req, k in zip(requests, num_tokens):
            live = self.live.get(req.request_id)
            if live is None:
                live = self.live[req.request_id] = _Live(req, self.depth)
                self.seen.pop(req.request_id, None)
            have = len(live.trie.seqs.get(0, ()))
            live.trie.extend(0, req.token_slice(have, req.num_tokens - have))
            if k <= 0:
                continue
            context = req.token_slice(max(0, req.num_tokens - self.depth), self.depth)
            d = best_draft([(live.trie, True), (self.global_trie, False)], context, k, self.depth,
                           c.suffix_decoding_max_spec_factor, c.suffix_decoding_min_token_prob)
            if d is not None:
                out[req.request_id] = d.tree
        return out

    def track(self, requests: list[DraftRequest]) -> None:
        for req in requests:
            if req.request_id not in self.live:
                self.seen[req.request_id] = req

    def forget(self, request_id: str) -> None:
        live = self.live.pop(request_id, None)
        req = live.request if live is not None else self.seen.pop(request_id, None)
        if req is None or self.max_cached <= 0:
            return
        sid = next(self._ids)
        self.global_trie.extend(sid, req.token_slice(0, req.num_tokens))
        self.global_trie.close(sid)
        self.cached.append(sid)
        while len(self.cached) > self.max_cached:
            self.global_trie.remove(self.cached.popleft())
