"""The grammar follows each branch of a token tree (grammar_matchers.constrain_tree): every node's row is
masked by the grammar state after its path, a node the grammar forbids is masked out of its
parent's row and its subtree never visited, and the matcher ends where it began (the runner then
feeds it only the committed path). A fake matcher whose rule is exact: after token t, only t + 1
and t + 2 are allowed (token 0 first: 1 or 2)."""

from __future__ import annotations

import torch

from hearth.runner import grammar_matchers
from hearth.runner.messages import ScheduledSequence
from hearth.sampling_params import SamplingParams, StructuredOutput

V = 8


class StepMatcher:
    error = None  # it never gives up (GrammarMatcher.error)

    def __init__(self):
        self.seen: list[int] = [0]

    def allowed(self) -> set[int]:
        return {self.seen[-1] + 1, self.seen[-1] + 2}

    def bitmask(self) -> bytes:
        word = sum(1 << t for t in self.allowed() if t < V)
        return word.to_bytes(4, "little")

    def accept(self, t: int) -> bool:
        assert t in self.allowed(), (self.seen, t)
        self.seen.append(t)
        return True

    def valid_prefix(self, tokens: list[int]) -> int:
        n, last = 0, self.seen[-1]
        for t in tokens:
            if t not in (last + 1, last + 2):
                break
            n, last = n + 1, t
        return n

    def rollback(self, n: int) -> None:
        del self.seen[len(self.seen) - n:]


def test_each_node_row_is_masked_by_its_paths_grammar_state():
    #        root (state after 0: 1, 2 allowed)
    #      /     |     \
    #    0:1    1:2    2:5 (forbidden)
    #     |      |       |
    #    3:3    4:4     5:6 (never visited)
    tokens, parents = [1, 2, 5, 3, 4, 6], [-1, -1, -1, 0, 1, 2]
    m = StepMatcher()

    s = ScheduledSequence("a", [0], 5, [0], True, SamplingParams(structured_output=StructuredOutput(regex="x")), [],
                          spec_token_ids=tokens, spec_parents=parents)
    logits = torch.zeros(1 + len(tokens), V)
    grammar_matchers.constrain_tree({"a": m}, None, s, logits, 0)
    allowed = [set(torch.nonzero(row > float("-inf")).flatten().tolist()) for row in logits]
    assert allowed[0] == {1, 2}  # the root row: node 2's token 5 is masked out, so rejected
    assert allowed[1] == {2, 3} and allowed[2] == {3, 4}  # after 1; after 2
    assert allowed[3] == set(range(V))  # node 2's row: never reached, left alone
    assert allowed[4] == {4, 5} and allowed[5] == {5, 6}  # after 1 3; after 2 4
    assert allowed[6] == set(range(V))  # under the forbidden node
    assert m.seen == [0]  # back where it began
