"""One goodness-of-fit test per sampling option: N draws from hearth's sampler against the exact
distribution written from the option's definition (tests/sample/reference.py), at p > ALPHA, plus
a negative control that the same statistic rejects a wrong distribution (so no test passes
vacuously) and a check that tokens the option rules out never appear."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.sampler import sample
from hearth.sampling_params import SamplingParams
from tests.sample.reference import N, check, chi2_pvalue, chi2_sf, draw, filtered, penalized, softmax

# V = 16, float32-exact so the reference sees the sampler's numbers. At T = 1 the order is
# 3, 11, 0, 7, 4, 9, 13, 1, 15, 6, 12, 2, 10, 5, 14, 8 and the cumulative mass
# .242 .421 .554 .643 .716 .770 .814 .854 .890 .920 .947 .966 .981 .990 .996 1: every top_p
# below sits >= 0.01 from a boundary, every min_p >= 0.01 from a p / p_max ratio.
LOGITS = np.float32([1.5, 0.3, -0.4, 2.1, 0.9, -1.2, 0.0, 1.1, -2.0, 0.6, -0.7, 1.8, -0.1, 0.4, -1.6, 0.2])


def prefix(logits, n: int, temperature: float = 1.0) -> np.ndarray:
    """softmax restricted to the n most likely tokens: the off-by-one controls for a cut-off."""
    p = softmax(np.asarray(logits, dtype=np.float64) / temperature)
    keep = np.zeros(len(p), dtype=bool)
    keep[np.argsort(-p, kind="stable")[:n]] = True
    q = np.where(keep, p, 0.0)
    return q / q.sum()


def off_by_one(logits, exact, temperature: float = 1.0) -> list[np.ndarray]:
    n = int((exact > 0).sum())
    return [prefix(logits, m, temperature) for m in (n - 1, n + 1) if 1 <= m <= len(exact)]


def test_chi2_tail_matches_tables():
    # 5% critical values of the chi-square table, and df = 2 where Q = exp(-x / 2) exactly
    for stat, df in [(3.841, 1), (11.070, 5), (18.307, 10), (31.410, 20)]:
        assert abs(chi2_sf(stat, df) - 0.05) < 2e-4
    assert abs(chi2_sf(7.0, 2) - np.exp(-3.5)) < 1e-12
    assert chi2_pvalue([500, 500], [0.5, 0.5]) == 1.0 and chi2_pvalue([1, 999], [0, 1]) == 0.0


@pytest.mark.parametrize("temperature", [0.25, 0.7, 1.0, 1.5, 3.0])
def test_temperature(temperature):
    counts = draw(LOGITS, SamplingParams(temperature=temperature))
    check(counts, filtered(LOGITS, temperature), filtered(LOGITS, temperature * 1.25))


@pytest.mark.parametrize("temperature", [0.0, 1e-6, 1e-30, 1e-45])
def test_zero_and_tiny_temperatures_are_greedy_first_argmax(temperature):
    # below vLLM's 1e-5 a temperature means greedy; 1e-45 / 1e-30 would overflow logits / T to inf
    tied = LOGITS.copy()
    tied[12] = tied[3]  # two maxima: greedy takes the first
    counts = draw(tied, SamplingParams(temperature=temperature), n=2_000)
    assert counts[3] == 2_000


def test_small_temperature_above_eps_still_samples_and_splits_ties():
    x = np.zeros(16, dtype=np.float32)
    x[[1, 2, 3, 4]] = [5.0, 5.0, 4.998, 4.995]  # at T = 1e-3: weights 1, 1, e^-2, e^-5
    counts = draw(x, SamplingParams(temperature=1e-3))
    check(counts, filtered(x, 1e-3), filtered(x, 0.0), filtered(x, 1.0))


@pytest.mark.parametrize("top_k", [2, 3, 5, 10])
def test_top_k(top_k):
    counts = draw(LOGITS, SamplingParams(temperature=0.9, top_k=top_k))
    exact = filtered(LOGITS, 0.9, top_k=top_k)
    assert (exact > 0).sum() == top_k
    check(counts, exact, filtered(LOGITS, 0.9), *off_by_one(LOGITS, exact, 0.9))


def test_top_k_keeps_every_token_tied_with_the_kth():
    # vLLM's apply_top_k_top_p and HF's TopKLogitsWarper mask logits < the k-th value, so ties stay
    x = np.float32([3, 2, 2, 2, 1, 0, -1, 0.5])
    counts = draw(x, SamplingParams(top_k=2))
    exact = filtered(x, top_k=2)
    assert (exact > 0).tolist() == [True] * 4 + [False] * 4
    check(counts, exact, prefix(x, 2), softmax(x))


@pytest.mark.parametrize("top_p, kept", [(0.3, 2), (0.6, 4), (0.8, 7), (0.93, 11)])
def test_top_p_keeps_the_smallest_prefix_reaching_p(top_p, kept):
    counts = draw(LOGITS, SamplingParams(top_p=top_p))
    exact = filtered(LOGITS, top_p=top_p)
    assert (exact > 0).sum() == kept
    check(counts, exact, softmax(LOGITS), *off_by_one(LOGITS, exact))


def test_top_p_always_keeps_the_first_token():
    counts = draw(LOGITS, SamplingParams(top_p=0.01), n=2_000)  # p_max = 0.24 > 0.01
    assert counts[3] == 2_000


@pytest.mark.parametrize("x, top_p, kept", [
    (np.zeros(8, dtype=np.float32), 0.5, [0, 1, 2, 3]),  # 4 x 1/8 reaches 0.5 exactly
    (np.zeros(8, dtype=np.float32), 0.3, [0, 1, 2]),
    (np.float32([1, 2, 2, 2, 0, 0, -1, -1]), 0.5, [1, 2]),  # three tied maxima, two needed
])
def test_top_p_ties_keep_lower_ids_first(x, top_p, kept):
    # a stable sort: the prefix takes tied tokens in id order (vLLM leaves the order to its sort)
    counts = draw(x, SamplingParams(top_p=top_p))
    exact = filtered(x, top_p=top_p)
    assert np.flatnonzero(exact).tolist() == kept
    other = np.zeros(len(x))
    other[len(x) - len(kept):] = 1.0  # the same number of tokens, taken from the other end
    check(counts, exact, softmax(x), other / other.sum())


@pytest.mark.parametrize("min_p, kept", [(0.05, 13), (0.2, 6), (0.5, 3)])
def test_min_p(min_p, kept):
    counts = draw(LOGITS, SamplingParams(min_p=min_p))
    exact = filtered(LOGITS, min_p=min_p)
    assert (exact > 0).sum() == kept
    check(counts, exact, softmax(LOGITS), *off_by_one(LOGITS, exact))


def test_min_p_is_relative_to_the_tempered_distribution():
    # temperature first: at T = 2 the ratios flatten, so min_p = 0.45 keeps 6 tokens, not 3
    counts = draw(LOGITS, SamplingParams(temperature=2.0, min_p=0.45))
    exact = filtered(LOGITS, 2.0, min_p=0.45)
    on_raw = softmax(LOGITS) >= 0.45 * softmax(LOGITS).max()
    wrong = np.where(on_raw, softmax(LOGITS / 2.0), 0.0)
    assert (exact > 0).sum() == 6 and on_raw.sum() == 3
    check(counts, exact, wrong / wrong.sum())


HISTORY = ([3, 6, 6, 8, 0], [11, 3, 2, 11])
"""prompt, output: 3 in both (penalized once), 6 twice in the prompt, 11 twice in the output;
logits 3 and 11 positive, 6 zero, 2 and 8 negative."""


@pytest.mark.parametrize("penalty", [1.5, 0.6])
def test_repetition_penalty_over_prompt_and_output(penalty):
    counts = draw(LOGITS, SamplingParams(repetition_penalty=penalty), history=HISTORY)
    exact = softmax(penalized(LOGITS, *HISTORY, repetition=penalty))
    output_only = softmax(penalized(LOGITS, (), HISTORY[1], repetition=penalty))
    per_occurrence = softmax(penalized(penalized(LOGITS, *HISTORY, repetition=penalty),
                                       [3, 11], (), repetition=penalty))
    subtracted = softmax(LOGITS - np.isin(np.arange(16), HISTORY[0] + HISTORY[1]) * np.log(penalty))
    check(counts, exact, output_only, per_occurrence, subtracted)


@pytest.mark.parametrize("presence", [1.5, -1.0])
def test_presence_penalty_over_output_only(presence):
    counts = draw(LOGITS, SamplingParams(presence_penalty=presence), history=HISTORY)
    exact = softmax(penalized(LOGITS, *HISTORY, presence=presence))
    with_prompt = softmax(penalized(LOGITS, (), HISTORY[0] + HISTORY[1], presence=presence))
    per_occurrence = softmax(penalized(LOGITS, *HISTORY, frequency=presence))
    check(counts, exact, with_prompt, per_occurrence)


def test_frequency_penalty_counts_output_occurrences():
    history = ([3, 0, 9], [11, 11, 11, 3, 7])
    counts = draw(LOGITS, SamplingParams(frequency_penalty=0.8), history=history)
    exact = softmax(penalized(LOGITS, *history, frequency=0.8))
    once = softmax(penalized(LOGITS, *history, presence=0.8))
    with_prompt = softmax(penalized(LOGITS, (), history[0] + history[1], frequency=0.8))
    check(counts, exact, once, with_prompt)


def test_logit_bias_adds_and_minus_100_removes():
    bias = {2: 3.0, 5: -1.5, 7: -100.0, 0: 0.5}
    counts = draw(LOGITS, SamplingParams(logit_bias=bias))
    exact = softmax(penalized(LOGITS, bias=bias))
    assert counts[7] == 0 and exact[7] < 1e-40  # removed in effect: e^-100 never wins a race
    check(counts, exact, softmax(LOGITS), softmax(penalized(LOGITS, bias={2: 3.0, 5: -1.5, 0: 0.5})))


def test_bias_then_repetition_then_frequency_and_presence():
    options = dict(repetition=1.3, presence=0.4, frequency=0.3, bias={2: 3.0, 11: -0.5})
    counts = draw(LOGITS, SamplingParams(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.3,
                                         logit_bias=options["bias"]), history=HISTORY)
    exact = softmax(penalized(LOGITS, *HISTORY, **options))
    bias_last = softmax(penalized(penalized(LOGITS, *HISTORY, **{**options, "bias": None}), bias=options["bias"]))
    x = penalized(LOGITS, (), HISTORY[1], presence=0.4, frequency=0.3, bias=options["bias"])
    repetition_last = softmax(penalized(x, *HISTORY, repetition=1.3))
    check(counts, exact, bias_last, repetition_last)


COMBO_HISTORY = ([3, 4, 4], [11, 11, 7])
COMBO_PENALTIES = dict(repetition=1.3, presence=0.4, frequency=0.3, bias={0: 0.8, 9: 1.0, 5: -100.0})


def _combo_params(temperature, top_k, top_p, min_p) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                          repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.3,
                          logit_bias=COMBO_PENALTIES["bias"])


def _hf_order(x, temperature, top_k, top_p, min_p) -> np.ndarray:
    """HF's warper order: top-k, top-p (renormalized), then min-p last."""
    q = filtered(x, temperature, top_k=top_k, top_p=top_p)
    q = np.where(q >= min_p * q.max(), q, 0.0)
    return q / q.sum()


def _unrenormalized(x, temperature, top_k, top_p, min_p) -> np.ndarray:
    """Each filter on the full tempered distribution, intersected (hearth before this test)."""
    keep = np.ones(len(x), dtype=bool)
    for kw in (dict(top_k=top_k), dict(top_p=top_p), dict(min_p=min_p)):
        keep &= filtered(x, temperature, **kw) > 0
    q = np.where(keep, softmax(np.asarray(x) / temperature), 0.0)
    return q / q.sum()


@pytest.mark.parametrize("temperature, top_k, top_p, min_p, kept", [
    (1.3, 12, 0.85, 0.15, 8),  # min-p binds before top-p; HF's order (min-p last) keeps 9
    (1.3, 8, 0.9, 0.06, 7),  # top-k binds before top-p; top-p without renormalizing keeps 8
])
def test_all_options_in_vllm_order(temperature, top_k, top_p, min_p, kept):
    """bias -> repetition -> frequency/presence -> temperature -> min-p -> top-k -> top-p, each
    filter renormalizing what the last one left (vLLM v1's Sampler.sample)."""
    x = penalized(LOGITS, *COMBO_HISTORY, **COMBO_PENALTIES)
    counts = draw(LOGITS, _combo_params(temperature, top_k, top_p, min_p), history=COMBO_HISTORY)
    exact = filtered(x, temperature, top_k, top_p, min_p)
    assert (exact > 0).sum() == kept
    for d in (-0.015, 0.015):  # no cut-off sits near a float32 rounding of it
        assert ((filtered(x, temperature, top_k, top_p + d, min_p + d / 3) > 0) == (exact > 0)).all()
    wrong = [_unrenormalized(x, temperature, top_k, top_p, min_p),  # filters not renormalized
             filtered(penalized(LOGITS / temperature, *COMBO_HISTORY, **COMBO_PENALTIES), 1.0,
                      top_k, top_p, min_p),  # penalties after temperature
             filtered(LOGITS, temperature, top_k, top_p, min_p)]  # penalties ignored
    if min_p >= 0.1:
        wrong.append(_hf_order(x, temperature, top_k, top_p, min_p))
    check(counts, exact, *wrong)
    assert counts[5] == 0


def test_distinct_seeds_per_row_give_the_distribution():
    """N rows, each with its own generator seeded 0..N-1: the first draws of distinct seeds are
    as independent as the draws of one generator."""
    params = SamplingParams(temperature=0.8, top_k=10)
    gens = [torch.Generator().manual_seed(i) for i in range(N)]
    tokens, _ = sample(torch.tensor(LOGITS).repeat(N, 1), [params] * N, gens, [([], [])] * N)
    counts = np.bincount(tokens.numpy(), minlength=16)
    exact = filtered(LOGITS, 0.8, top_k=10)
    check(counts, exact, filtered(LOGITS, 0.8), *off_by_one(LOGITS, exact, 0.8))
