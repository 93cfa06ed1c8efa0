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
rescan of the context.

An edit (a rename, a changed line) copies most of a text and changes a few spans. Past a changed
span the last n tokens occur nowhere before, so lookup alone has nothing to offer until n tokens
of the copy came back one step at a time. A CopyCursor follows where the output copies from: while
the copy holds it proposes what follows there; right after the output departs from it, it proposes
the copy from one token on (a changed token replaced by one) unless lookup knows better (the same
edit made earlier in the output), and picks the copy up again where the output's next token turns
up in the few tokens after the break. Where it picks it up it learns the edit (the copy's skipped
span -> the output's new one): a rename changes every occurrence, so the copy it proposes later
has the same substitution made wherever the old span comes again, and a draft runs on through the
next occurrence instead of breaking there (one rename cost a draft break and 1-3 steps at each
occurrence). An edit the output does not repeat (the old span copied unchanged) is forgotten.

The edits are the request's, not the cursor's: where a rename changes the tokens around it the
copy is often lost and found again, and the new cursor makes the renames the old one learned; with
the tokenizer at hand (Proposer.codec) they are made as word edits in the copy's text
(hearth.spec_decode.copy_edits), so a rename also holds in tokens it was not learned in. On the code
edit (Qwen2.5-Coder-1.5B, first sight, replayed by bench_spec_trace --replay) these took 62 steps to
23 (docs/speculative.md)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from hearth.spec_decode.copy_edits import Edits
from hearth.spec_decode.proposer import DraftRequest, Proposer
from hearth.spec_decode.tree import DraftTree

OCCURRENCES = 8
"""Earlier occurrences of an n-gram kept per request: the branches a tree may offer."""
RESYNC_WINDOW = 8
"""Tokens of the copy after a break searched for the output's next token (a changed span's length)."""
MIN_RUN = 3
"""Tokens copied in a row before a break is taken for an edit the copy resumes after (else the
cursor is dropped: the output was never copying there)."""
PATIENCE = 6
"""Output tokens after a break within which the copy must resume, else the cursor is dropped."""


@dataclass(slots=True)
class CopyCursor:
    at: int
    """tokens[at]: the next token of the copy (after a break: the first one the output left out)."""
    run: int = 0
    """Tokens copied in a row."""
    edit: int = 0
    """Output tokens since the copy broke (0: copying)."""
    broke: tuple[int, int] = (0, 0)
    """(copy position, output position) where the copy last broke."""
    subs: Edits = field(default_factory=Edits)
    """Edits learned at resyncs: a span of the copy -> what the output wrote instead (the request's:
    a cursor that takes over from a lost one keeps them)."""

    def advance(self, tokens: list[int], i: int) -> bool:
        """tokens[i], the output's next token, against the copy; False: the copy is lost."""
        t = tokens[i]
        if not self.edit and tokens[self.at] == t:
            if self.subs:  # the output kept a span it had changed before: not an edit to repeat
                for old in [o for o, n in self.subs.items()
                            if o[0] == t and n[:1] != (t,) and tuple(tokens[self.at:self.at + len(o)]) == o]:
                    del self.subs[old]
            self.at, self.run = self.at + 1, self.run + 1
            return True
        if not self.edit and self.run < MIN_RUN:
            return False
        if not self.edit:
            self.broke = (self.at, i)
        # the copy from the break on (from the token after it when copying: a left-out span)
        lo = self.at + (not self.edit)
        q = next((j for j in range(lo, min(self.at + RESYNC_WINDOW, i)) if tokens[j] == t), None)
        if q is not None:
            b, o = self.broke
            back = int(q == b and b > 0)  # nothing skipped (an insertion): the token before it comes along
            old, new = tuple(tokens[b - back:q]), tuple(tokens[o - back:i])
            if old and old != new:
                self.subs[old] = new
            self.at, self.run, self.edit = q + 1, 1, 0
            return True
        self.edit += 1
        return self.edit <= PATIENCE

    def start(self) -> int:
        """Where the proposal starts: the copy's next token, or after a break the one after it."""
        return self.at + 1 if self.edit else self.at



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

    def match(self) -> list[int]:
        """The ends of the longest suffix n-gram's earlier occurrences, latest first."""
        toks, L = self.tokens, len(self.tokens)
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            e = self.ends.get(tuple(toks[L - n :]))
            if e:
                return e[::-1]
        return []

    def propose(self, k: int, ends: list[int] | None = None) -> list[int]:
        """The continuation of ends[0] (default: the longest match's latest occurrence)."""
        ends = self.match() if ends is None else ends
        return self.tokens[ends[0] : ends[0] + k] if ends else []

    def propose_tree(self, budget: int, depth: int, ends: list[int] | None = None) -> DraftTree | None:
        """Up to `budget` nodes, `depth` deep, from the continuations of ends (default: every kept
        occurrence of the longest match), ranked in that order on ties."""
        ends = self.match() if ends is None else ends
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
    def __init__(self, config, codec=None) -> None:
        super().__init__(config, codec)
        self.indexes: dict[str, NgramIndex] = {}
        self.cursors: dict[str, CopyCursor] = {}
        self.edits: dict[str, Edits] = {}
        """Per request, the edits its cursors learned (CopyCursor.subs): a copy lost where a rename
        changed the tokens around it, and found again, still makes the rename."""

    def _starts(self, rid: str, index: NgramIndex, have: int) -> list[int]:
        """Where drafts start, best first: the copy's next token while it holds, else the latest
        occurrences of the longest match, the copy after its break last."""
        cursor = self.cursors.get(rid)
        if cursor is not None and not all(cursor.advance(index.tokens, i) for i in range(have, len(index.tokens))):
            del self.cursors[rid]
            cursor = None
        ends = index.match()
        if cursor is None:
            if ends:
                self.cursors[rid] = CopyCursor(ends[0], subs=self.edits.setdefault(rid, Edits()))
            return ends
        first = cursor.start()
        if first >= len(index.tokens):
            return ends
        if cursor.edit > 1:  # the changed span is longer than a token: wait for the copy's return
            return ends
        rest = [e for e in ends if e != first]
        return [first, *rest] if not cursor.edit or not ends else [*rest, first]

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, list[int] | DraftTree]:
        out, c = {}, self.config
        for req, k in zip(requests, num_tokens):
            index = self.indexes.get(req.request_id)
            if index is None:
                index = self.indexes[req.request_id] = NgramIndex(c.prompt_lookup_min, c.prompt_lookup_max)
            have = len(index.tokens)
            index.extend(req.token_slice(have, req.num_tokens - have))
            starts = self._starts(req.request_id, index, have)
            cursor = self.cursors.get(req.request_id)
            if c.tree_budget:
                draft = index.propose_tree(k, min(k, c.k), starts)
            elif starts and cursor is not None and starts[0] == cursor.start() and not cursor.edit:
                draft = cursor.subs.copy_of(index.tokens, starts[0], k, self.codec)  # copying: with the edits learned
            else:
                draft = index.propose(k, starts)
            if draft:
                out[req.request_id] = draft
        return out

    def forget(self, request_id: str) -> None:
        self.indexes.pop(request_id, None)
        self.cursors.pop(request_id, None)
        self.edits.pop(request_id, None)
