"""Verification of token trees (hearth.sample.speculative): greedy walks the argmax through the
tree; sampled, SpecInfer's multi-draft rule for point-mass children commits tokens distributed as
the target's at every level (chi-square, with negative controls: accepting each child with its
unrenormalized p(x), or drawing a rejected root from p again, are rejected by the same test)."""

from __future__ import annotations

import numpy as np
import torch

from hearth.sample.speculative import verify
from hearth.sampling_params import SamplingParams
from tests.sample.reference import N, check, filtered
from tests.sample.test_speculative import ROW0, ROW1

V = 16
#        root (row 0: ROW0)
#      /    |     \
#    0:3   1:11   2:8        rows 1, 2, 3: ROW1, ROW0, ROW0
#     |
#    3:12                    row 4: ROW1
TOKENS, PARENTS = [3, 11, 8, 12], [-1, -1, -1, 0]
ROWS = [ROW0, ROW1, ROW0, ROW0, ROW1]


def run(params: SamplingParams, n: int = N, seed: int = 0):
    logits = torch.tensor(np.stack(ROWS * n))
    g = torch.Generator().manual_seed(seed)
    r = len(ROWS)
    return verify(logits, [params] * (r * n), [([], [])] * (r * n), [g] * n, [TOKENS] * n, False, None,
                  [PARENTS] * n)


def test_greedy_takes_the_child_equal_to_each_rows_argmax():
    p = SamplingParams(temperature=0)
    # maxima: ROW0 -> 3, ROW1 -> 12: root -> node 0 (3) -> node 3 (12) -> bonus: node 3's row, 12
    out, _, rows = run(p, n=1)
    assert out == [[3, 12, 12]] and rows == [[0, 1, 4]]
    # the argmax as a later sibling: 3 is the third child now, its subtree goes with it
    logits = torch.tensor(np.stack([ROW0, ROW0, ROW0, ROW1, ROW0]))
    out, _, rows = verify(logits, [p] * 5, [([], [])] * 5, [None], [[11, 8, 3, 12]], False, None, [[-1, -1, -1, 2]])
    assert out == [[3, 12, 3]] and rows == [[0, 3, 4]]
    out, _, _ = verify(logits, [p] * 5, [([], [])] * 5, [None], [[11, 8, 5, 12]], False, None, [[-1, -1, -1, 2]])
    assert out == [[3]]  # no child is the argmax: the bonus alone


def test_greedy_tree_rows_see_their_path_in_their_history():
    """Node 1 (3, the second root child) is accepted: the bonus comes from its row, whose
    history holds its path (3), penalized there, not node 0's (5)."""
    p = SamplingParams(temperature=0, repetition_penalty=4.0)
    logits = torch.tensor(np.stack([ROW0, ROW0, ROW0]))
    hist = [([0], []), ([0], [5]), ([0], [3])]
    out, _, rows = verify(logits, [p] * 3, hist, [None], [[5, 3]], False, None, [[-1, -1]])
    assert out == [[3, 11]] and rows == [[0, 2]]  # after 3, 3 is penalized: 11


def unrenormalized(p, children):
    """The classic mistake: each child accepted with its p(x), not p'(x); then p without them."""
    out, left = np.zeros(V), 1.0
    for x in children:
        out[x] += left * p[x]
        left *= 1 - p[x]
    rest = p.copy()
    rest[children] = 0
    return out + left * rest / rest.sum()


def test_first_committed_token_is_distributed_as_the_target():
    params = SamplingParams(temperature=1.0)
    out, _, _ = run(params)
    first = np.bincount([o[0] for o in out], minlength=V)
    p0 = filtered(ROW0, 1.0)
    children = [3, 11, 8]
    # each child is accepted with probability p0(x) overall; all rejected, the mistake draws from p0
    in_c = np.isin(np.arange(V), children)
    resample_from_p = np.where(in_c, p0, 0) + (1 - p0[children].sum()) * p0
    check(first, p0, unrenormalized(p0, children), resample_from_p)


def test_after_an_accepted_child_the_next_token_is_distributed_as_its_row():
    params = SamplingParams(temperature=1.0)
    out, _, _ = run(params)
    after3 = [o[1] for o in out if o[0] == 3 and len(o) >= 2]
    assert abs(len(after3) / N - filtered(ROW0, 1.0)[3]) < 0.02  # the first child: accepted with p0(3)
    # node 0's row is ROW1, where node 3 (12) is its only child: the token after 3 ~ ROW1
    check(np.bincount(after3, minlength=V), filtered(ROW1, 1.0), filtered(ROW0, 1.0))
    after11 = [o[1] for o in out if o[0] == 11]  # node 1 has no children: its row's bonus, ROW0
    check(np.bincount(after11, minlength=V), filtered(ROW0, 1.0), filtered(ROW1, 1.0))


def test_seeded_tree_verification_is_reproducible():
    params = SamplingParams(temperature=1.0, seed=3)
    assert run(params, n=200, seed=5)[0] == run(params, n=200, seed=5)[0]


def draft_model_tree(n: int, q: np.ndarray, seed: int = 0):
    """n trees as the draft model builds them: the chain child x ~ q (the first root child), then
    q's top two other tokens as point-mass siblings."""
    rng = np.random.default_rng(seed)
    xs = rng.choice(V, size=n, p=q / q.sum())
    order = np.argsort(-q, kind="stable")
    return [[int(x)] + [int(t) for t in order if t != x][:2] for x in xs]


def test_a_draft_models_tree_commits_the_target_distribution_with_its_chain_drawn_from_q():
    """The chain child by min(1, p/q) with residual norm(max(p - q, 0)), then the siblings as point
    masses on it: the first token ~ p0. Control: a point-mass residual (x zeroed from p) after a
    q-rule rejection."""
    params = SamplingParams(temperature=1.0)
    p0, q = filtered(ROW0, 1.0), filtered(ROW1, 1.0)
    trees = draft_model_tree(N, q)
    logits = torch.tensor(np.stack([ROW0, ROW1, ROW0, ROW0] * N))
    qt = torch.tensor(q, dtype=torch.float32).unsqueeze(0)  # [1, V]: the chain is one deep
    g = torch.Generator().manual_seed(1)
    out, _, _ = verify(logits, [params] * (4 * N), [([], [])] * (4 * N), [g] * N, trees, False, [qt] * N,
                       [[-1, -1, -1]] * N)
    first = np.bincount([o[0] for o in out], minlength=V)
    wrong = np.zeros(V)
    for x in range(V):
        a = min(1.0, p0[x] / q[x])
        rest = p0.copy()
        rest[x] = 0
        wrong += q[x] * (a * np.eye(V)[x] + (1 - a) * rest / rest.sum())
    check(first, p0, wrong)


def test_with_q_equal_to_p_the_chain_child_is_always_accepted():
    """Where the draft is the target (q = p), min(1, p/q) = 1: the q rule keeps the chain's
    acceptance that point masses (accepted with p(x)) would lose."""
    params = SamplingParams(temperature=1.0)
    p0 = filtered(ROW0, 1.0)
    trees = draft_model_tree(500, p0, seed=2)
    logits = torch.tensor(np.stack([ROW0, ROW1, ROW0, ROW0] * 500))
    qt = torch.softmax(torch.tensor(ROW0), -1).unsqueeze(0)  # the sampler's own p0 (float32)
    out, _, _ = verify(logits, [params] * 2000, [([], [])] * 2000, [torch.Generator().manual_seed(3)] * 500, trees,
                       False, [qt] * 500, [[-1, -1, -1]] * 500)
    assert all(o[0] == t[0] and len(o) == 2 for o, t in zip(out, trees))
