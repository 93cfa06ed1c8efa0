"""llama.cpp's samplers hearth adds to vLLM's: the penalty window (repeat_last_n), DRY, top-nσ and XTC, each
against llama.cpp's own test cases (tests/test-sampling.cpp: probabilities in, probabilities out) and against
hand-computed examples that pin where each sits in the chain, with a distribution test (and its negative
control) for XTC's coin."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.dry import dry_penalties, repeat_limit, suffix_matches
from hearth.sample.sampler import apply_bias_and_penalties, target_probs
from hearth.sampling_params import InvalidSamplingParams, SamplingParams
from tests.sample.reference import check, draw


def after(probs, params: SamplingParams, prompt=(), output=()) -> np.ndarray:
    """The distribution one row samples from: logits log(probs), through bias, penalties, DRY and filters."""
    logits = torch.tensor(np.log(np.float32(probs))).unsqueeze(0)
    logits = apply_bias_and_penalties(logits, [params], [(list(prompt), list(output))])
    return target_probs(logits, [params])[0].double().numpy()


# --- repeat_last_n: llama.cpp's penalties over a window of the context

@pytest.mark.parametrize("last,want,rep,freq,pres", [  # test-sampling.cpp's test_penalties
    ([0], [0, 0.25, 0.25, 0.25, 0.25], 50.0, 0.0, 0.0),
    ([0, 1, 2], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], 50.0, 0.0, 0.0),
    ([0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997], 1.0, 5.0, 5.0),
    ([0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966], 1.0, 5.0, 5.0),
    ([0, 1, 2, 0, 0], [0.000000, 0.000023, 0.000023, 0.499977, 0.499977], 1.0, 5.0, 5.0),
])
def test_penalties_match_llama_cpp(last, want, rep, freq, pres):
    p = SamplingParams(repeat_last_n=len(last), repetition_penalty=rep)
    p.frequency_penalty, p.presence_penalty = freq, pres  # past OpenAI's [-2, 2], which SamplingParams checks
    assert np.allclose(after([0.2] * 5, p, output=last), want, atol=1e-5)


def test_the_window_reads_the_prompt_and_only_the_last_n_tokens():
    # prompt [1, 2], output [3, 3, 4]; presence 1, frequency 0.5 -> logit -= 0.5 * count + 1 in the window
    out = {}
    for n in (None, 0, 2, 4, -1):
        x = torch.zeros(1, 6)
        apply_bias_and_penalties(x, [SamplingParams(repeat_last_n=n, presence_penalty=1.0, frequency_penalty=0.5)],
                                 [([1, 2], [3, 3, 4])])
        out[n] = x[0].tolist()
    assert out[None] == [0, 0, 0, -2.0, -1.5, 0]  # vLLM's rule: the output alone
    assert out[0] == [0] * 6  # off
    assert out[2] == [0, 0, 0, -1.5, -1.5, 0]  # [3, 4]: one 3 left in the window
    assert out[4] == [0, 0, -1.5, -2.0, -1.5, 0]  # [2, 3, 3, 4]: the prompt's last token counts
    assert out[-1] == [0, -1.5, -1.5, -2.0, -1.5, 0]  # the whole context


def test_repeat_last_n_out_of_range_is_named():
    with pytest.raises(InvalidSamplingParams, match="repeat_last_n"):
        SamplingParams(repeat_last_n=-2)


# --- DRY

@pytest.mark.parametrize("last,want,mult,base,allowed,breakers", [  # test-sampling.cpp's test_dry
    ([0, 1], [0.25] * 4, 1.0, 1.1, 2, {}),
    ([0, 1, 2, 0, 1], [0.296923, 0.296923, 0.109232, 0.296923], 1.0, 1.1, 2, {}),
    ([0, 1, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 2, {3: [[]]}),
    ([0, 1, 2, 0, 1], [0.241818, 0.241818, 0.032727, 0.241818, 0.241818], 2.0, 1.1, 2, {}),
    ([0, 1, 2, 3, 4, 0, 1], [0.2] * 5, 1.0, 1.1, 4, {}),
])
def test_dry_matches_llama_cpp(last, want, mult, base, allowed, breakers):
    p = SamplingParams(dry_multiplier=mult, dry_base=base, dry_allowed_length=allowed, dry_penalty_last_n=len(last),
                       dry_breaker_ids=breakers)
    assert np.allclose(after([1 / len(want)] * len(want), p, output=last), want, atol=1e-5)


def test_dry_repeat_lengths_as_llama_cpp_documents_them():
    # llama-sampling.cpp's example: a b c c b c y a b c -> repeat counts 0 0 3 1 0 2 0 0 0 0; the token after
    # each repeat would extend it: c (3 -> 4), b (1 -> 2), y (2 -> 3)
    a, b, c, y = 0, 1, 2, 3
    w = [a, b, c, c, b, c, y, a, b, c]
    assert suffix_matches(w, 99) == [0, 0, 3, 1, 0, 2, 0, 0, 0, 0]
    assert suffix_matches(w, 2) == [0, 0, 2, 1, 0, 2, 0, 0, 0, 0]
    assert dry_penalties(w, {}, 1.0, 2.0, 1) == {c: 4.0, b: 1.0, y: 2.0}  # 2 ** (length - 1)
    assert dry_penalties(w, {}, 1.0, 2.0, 3) == {c: 1.0}


def test_repeat_lengths_equal_the_rule_written_out():
    # the longest stretch ending at j that also ends the window, one position at a time; tiny alphabets repeat
    rng = np.random.default_rng(0)
    for _ in range(500):
        w = rng.integers(0, 3, size=int(rng.integers(1, 30))).tolist()
        limit = int(rng.integers(0, 30))
        naive = []
        for j in range(len(w)):
            m = 0
            while j < len(w) - 1 and m <= j and w[j - m] == w[len(w) - 1 - m]:
                m += 1
            naive.append(min(m, limit))
        assert suffix_matches(w, limit) == naive, (w, limit)


def test_a_breaker_bounds_the_repeat_and_spans_tokens():
    # a breaker of two tokens, 7 then 8: a repeat may reach back only to the tokens after it
    w = [8, 5, 6, 9, 1, 7, 8, 5, 6, 9]
    assert repeat_limit(w, {7: [[8]]}) == 3
    assert repeat_limit(w, {7: [[4]]}) == len(w)  # 7 not followed by its tail: no breaker
    assert dry_penalties(w, {}, 1.0, 2.0, 2) == {1: 4.0}  # "8 5 6 9" repeats (4): 1 would extend it
    assert dry_penalties(w, {7: [[8]]}, 1.0, 2.0, 2) == {1: 2.0}  # counted as the 3 after the breaker
    assert dry_penalties([5, 6, 7, 8, 5], {7: [[8]]}, 1.0, 2.0, 2) == {}  # 1 token after it: below 2
    assert dry_penalties([5, 6, 3, 5, 6], {3: [[]]}, 1.0, 2.0, 2) == {}  # 3 would extend, but is a breaker


def test_dry_comes_after_the_repetition_penalty():
    # logit 2 for token 1 after "0 1 ... 0": repetition 2 halves it (1.0), then DRY subtracts 1 -> 0.0;
    # the other order would give (2 - 1) / 2 = 0.5
    x = torch.tensor([[0.0, 2.0, 0.0, 0.0]])
    p = SamplingParams(repetition_penalty=2.0, dry_multiplier=1.0, dry_base=2.0, dry_allowed_length=1,
                       dry_penalty_last_n=-1, dry_breaker_ids={})
    apply_bias_and_penalties(x, [p], [([], [0, 1, 3, 0])])
    assert x[0].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_dry_values_out_of_range_are_named():
    for field, value in [("dry_multiplier", -1.0), ("dry_base", 0.5), ("dry_allowed_length", -1),
                         ("dry_penalty_last_n", -2), ("dry_sequence_breakers", ["\n", ""])]:
        with pytest.raises(InvalidSamplingParams, match=field):
            SamplingParams(**{field: value})


# --- top-nσ

@pytest.mark.parametrize("n,want", [  # test-sampling.cpp's test_top_n_sigma (0: off since llama.cpp #13345)
    (1.0, [0, 0, 0.428571, 0.571429]), (0.0, [0.1, 0.2, 0.3, 0.4]), (3.0, [0.1, 0.2, 0.3, 0.4])])
def test_top_n_sigma_matches_llama_cpp(n, want):
    assert np.allclose(after([0.1, 0.2, 0.3, 0.4], SamplingParams(top_n_sigma=n)), want, atol=1e-5)


def test_top_n_sigma_reads_every_token_before_top_k_and_any_temperature():
    # logits [0 x 6, 5, 6]: sigma over all 8 is 2.39, so n = 1 keeps 5 and 6, and top-k 2 keeps them too;
    # top-k first would leave [5, 6] with sigma 0.5 and keep 6 alone
    x = np.exp(np.float32([0, 0, 0, 0, 0, 0, 5, 6]))
    for t in (1.0, 0.5):
        got = after(x / x.sum(), SamplingParams(top_n_sigma=1.0, top_k=2, temperature=t))
        want = np.exp(np.array([5, 6]) / t) / np.exp(np.array([5, 6]) / t).sum()
        assert np.allclose(got[6:], want, atol=1e-6) and got[:6].sum() == 0


# --- XTC

@pytest.mark.parametrize("threshold,want", [  # test-sampling.cpp's test_xtc, the coin always removing
    (0.09, [0, 0, 0, 1.0]), (0.19, [0, 0, 2 / 3, 1 / 3]), (0.29, [0, 0.5, 1 / 3, 1 / 6]),
    (0.39, [0.4, 0.3, 0.2, 0.1])])
def test_xtc_matches_llama_cpp(threshold, want):
    p = SamplingParams(xtc_probability=1.0, xtc_threshold=threshold)
    assert np.allclose(after([0.4, 0.3, 0.2, 0.1], p), want, atol=1e-6)


def test_xtc_reads_what_top_p_kept_renormalized():
    # top-p 0.6 keeps 0.4 and 0.3 (4/7, 3/7): both reach 0.35, so XTC leaves 0.3 alone; XTC before top-p
    # would see only 0.4 reach 0.35 and leave [4/7, 3/7]
    p = SamplingParams(top_p=0.6, xtc_probability=1.0, xtc_threshold=0.35)
    assert np.allclose(after([0.4, 0.3, 0.2, 0.1], p), [0, 1, 0, 0], atol=1e-6)


def test_xtc_reads_probabilities_before_temperature():
    # at T = 0.5 the probabilities are [16, 9, 4, 1] / 30; at threshold 0.15 the untempered 0.4, 0.3, 0.2
    # reach it (0.4 and 0.3 go), the tempered only two (0.4 alone would go)
    p = SamplingParams(temperature=0.5, xtc_probability=1.0, xtc_threshold=0.15)
    assert np.allclose(after([0.4, 0.3, 0.2, 0.1], p), [0, 0, 0.8, 0.2], atol=1e-6)


def test_xtc_coin_is_a_mixture_in_distribution():
    probs = np.float32([0.4, 0.3, 0.2, 0.1])
    p = SamplingParams(xtc_probability=0.4, xtc_threshold=0.25)
    plain, removed = probs.astype(np.float64), np.array([0, 0.75, 0.5, 0.25]) * 2 / 3  # 0.4 goes: [.3 .2 .1] / .6
    exact = 0.6 * plain + 0.4 * removed
    assert np.allclose(after(probs, p), exact, atol=1e-6)
    # negative controls: never acting, always acting, and acting with the other probability
    check(draw(np.log(probs), p), exact, plain, removed, 0.4 * plain + 0.6 * removed)


def test_greedy_rows_skip_xtc():
    p = SamplingParams(temperature=0, xtc_probability=1.0, xtc_threshold=0.1)
    assert draw(np.log(np.float32([0.4, 0.3, 0.2, 0.1])), p, n=50).tolist() == [50, 0, 0, 0]


def test_xtc_values_out_of_range_are_named():
    for field, value in [("xtc_probability", 1.5), ("xtc_threshold", -0.1), ("top_n_sigma", float("nan"))]:
        with pytest.raises(InvalidSamplingParams, match=field):
            SamplingParams(**{field: value})
