"""Prompt lookup (vLLM's `ngram`, Saxena's prompt lookup decoding): the longest suffix n-gram of
the request's tokens (prompt_lookup_max down to prompt_lookup_min) that occurred before proposes
the tokens that followed its most recent earlier occurrence.

Each request keeps an index, n-gram -> end of its latest occurrence that has a continuation,
extended by the tokens new since the last step: O(new tokens x n-gram sizes) per step, never a
rescan of the context."""

from __future__ import annotations

from hearth.spec_decode.proposer import DraftRequest, Proposer


class NgramIndex:
    def __init__(self, n_min: int, n_max: int):
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self.last: dict[tuple[int, ...], int] = {}
        """n-gram -> position right after its latest occurrence followed by at least one token."""

    def extend(self, new: list[int]) -> None:
        toks, last = self.tokens, self.last
        start = len(toks)
        toks.extend(new)
        # an n-gram ending at e (exclusive) is registered once tokens[e] exists
        for e in range(max(start, 1), len(toks)):
            for n in range(self.n_min, min(self.n_max, e) + 1):
                last[tuple(toks[e - n : e])] = e

    def propose(self, k: int) -> list[int]:
        toks, L = self.tokens, len(self.tokens)
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            e = self.last.get(tuple(toks[L - n :]))
            if e is not None:
                return toks[e : e + k]
        return []


class NgramProposer(Proposer, method="ngram"):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.indexes: dict[str, NgramIndex] = {}

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, list[int]]:
        out = {}
        for req, k in zip(requests, num_tokens):
            index = self.indexes.get(req.request_id)
            if index is None:
                c = self.config
                index = self.indexes[req.request_id] = NgramIndex(c.prompt_lookup_min, c.prompt_lookup_max)
            have = len(index.tokens)
            index.extend(req.token_slice(have, req.num_tokens - have))
            draft = index.propose(k)
            if draft:
                out[req.request_id] = draft
        return out

    def forget(self, request_id: str) -> None:
        self.indexes.pop(request_id, None)
