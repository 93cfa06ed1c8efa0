"""DDTree's best-first token tree from a drafter's per-position top-k (Ringel & Romano's DDTree, over
a block drafter's marginals): a node's score is the product of its path's draft probabilities; the
tree is seeded with the drafted chain and grown, best score first, within a node budget. A node at
depth d takes its children from position d's top-k whatever its own token: the draft computed each
position once, along the chain, so branches off it reuse the chain's distributions (an
approximation that only costs acceptance: verification stays exact)."""

from __future__ import annotations

import heapq
import itertools


def best_first_tree(chain: list[int], chain_probs: list[float], top: list[list[tuple[int, float]]],
                    budget: int) -> tuple[list[int], list[int], list[float]]:
    """chain: the drafted tokens (position j's is chain[j], with probability chain_probs[j]); top[j]:
    position j's most likely (token, probability), best first; budget: most nodes.
    -> (tokens, parents, scores) in hearth.spec_decode.tree.DraftTree's layout: the chain's nodes
    first (so each chain node is its parent's first child), then the rest in the order taken."""
    n = min(len(chain), budget)
    tokens, parents, scores = list(chain[:n]), list(range(-1, n - 1)), []
    score = 1.0
    for p in chain_probs[:n]:
        score *= p
        scores.append(score)
    taken = {(j - 1, t) for j, t in enumerate(tokens)}  # (parent, token): no two equal siblings
    heap: list[tuple[float, int, int, int, int]] = []  # (-score, order, parent, its child's position, token)
    order = itertools.count()  # ties: the first offered first

    def offer(node: int, depth: int, s: float) -> None:
        for t, p in top[depth] if depth < len(top) else ():
            heapq.heappush(heap, (-s * p, next(order), node, depth, t))

    offer(-1, 0, 1.0)
    for j in range(n):
        offer(j, j + 1, scores[j])
    while heap and len(tokens) < budget:
        neg, _, parent, depth, t = heapq.heappop(heap)
        if (parent, t) in taken:
            continue
        taken.add((parent, t))
        tokens.append(t)
        parents.append(parent)
        scores.append(-neg)
        offer(len(tokens) - 1, depth + 1, -neg)
    return tokens, parents, scores
