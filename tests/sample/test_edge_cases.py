"""Options at their limits: top_k past the vocab, top_p = 1, min_p = 1, all-equal logits, -inf
logits in the input, a logit bias that removes the greedy token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.sampler import filter_top_k_top_p_min_p, sample
from hearth.sampling_params import SamplingParams
from tests.sample.reference import N, check, draw, filtered, penalized, softmax
from tests.sample.test_distributions import LOGITS, off_by_one, prefix

EQUAL = np.zeros(12, dtype=np.float32)


def uniform(n: int, v: int = 12) -> np.ndarray:
    u = np.zeros(v)
    u[:n] = 1.0 / n
    return u


@pytest.mark.parametrize("top_k", [16, 17, 1000])
def test_top_k_at_or_past_the_vocab_is_off(top_k):
    counts = draw(LOGITS, SamplingParams(top_k=top_k))
    check(counts, softmax(LOGITS), prefix(LOGITS, 15))


def test_top_p_1_is_a_no_op_even_where_float32_mass_reaches_1_early():
    # p_0 = 1 - 1.4e-12 rounds to 1.0 in float32, so "mass before >= top_p" would drop the tail
    x = torch.zeros(2, 16)
    x[:, 0] = 30.0
    out = filter_top_k_top_p_min_p(x.clone(), torch.tensor([0, 0]), torch.tensor([1.0, 0.5]), torch.zeros(2))
    assert torch.isfinite(out[0]).all() and torch.equal(out[0], x[0])
    assert torch.isfinite(out[1]).sum() == 1


def test_top_p_1_rows_beside_top_p_rows():
    n = N // 2
    params = [SamplingParams(top_p=1.0), SamplingParams(top_p=0.6)] * n
    g = torch.Generator().manual_seed(11)
    tokens, _ = sample(torch.tensor(LOGITS).repeat(2 * n, 1), params, [g] * (2 * n), [([], [])] * (2 * n))
    tokens = tokens.numpy()
    full, cut = (np.bincount(tokens[i::2], minlength=16) for i in (0, 1))
    check(full, softmax(LOGITS), filtered(LOGITS, top_p=0.6), prefix(LOGITS, 15))
    exact = filtered(LOGITS, top_p=0.6)
    check(cut, exact, softmax(LOGITS), *off_by_one(LOGITS, exact))


def test_min_p_1_keeps_only_the_maximum_and_its_ties():
    assert draw(LOGITS, SamplingParams(min_p=1.0), n=2_000)[3] == 2_000
    tied = LOGITS.copy()
    tied[12] = tied[3]
    counts = draw(tied, SamplingParams(min_p=1.0, temperature=0.5))
    exact = filtered(tied, 0.5, min_p=1.0)
    assert np.flatnonzero(exact).tolist() == [3, 12]
    only_first = np.zeros(16)
    only_first[3] = 1.0
    check(counts, exact, only_first, filtered(tied, 0.5))


@pytest.mark.parametrize("params, exact, wrong", [
    (SamplingParams(), uniform(12), uniform(11)),
    (SamplingParams(top_k=3), uniform(12), uniform(3)),  # every token ties with the 3rd
    (SamplingParams(min_p=0.5, temperature=0.3), uniform(12), uniform(6)),
    (SamplingParams(top_p=0.5), uniform(6), uniform(12)),  # the lowest ids first
])
def test_all_equal_logits(params, exact, wrong):
    counts = draw(EQUAL, params)
    check(counts, exact, wrong)


def test_all_equal_logits_greedy_is_token_0():
    assert draw(EQUAL, SamplingParams(temperature=0), n=100)[0] == 100


NEG_INF = np.float32([1.0, -np.inf, 0.5, 2.0, -np.inf, -0.5, 1.5, -np.inf, 0.0, 1.2, -1.0, -np.inf])


@pytest.mark.parametrize("options", [
    dict(temperature=1.0),
    dict(temperature=0.7, top_k=6, top_p=0.9, min_p=0.02),
    dict(temperature=1.5, repetition_penalty=0.6, frequency_penalty=0.5),  # penalties on -inf ids
])
def test_minus_inf_logits_are_never_drawn(options):
    history = ([1, 3, 4], [7, 7, 0])
    params = SamplingParams(**options)
    counts = draw(NEG_INF, params, history=history)
    x = penalized(NEG_INF, *history, repetition=params.repetition_penalty, frequency=params.frequency_penalty)
    exact = filtered(x, params.temperature, params.top_k, params.top_p, params.min_p)
    assert exact[[1, 4, 7, 11]].sum() == 0
    check(counts, exact, filtered(np.where(np.isinf(NEG_INF), -3.0, NEG_INF), params.temperature))


@pytest.mark.parametrize("temperature", [1e39, 1e300])
def test_a_temperature_past_float32_is_uniform_over_the_finite_logits(temperature):
    """It was inf in the sampler's float32 tensor, and -inf / inf is NaN: a -inf (a grammar's banned) token was drawn
    (llama-server's and Ollama's routes take any temperature)."""
    counts = draw(NEG_INF, SamplingParams(temperature=temperature))
    assert counts[[1, 4, 7, 11]].sum() == 0
    check(counts, np.where(np.isinf(NEG_INF), 0.0, 1.0 / 8), uniform(8))


@pytest.mark.parametrize("options", [dict(temperature=0), dict(temperature=2.0, top_p=0.3, min_p=0.5, top_k=4)])
def test_a_single_finite_logit_is_always_drawn(options):
    x = np.full(16, -np.inf, dtype=np.float32)
    x[9] = -50.0
    assert draw(x, SamplingParams(**options), n=500)[9] == 500


def test_logit_bias_minus_100_moves_greedy_to_the_next_token():
    assert draw(LOGITS, SamplingParams(temperature=0, logit_bias={3: -100.0}), n=100)[11] == 100


def test_top_p_0_keeps_the_argmax_alone():
    """top_p 0 (accepted as llama-server and Ollama take it; OpenAI documents 0..1) keeps exactly the most
    likely token, llama.cpp's min_keep 1; it dropped every token before."""
    x = torch.tensor(np.stack([LOGITS, np.zeros(len(LOGITS), np.float32)]))
    x[1, 5] = x[1, 9] = 3.0  # tied maxima: the lower id is kept, as the stable sort orders them
    out = filter_top_k_top_p_min_p(x.clone(), torch.tensor([0, 0]), torch.tensor([0.0, 0.0]), torch.zeros(2))
    kept = [torch.isfinite(row).nonzero().flatten().tolist() for row in out]
    assert kept == [[int(np.argmax(LOGITS))], [5]]
    assert np.flatnonzero(filtered(LOGITS, top_p=0.0)).tolist() == [int(np.argmax(LOGITS))]
    counts = draw(LOGITS, SamplingParams(top_p=0.0), n=200)
    assert counts[int(np.argmax(LOGITS))] == 200
