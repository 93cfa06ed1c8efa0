"""Rejection sampling against a real draft distribution q (a draft model's): drafts x ~ q accepted
with min(1, p(x) / q(x)), rejections drawn from norm(max(p - q, 0)): the first committed token is
distributed as the target's p, and the negative control (rejections drawn from p itself, the
classic mistake) is rejected by the same statistic."""

from __future__ import annotations

import numpy as np
import torch

from hearth.sample.speculative import verify
from hearth.sampling_params import SamplingParams
from tests.sample.reference import N, check, filtered
from tests.sample.test_speculative import ROW0, ROW1, V


def run_with_q(q: np.ndarray, n: int = N, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """n sequences with rows (ROW0, ROW1) and one draft each, drawn from q -> (committed, drafts)."""
    g = torch.Generator().manual_seed(seed)
    qt = torch.tensor(q, dtype=torch.float32)
    drafts = torch.multinomial(qt.expand(n, V), 1, generator=torch.Generator().manual_seed(seed + 1))
    drafts = drafts[:, 0].tolist()
    logits = torch.tensor(np.stack([ROW0, ROW1] * n))
    p = SamplingParams(temperature=1.0)
    out, _, _ = verify(logits, [p] * (2 * n), [([], [])] * (2 * n), [g] * n, [[x] for x in drafts], False,
                       draft_probs=[qt.unsqueeze(0)] * n)
    return out, drafts


def test_first_token_is_the_targets_with_a_real_draft_distribution():
    p0 = filtered(ROW0, 1.0)
    q = filtered(ROW1, 1.0)  # a draft that disagrees with the target: many rejections
    out, _ = run_with_q(q)
    first = np.bincount([o[0] for o in out], minlength=V)
    accept = np.minimum(1.0, p0 / q)
    # control: the rejected draws taken from p instead of the residual
    resample_from_p = q * accept + (1 - (q * accept).sum()) * p0
    check(first, p0, resample_from_p)


def test_a_draft_distribution_equal_to_the_target_is_always_accepted():
    q = filtered(ROW0, 1.0)
    out, drafts = run_with_q(q, n=2000)
    assert all(o[0] == x and len(o) == 2 for o, x in zip(out, drafts))


def test_first_token_is_the_targets_with_a_restricted_draft_vocabulary():
    """A reduced draft head (speculative_config.draft_vocab) draws from q restricted to part of the
    vocabulary and renormalized, zero elsewhere: tokens outside it are reached only through the
    residual, and the first committed token is still distributed as p."""
    p0 = filtered(ROW0, 1.0)
    q = filtered(ROW1, 1.0)
    q[[0, 3, 11]] = 0.0  # the target's three likeliest tokens are outside the draft's set
    q /= q.sum()
    out, drafts = run_with_q(q)
    assert not {0, 3, 11} & set(drafts)
    first = np.bincount([o[0] for o in out], minlength=V)
    with np.errstate(divide="ignore"):
        accept = np.minimum(1.0, p0 / q)
    resample_from_p = q * accept + (1 - (q * accept).sum()) * p0  # control: rejections drawn from p
    check(first, p0, resample_from_p)
