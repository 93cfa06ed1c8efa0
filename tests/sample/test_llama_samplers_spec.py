"""llama.cpp's samplers under batching and speculation: a seeded row with them is the same alone or batched;
a verify row's history holds the drafts before it, so DRY and the penalty window judge a drafted repeat as
plain decoding judges it generated (greedy verification == plain greedy); and XTC's mixture is what rejection
sampling reads, so the committed token follows it (negative control: the distribution without XTC)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.sampler import sample, target_probs
from hearth.sample.speculative import verify
from hearth.sampling_params import SamplingParams
from tests.sample.reference import N, check
from tests.sample.test_seeds_and_batching import NEIGHBOURS, decode

LLAMA = SamplingParams(temperature=0.9, seed=42, repeat_last_n=8, repetition_penalty=1.3, dry_multiplier=0.8,
                       dry_allowed_length=1, dry_penalty_last_n=16, dry_breaker_ids={3: [[]]}, xtc_probability=0.5,
                       xtc_threshold=0.05, top_n_sigma=2.0)


@pytest.mark.parametrize("position", [0, 3, 6])
def test_seeded_row_with_them_is_the_same_alone_and_batched(position):
    alone = decode([LLAMA], 0, [42])
    batch = NEIGHBOURS[:position] + [LLAMA] + NEIGHBOURS[position:]
    seeds = [None, 5, None, None, 9, None]
    assert decode(batch, position, seeds[:position] + [42] + seeds[position:]) == alone
    assert len(set(alone)) > 5  # it really sampled


DRY_GREEDY = SamplingParams(temperature=0, dry_multiplier=3.0, dry_base=2.0, dry_allowed_length=1, dry_penalty_last_n=-1,
                            dry_breaker_ids={}, repeat_last_n=3, repetition_penalty=1.5)


@pytest.mark.parametrize("seed", range(8))
def test_greedy_verification_equals_plain_decoding(seed):
    """Drafts are each row's raw argmax (what a drafter copying the repeat would propose): DRY moves some rows
    off them; verification commits exactly what plain decoding, one token a step, would."""
    rng = np.random.default_rng(seed)
    V, k = 6, 5
    rows = torch.tensor(rng.normal(size=(k + 1, V)) * 2, dtype=torch.float32)
    output = [int(t) for t in rng.integers(0, V, size=6)]
    plain = []
    for i in range(k + 1):  # plain decoding: row i after the tokens committed so far
        tok, _ = sample(rows[i:i + 1].clone(), [DRY_GREEDY], [None], [([1, 2], output + plain)])
        plain.append(int(tok))
    drafts = rows[:k].argmax(-1).tolist()
    histories = [([1, 2], output + drafts[:i]) for i in range(k + 1)]
    (out,), _, _ = verify(rows.clone(), [DRY_GREEDY] * (k + 1), histories, [None], [drafts], False)
    a = next((i for i in range(k) if drafts[i] != plain[i]), k)
    assert out == plain[:a + 1]


ROW = np.log(np.float32([0.4, 0.3, 0.2, 0.1]))


@pytest.mark.parametrize("draft", [0, 1, 3])
def test_rejection_sampling_follows_xtc_s_mixture(draft):
    p = SamplingParams(xtc_probability=0.4, xtc_threshold=0.25)
    logits = torch.tensor(ROW).repeat(2 * N, 1)
    g = torch.Generator().manual_seed(0)
    out, _, _ = verify(logits, [p] * (2 * N), [([], [])] * (2 * N), [g] * N, [[draft]] * N, False)
    first = np.bincount([o[0] for o in out], minlength=4)
    exact = target_probs(torch.tensor(ROW).unsqueeze(0), [p])[0].double().numpy()
    assert np.allclose(exact, 0.6 * np.float64([0.4, 0.3, 0.2, 0.1]) + 0.4 * np.float64([0, 0.5, 1 / 3, 1 / 6]))
    check(first, exact, np.float64([0.4, 0.3, 0.2, 0.1]))
