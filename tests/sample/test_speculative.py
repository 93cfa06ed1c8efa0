"""Verification of draft tokens (hearth.sample.speculative): greedy accepts exactly plain greedy's
tokens; rejection sampling commits tokens distributed as the target's (chi-square, with negative
controls that the same statistic rejects the classic mistakes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.speculative import verify
from hearth.sampling_params import SamplingParams
from tests.sample.reference import N, check, filtered

V = 16
ROW0 = np.float32([1.5, 0.3, -0.4, 2.1, 0.9, -1.2, 0.0, 1.1, -2.0, 0.6, -0.7, 1.8, -0.1, 0.4, -1.6, 0.2])
ROW1 = ROW0[::-1].copy()


def run(params: SamplingParams, draft: list[int], n: int = N, seed: int = 0):
    """n sequences, each with rows (ROW0, ROW1, ...) and the same draft; one seeded generator."""
    rows = [ROW0, ROW1, ROW0][: len(draft) + 1]
    logits = torch.tensor(np.stack(rows * n))
    g = torch.Generator().manual_seed(seed)
    k = len(draft) + 1
    out, _, _ = verify(logits, [params] * (k * n), [([], [])] * (k * n), [g] * n, [draft] * n, False)
    return out


def test_greedy_accepts_while_drafts_are_the_first_maximum():
    p = SamplingParams(temperature=0)
    logits = torch.tensor(np.stack([ROW0, ROW1, ROW0]))  # maxima: 3, 12, 3
    for draft, want in [([3, 12], [3, 12, 3]), ([3, 5], [3, 12]), ([4, 12], [3]), ([], [3])]:
        rows = logits[: len(draft) + 1].clone()
        out, _, _ = verify(rows, [p] * len(rows), [([], [])] * len(rows), [None], [draft], False)
        assert out == [want], draft


def test_greedy_rows_see_the_drafts_before_them_in_their_history():
    """A repetition penalty on row 1 counts draft 0: verify == plain decoding after that token."""
    p = SamplingParams(temperature=0, repetition_penalty=4.0)
    logits = torch.tensor(np.stack([ROW0, ROW0]))  # plain: row 0 -> 3; after 3, 3 is penalized -> 11
    out, _, _ = verify(logits, [p, p], [([0], []), ([0], [3])], [None], [[3]], False)
    assert out == [[3, 11]]


@pytest.mark.parametrize("draft_token", [3, 11, 8])
def test_first_committed_token_is_distributed_as_the_target(draft_token):
    """Whatever the (point-mass) draft, the first committed token ~ p0. Control: after a rejection,
    drawing from p0 instead of the residual (x not taken out) gives p0(x) delta_x + (1 - p0(x)) p0."""
    params = SamplingParams(temperature=1.0)
    out = run(params, [draft_token])
    first = np.bincount([o[0] for o in out], minlength=V)
    p0 = filtered(ROW0, 1.0)
    x = draft_token
    resample_from_p = p0[x] * np.eye(V)[x] + (1 - p0[x]) * p0
    check(first, p0, resample_from_p)


def test_after_an_accepted_draft_the_bonus_is_distributed_as_its_row():
    params = SamplingParams(temperature=1.0)
    out = run(params, [3])
    second = np.bincount([o[1] for o in out if len(o) == 2], minlength=V)
    assert abs(second.sum() / N - filtered(ROW0, 1.0)[3]) < 0.02  # accepted with probability p0(3)
    check(second, filtered(ROW1, 1.0), filtered(ROW0, 1.0))


def test_a_draft_the_filters_rule_out_is_never_accepted():
    params = SamplingParams(temperature=0.8, top_k=3)  # top 3 of ROW0: 3, 11, 0
    out = run(params, [8])
    assert all(len(o) == 1 for o in out)
    check(np.bincount([o[0] for o in out], minlength=V), filtered(ROW0, 0.8, top_k=3))


def test_seeded_verification_is_reproducible():
    params = SamplingParams(temperature=1.0, seed=3)
    assert run(params, [3, 12], n=200, seed=5) == run(params, [3, 12], n=200, seed=5)
