"""typical_p: locally typical sampling (llama.cpp's llama_sampler_typical), checked against
distributions computed by hand and against the rule written out in numpy, and on the routes that take it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hearth.sample.sampler import filter_top_k_top_p_min_p, target_probs
from hearth.sampling_params import InvalidSamplingParams, SamplingParams
from tests.sample.reference import check, draw, softmax

# p = [1/2, 1/4, 1/8, 1/8]: H = 1.75 ln 2; |-ln p - H| = [0.75, 0.25, 1.25, 1.25] ln 2, so the most
# typical token is the second, then the first, then the two 1/8s (ties: id order)
HALVES = np.log(np.float32([0.5, 0.25, 0.125, 0.125]))
BY_HAND = {  # typical_p -> the distribution sampled, renormalized over what is kept
    0.2: [0, 1, 0, 0],  # 1/4 alone exceeds 0.2
    0.5: [2 / 3, 1 / 3, 0, 0],  # 1/4, then 1/2: 3/4 > 0.5
    0.8: [4 / 7, 2 / 7, 1 / 7, 0],  # 3/4 is not > 0.8; with the first 1/8 (id 2) 7/8 is
    1.0: [1 / 2, 1 / 4, 1 / 8, 1 / 8],  # off
}


def filtered_probs(logits, typical_p, top_k=0, top_p=1.0, min_p=0.0) -> np.ndarray:
    x = torch.tensor(np.asarray(logits, dtype=np.float32)).unsqueeze(0)
    out = filter_top_k_top_p_min_p(x, torch.tensor([top_k]), torch.tensor([top_p]), torch.tensor([min_p]),
                                   torch.tensor([typical_p]))
    return out.softmax(-1)[0].double().numpy()


@pytest.mark.parametrize("typical_p", [0.2, 0.5, 0.8, 1.0])
def test_typical_p_matches_the_hand_computed_distribution(typical_p):
    exact = np.array(BY_HAND[typical_p])
    assert np.allclose(filtered_probs(HALVES, typical_p), exact, atol=1e-6)
    if typical_p < 1:  # drawn through the whole sampler; top-p at the same mass keeps other tokens
        counts = draw(HALVES, SamplingParams(typical_p=typical_p))
        check(counts, exact, softmax(HALVES))


def test_the_crossing_is_strict_as_llama_cpp():
    # at typical_p = 0.875 the mass 7/8 after the first 1/8 does not exceed it: the second 1/8 stays too.
    # float32: 0.25 + 0.5 + 0.125 is exact, so the comparison is exactly 0.875 > 0.875
    assert np.allclose(filtered_probs(HALVES, 0.875), [0.5, 0.25, 0.125, 0.125], atol=1e-6)
    assert np.allclose(filtered_probs(HALVES, 0.8749), BY_HAND[0.8], atol=1e-6)


def reference(logits, typical_p, top_k=0, top_p=1.0, temperature=1.0):
    """The rule in float64, one token at a time: top-k, then typical-p on the renormalized rest before
    temperature (llama.cpp's chain order), then top-p (the smallest prefix by probability reaching it)
    over the tempered rest."""
    x = np.asarray(logits, dtype=np.float64)
    keep = np.ones(len(x), bool)
    if top_k:
        keep &= x >= sorted(x, reverse=True)[top_k - 1]
    p = np.where(keep, softmax(x), 0.0)
    p /= p.sum()
    live = np.flatnonzero(keep)
    h = -sum(p[t] * math.log(p[t]) for t in live)
    mass = 0.0
    for t in sorted(live, key=lambda t: (abs(-math.log(p[t]) - h), t)):
        if mass > typical_p:
            keep[t] = False
        mass += p[t]
    p = np.where(keep, softmax(x / temperature), 0.0)
    p /= p.sum()
    if top_p < 1:
        mass = 0.0
        for t in sorted(np.flatnonzero(keep), key=lambda t: (-p[t], t)):
            if mass >= top_p:
                keep[t] = False
            mass += p[t]
    p = np.where(keep, p, 0.0)
    return p / p.sum()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("typical_p,top_k,top_p", [(0.3, 0, 1.0), (0.7, 0, 1.0), (0.9, 8, 1.0), (0.6, 0, 0.5),
                                                   (0.95, 12, 0.8)])
def test_typical_p_follows_the_rule_after_top_k_and_before_top_p(seed, typical_p, top_k, top_p):
    logits = np.random.default_rng(seed).normal(0, 2, 32).astype(np.float32)
    assert np.allclose(filtered_probs(logits, typical_p, top_k, top_p), reference(logits, typical_p, top_k, top_p),
                       atol=1e-5)


@pytest.mark.parametrize("temperature,kept", [
    (0.5, [1 / 4, 1 / 16, 0, 0]),  # the first two (by the untempered ranking), tempered: p^2 renormalized
    (2.0, [math.sqrt(1 / 2), 1 / 2, 0, 0]),  # p^(1/2)
])
def test_typical_p_reads_the_distribution_before_temperature(temperature, kept):
    """llama.cpp's default chain applies temperature last: at T = 0.5, typical_p 0.5 on [1/2, 1/4, 1/8, 1/8]
    keeps {0, 1} as at T = 1 (the tempered [0.73, 0.18, 0.05, 0.05] would keep {0} alone)."""
    params = SamplingParams(temperature=temperature, typical_p=0.5)
    probs = target_probs(torch.tensor(HALVES).unsqueeze(0), [params])[0].double().numpy()
    assert np.allclose(probs, np.array(kept) / sum(kept), atol=1e-6)
    counts = draw(HALVES, params)
    check(counts, np.array(kept) / sum(kept), softmax(HALVES / temperature))


@pytest.mark.parametrize("seed", range(4))
def test_typical_p_before_temperature_then_top_p_after_it(seed):
    logits = np.random.default_rng(seed).normal(0, 2, 32).astype(np.float32)
    for t in (0.4, 1.7):
        probs = target_probs(torch.tensor(logits).unsqueeze(0), [SamplingParams(temperature=t, typical_p=0.7,
                                                                                 top_k=20, top_p=0.9)])
        assert np.allclose(probs[0].double().numpy(), reference(logits, 0.7, 20, 0.9, t), atol=1e-5)


def test_off_rows_beside_typical_rows_are_untouched():
    x = torch.tensor(np.stack([HALVES, HALVES]))
    out = filter_top_k_top_p_min_p(x.clone(), torch.zeros(2, dtype=torch.long), torch.ones(2), torch.zeros(2),
                                   torch.tensor([1.0, 0.2]))
    assert torch.equal(out[0], x[0])
    assert torch.isfinite(out[1]).tolist() == [False, True, False, False]


def test_typical_p_is_checked():
    with pytest.raises(InvalidSamplingParams, match="typical_p"):
        SamplingParams(typical_p=1.5)
    assert SamplingParams(typical_p=0.0).typical_p == 0.0  # the most typical token alone
