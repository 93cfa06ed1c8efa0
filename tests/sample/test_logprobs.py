"""Logprobs are vLLM's default logprobs_mode="raw_logprobs": log_softmax of the model's logits,
before logit bias, penalties, temperature and filters; the top-n pick is the n largest of those."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from hearth.runner.sampled_tokens import sampled_token
from hearth.sample.sampler import sample
from hearth.sampling_params import SamplingParams

V = 24


def raw_logprobs(x: np.ndarray) -> np.ndarray:
    """x: [S, V] -> log softmax of each row, in float64."""
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def rows() -> np.ndarray:
    x = np.random.default_rng(0).normal(scale=2.0, size=(4, V)).astype(np.float32)
    x[0, 1] = 10.0  # the raw favourite of row 0, which its logit bias removes
    x[2, [3, 7]] = -np.inf
    return x


PARAMS = [
    SamplingParams(temperature=0.5, top_k=3, logit_bias={0: 5.0, 1: -100.0}, logprobs=5, seed=1),
    SamplingParams(temperature=0, repetition_penalty=2.0, presence_penalty=1.0, logprobs=0),
    SamplingParams(temperature=1.3, top_p=0.5, min_p=0.1, logprobs=3, seed=2),
    SamplingParams(temperature=0.8),  # asks for none; its row is still there
]
HISTORIES = [([0, 5], [5, 6]), ([2, 2, 9], [9]), ([], [1]), ([], [])]


def run(params=PARAMS):
    gens = [None if p.greedy else torch.Generator().manual_seed(i) for i, p in enumerate(params)]
    return sample(torch.tensor(rows()), params, gens, HISTORIES)


def test_logprobs_are_raw_log_softmax_whatever_the_options():
    tokens, logprobs = run()
    assert logprobs.shape == (4, V)
    expected = raw_logprobs(rows())
    finite = np.isfinite(expected)
    assert (np.isneginf(logprobs.numpy()) == ~finite).all()  # -inf input stays -inf, no NaN
    np.testing.assert_allclose(logprobs.numpy()[finite], expected[finite], atol=1e-5)
    # the draw uses the processed distribution: token 1 has the top raw logprob (~0) and its
    # bias of -100 keeps it from ever being drawn
    assert expected[0].argmax() == 1 and expected[0, 1] > -0.01 and tokens[0] != 1


def test_asking_for_logprobs_does_not_change_the_tokens():
    tokens, logprobs = run([dataclasses.replace(p, logprobs=None) for p in PARAMS])
    assert logprobs is None
    assert tokens.tolist() == run()[0].tolist()


def test_top_logprobs_are_the_n_largest_and_the_sampled_token_is_reported():
    tokens, logprobs = run()
    expected = raw_logprobs(rows())
    for i, p in enumerate(PARAMS[:3]):
        out = sampled_token(p, int(tokens[i]), logprobs[i])
        assert out.token_id == int(tokens[i])
        assert abs(out.logprob - expected[i, out.token_id]) < 1e-5
        assert sorted(out.top_logprobs) == sorted(np.argsort(-expected[i], kind="stable")[:p.logprobs].tolist())
        for t, lp in out.top_logprobs.items():
            assert abs(lp - expected[i, t]) < 1e-5
    assert sampled_token(PARAMS[3], int(tokens[3]), None).logprob is None
