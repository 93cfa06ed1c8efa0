"""A seeded row gives the same tokens alone and in any batch; different seeds differ; greedy and
sampled rows share a batch without disturbing each other."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from hearth.sample.sampler import sample
from hearth.sampling_params import SamplingParams
from tests.sample.reference import check, filtered, penalized, softmax

V, STEPS = 32, 30
SEEDED = SamplingParams(temperature=0.9, top_p=0.95, presence_penalty=0.5, seed=42)


def step_logits(step: int, rows: int) -> torch.Tensor:
    """Different logits every step and every row; row 0 is what the seeded request sees."""
    rng = np.random.default_rng(1000 + step)
    return torch.tensor(rng.normal(size=(rows, V)), dtype=torch.float32)


def decode(params: list[SamplingParams], position: int, seeds: list[int | None]) -> list[int]:
    """STEPS decode steps of a batch; returns the tokens of the row at position (which always gets
    step_logits row 0 and its own growing output history)."""
    shared = torch.Generator().manual_seed(7)  # the runner's one generator for unseeded requests
    gens = [None if p.greedy else shared if s is None else torch.Generator().manual_seed(s)
            for p, s in zip(params, seeds)]
    outputs: list[list[int]] = [[] for _ in params]
    for step in range(STEPS):
        logits = step_logits(step, len(params))
        logits[[0, position]] = logits[[position, 0]]
        tokens, _ = sample(logits, params, gens, [([1, 2, 3], out) for out in outputs])
        for out, t in zip(outputs, tokens.tolist()):
            out.append(t)
    return outputs[position]


NEIGHBOURS = [
    SamplingParams(temperature=0),  # greedy: generator None
    SamplingParams(temperature=0.7, top_k=3, seed=5),
    SamplingParams(temperature=1.2, min_p=0.1),  # unseeded: the shared generator
    SamplingParams(top_k=1),  # greedy by top_k
    SamplingParams(temperature=1e-7, seed=9),  # greedy by tiny temperature, has a generator
    SamplingParams(temperature=0.5, repetition_penalty=1.4, frequency_penalty=0.5, logit_bias={4: 2.0}),
]


@functools.cache
def alone(seed: int) -> tuple[int, ...]:
    return tuple(decode([SEEDED], 0, [seed]))


@pytest.mark.parametrize("position", [0, 3, 6])
def test_seeded_row_is_the_same_alone_and_batched(position):
    others = list(NEIGHBOURS)
    seeds = [None, 5, None, None, 9, None]
    batch = others[:position] + [SEEDED] + others[position:]
    batch_seeds = seeds[:position] + [42] + seeds[position:]
    assert tuple(decode(batch, position, batch_seeds)) == alone(42)
    assert len(set(alone(42))) > 5  # it really sampled


def test_same_seed_repeats_and_different_seeds_differ():
    assert tuple(decode([SEEDED], 0, [42])) == alone(42)
    assert len({alone(s) for s in (42, 43, 44, 45)}) == 4


def test_mixed_greedy_and_sampled_rows():
    """3 x 8000 rows interleaved: temperature 0 and top_k 1 (greedy, after the logit bias) beside
    sampled rows with a penalty; greedy rows take the first maximum, sampled rows fit their law."""
    logits = np.float32([0.5, 2.0, -1.0, 2.0, 1.0, 0.0, -0.5, 1.5])
    bias = {5: 2.5}  # greedy rows: token 5 (2.5) beats the tied 2.0s
    kinds = [SamplingParams(temperature=0, logit_bias=bias), SamplingParams(top_k=1),
             SamplingParams(temperature=0.8, frequency_penalty=1.0)]
    n = 8000
    params = kinds * n
    history = ([1], [3, 3])
    g = torch.Generator().manual_seed(3)
    tokens, _ = sample(torch.tensor(logits).repeat(3 * n, 1), params, [g] * (3 * n), [history] * (3 * n))
    tokens = tokens.numpy()
    assert (tokens[0::3] == 5).all()
    assert (tokens[1::3] == 1).all()  # first of the two maxima
    counts = np.bincount(tokens[2::3], minlength=8)
    exact = filtered(penalized(logits, *history, frequency=1.0), 0.8)
    check(counts, exact, softmax(logits / 0.8), filtered(penalized(logits, *history, frequency=1.0), 1.0))


def test_all_greedy_batch_ignores_generators_and_filters():
    logits = step_logits(0, 5)
    params = [SamplingParams(temperature=0, top_p=0.1, min_p=0.9)] * 5
    tokens, logprobs = sample(logits.clone(), params, [None] * 5, [([], [])] * 5)
    assert tokens.tolist() == logits.argmax(-1).tolist() and logprobs is None
