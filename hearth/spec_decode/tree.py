"""A token tree of drafts: what a proposer offers to follow a request's committed tokens.

Nodes are in topological order: parents[i] < i, and -1 means the node follows the last committed
token (the root). Siblings are ranked: a node's first child is its proposer's best guess, so the
chain of first children (`chain()`) is the top-1 path, what a chain-only verifier takes. A chain
of k drafts is the tree with parents [-1, 0, 1, ..., k - 2]."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DraftTree:
    tokens: list[int]
    parents: list[int]
    scores: list[float] = field(default_factory=list)
    """Optional per node: the proposer's probability of the path to it (for budgets and metrics)."""

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.tokens):
            raise ValueError(f"DraftTree: {len(self.tokens)} tokens but {len(self.parents)} parents")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"DraftTree: node {i}'s parent {p} is not an earlier node or -1")

    @classmethod
    def from_chain(cls, tokens: list[int]) -> DraftTree:
        return cls(list(tokens), list(range(-1, len(tokens) - 1)))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def depths(self) -> list[int]:
        """[n]: 1 for the root's children, 2 for theirs, ..."""
        d: list[int] = []
        for p in self.parents:
            d.append(1 if p < 0 else d[p] + 1)
        return d

    def path(self, i: int) -> list[int]:
        """Node indices from the root's child down to node i."""
        out = []
        while i >= 0:
            out.append(i)
            i = self.parents[i]
        return out[::-1]

    def chain(self) -> list[int]:
        """The tokens of the top-1 path (first child at every level)."""
        out, at = [], -1
        for i, p in enumerate(self.parents):
            if p == at:
                out.append(self.tokens[i])
                at = i
        return out
