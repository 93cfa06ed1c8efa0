"""Prompt lookup (vLLM's `ngram`, Saxena's prompt lookup decoding): the longest suffix n-gram of
the request's tokens (prompt_lookup_max down to prompt_lookup_min) that occurred before proposes
the tokens that followed its most recent earlier occurrence.

With a tree budget (speculative_config.tree_budget), the matched n-gram's earlier occurrences
(up to OCCURRENCES, the latest first) all offer their continuations: merged into a trie, where
continuations that agree share nodes, and cut best-first to the budget, a node's rank being how
many occurrences pass through it (ties: the more recent first), so the top-1 chain is the
continuation most occurrences agree on.

Each request keeps an index, n-gram -> ends of its latest occurrences that have a continuation,
extended by the tokens new since the last step: O(new tokens x n-gram sizes) per step, never a
rescan of the context."""

from __future__ import annotations

import heapq

from hearth.spec_decode.proposer import DraftRequest, Proposer
from hearth.spec_decode.tree import DraftTree

OCCURRENCES = 8
"""Earlier occurrences of an n-gram kept per request: the branches a tree may offer."""


class NgramIndex:
    def __init__(self, n_min: int, n_max: int):
        self.n_min, self.n_max = n_min, n_max
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = {}
        """n-gram -> positions right after its latest occurrences (oldest first) followed by at
        least one token."""

    def extend(self, new: list[int]) -> None:
        toks, ends = self.tokens, self.ends
        start = len(toks)
        toks.extend(new)
        # an n-gram ending at e (exclusive) is registered once tokens[e] exists
        for e in range(max(start, 1), len(toks)):
            for n in range(self.n_min, min(self.n_max, e) + 1):
                seen = ends.setdefault(tuple(toks[e - n : e]), [])
                seen.append(e)
                if len(seen) > OCCURRENCES:
                    del seen[0]

    def _match(self) -> list[int]:
        """The ends of the longest suffix n-gram's earlier occurrences, latest first."""
        toks, L = self.tokens, len(self.tokens)
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            e = self.ends.get(tuple(toks[L - n :]))
            if e:
                return e[::-1]
        return []

    def propose(self, k: int) -> list[int]:
        ends = self._match()
        return self.tokens[ends[0] : ends[0] + k] if ends else []

    def propose_tree(self, budget: int, depth: int) -> DraftTree | None:
        """Up to `budget` nodes, `depth` deep, from every kept occurrence's continuation."""
        ends = self._match()
        if not ends:
            return None
        trie: dict[tuple[int, int], list[int]] = {}  # (trie parent, token) -> [id, count, recency]
        kids: dict[int, list[tuple[int, int]]] = {}
        for rank, e in enumerate(ends):
            at = -1
            for t in self.tokens[e : e + depth]:
                node = trie.get((at, t))
                if node is None:
                    node = trie[(at, t)] = [len(trie), 0, rank]
                    kids.setdefault(at, []).append((t, node[0]))
                node[1] += 1
                at = node[0]
        info = {v[0]: (key[1], v[1], v[2]) for key, v in trie.items()}  # id -> (token, count, recency)
        heap = [(-info[i][1], info[i][2], i) for _, i in kids.get(-1, [])]
        heapq.heapify(heap)
        index: dict[int, int] = {}  # trie id -> tree node
        parent_of = {v[0]: key[0] for key, v in trie.items()}
        tokens, parents, scores = [], [], []
        while heap and len(tokens) < budget:
            _, _, i = heapq.heappop(heap)
            index[i] = len(tokens)
            tokens.append(info[i][0])
            parents.append(index.get(parent_of[i], -1))
            scores.append(info[i][1] / len(ends))  # the share of occurrences that continue this way
            for _, c in kids.get(i, []):
                heapq.heappush(heap, (-info[c][1], info[c][2], c))
        return DraftTree(tokens, parents, scores)


class NgramProposer(Proposer, method="ngram"):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.indexes: dict[str, NgramIndex] = {}

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, list[int] | DraftTree]:
        out = {}
        for req, k in zip(requests, num_tokens):
            index = self.indexes.get(req.request_id)
            if index is None:
                c = self.config
                index = self.indexes[req.request_id] = NgramIndex(c.prompt_lookup_min, c.prompt_lookup_max)
            have = len(index.tokens)
            index.extend(req.token_slice(have, req.num_tokens - have))
            c = self.config
            draft = index.propose_tree(k, min(k, c.num_speculative_tokens)) if c.tree_budget else index.propose(k)
            if draft:
                out[req.request_id] = draft
        return out

    def forget(self, request_id: str) -> None:
        self.indexes.pop(request_id, None)
