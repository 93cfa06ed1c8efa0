"""A bounded-depth suffix trie with occurrence counts over token sequences, the structure of
SuffixDecoding (Oliaro et al., arXiv 2411.04975): the node of a token string u (1 <= |u| <= depth)
counts u's occurrences in the sequences held, so count(u + [v]) / count(u) estimates P(v | u).

Space: a string that occurs once is not spelled out node by node. It ends in a leaf, the tuple
(sequence id, end of its occurrence), and whatever follows it is read from that sequence. Memory
grows with the text that repeats, not with length x depth. A second occurrence passing a leaf
turns one level of it into a node (count 2) whose only child is again a leaf.

Appending a token counts the `depth` strings that end at it, each from the node reached for the
same start one token earlier: O(depth) per token, O(len x depth) to remove a sequence."""

from __future__ import annotations

from array import array


class Node:
    __slots__ = ("count", "children")

    def __init__(self, count: int):
        self.count = count
        self.children: dict[int, Node | tuple[int, int]] | None = None


State = Node | tuple[int, int]
"""Where a matched string ends: its node, or (sequence id, index of the token after it) inside a
leaf (a string occurring once)."""


class SuffixTrie:
    def __init__(self, depth: int):
        self.depth = depth
        self.root = Node(0)
        self.seqs: dict[int, array] = {}
        self._open: dict[int, list[list]] = {}
        """sequence id -> [start, deepest node known on the path of seq[start:], its depth] for the
        starts whose string is still shorter than depth (they grow with each appended token)."""

    def __len__(self) -> int:
        return len(self.seqs)

    def is_empty(self) -> bool:
        return not self.seqs and not self.root.children

    def extend(self, sid: int, tokens) -> None:
        """Append tokens to sequence sid (a new id starts a sequence)."""
        seq = self.seqs.get(sid)
        if seq is None:
            seq = self.seqs[sid] = array("l")
            self._open[sid] = []
        entries, D = self._open[sid], self.depth
        for t in tokens:
            n = len(seq)
            seq.append(t)
            entries.append([n, self.root, 0])
            keep = []
            for e in entries:
                s, node, d = e
                length = n + 1 - s  # of the string seq[s:n+1], counted now
                while d < length - 1:  # down the nodes made since, along seq[s:n]
                    ch = node.children[seq[s + d]]
                    if type(ch) is tuple:  # our own leaf: seq[s:n+1] extends it implicitly
                        break
                    node, d = ch, d + 1
                else:
                    e[1], e[2] = self._count(node, d, t, sid, n + 1)
                if length < D:
                    keep.append(e)
            entries[:] = keep

    def _count(self, node: Node, d: int, t: int, sid: int, end: int) -> tuple[Node, int]:
        """One more occurrence of node's string + [t], ending at seq[sid][end - 1]."""
        if node.children is None:
            node.children = {}
        ch = node.children.get(t)
        if ch is None:
            node.children[t] = (sid, end)
            return node, d
        if type(ch) is tuple:  # a string seen once before: spell one level of it out
            other, p = ch
            ch = node.children[t] = Node(2)
            oseq = self.seqs[other]
            if d + 1 < self.depth and p < len(oseq):
                ch.children = {oseq[p]: (other, p + 1)}
            return ch, d + 1
        ch.count += 1
        return ch, d + 1

    def close(self, sid: int) -> None:
        """Sequence sid takes no more tokens."""
        self._open.pop(sid, None)

    def remove(self, sid: int) -> None:
        """Take sequence sid's occurrences out, exactly: the counts are as if it never came."""
        seq = self.seqs[sid]
        D = self.depth
        for s in range(len(seq)):
            node = self.root
            for d in range(min(D, len(seq) - s)):
                tok = seq[s + d]
                ch = node.children[tok]
                if type(ch) is tuple or ch.count == 1:  # only this occurrence below: drop it all
                    del node.children[tok]
                    if not node.children:
                        node.children = None
                    break
                ch.count -= 1
                node = ch
        del self.seqs[sid]
        self._open.pop(sid, None)

    def locate(self, pattern: list[int]) -> State | None:
        """Where pattern (at most depth tokens) ends in the trie; None if it never occurred."""
        node, i, n = self.root, 0, len(pattern)
        while i < n:
            ch = node.children.get(pattern[i]) if node.children else None
            if ch is None:
                return None
            i += 1
            if type(ch) is tuple:
                sid, p = ch
                rest = pattern[i:]
                if list(self.seqs[sid][p : p + len(rest)]) != rest:
                    return None
                return (sid, p + len(rest))
            node = ch
        return node

    @staticmethod
    def count(state: State) -> int:
        return 1 if type(state) is tuple else state.count

    def children(self, state: State) -> list[tuple[int, State, int]]:
        """[(token, its state, its count)] of the strings one token longer."""
        if type(state) is tuple:
            sid, p = state
            seq = self.seqs[sid]
            return [(seq[p], (sid, p + 1), 1)] if p < len(seq) else []
        if not state.children:
            return []
        return [(t, ch, 1 if type(ch) is tuple else ch.count) for t, ch in state.children.items()]

    def substring_counts(self) -> dict[tuple[int, ...], int]:
        """Every string held, spelled out with its count (for tests: slow, exact)."""
        out: dict[tuple[int, ...], int] = {}
        stack: list[tuple[State, tuple[int, ...]]] = [(self.root, ())]
        while stack:
            state, path = stack.pop()
            if len(path) >= self.depth:
                continue
            for t, ch, c in self.children(state):
                out[path + (t,)] = c
                stack.append((ch, path + (t,)))
        return out

    def num_nodes(self) -> int:
        """Nodes and leaves stored (what memory grows with)."""
        n, stack = 0, [self.root]
        while stack:
            node = stack.pop()
            for ch in (node.children or {}).values():
                n += 1
                if type(ch) is Node:
                    stack.append(ch)
        return n
