"""Mirostat (llama.cpp's versions 1 and 2, hearth.sample.mirostat): the truncation against hand-computed examples,
the state's update by the sampled token's surprise, the filters it replaces, its distribution (with a negative
control), a seeded row alone == batched with its state, and verification moving the state by the committed token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.mirostat import MirostatState, mirostat_probs
from hearth.sample.sampler import sample, target_probs
from hearth.sample.speculative import verify
from hearth.sampling_params import InvalidSamplingParams, SamplingParams
from tests.sample.reference import check, draw

HALVES = np.log(np.float32([0.5, 0.25, 0.125, 0.125]))  # surprises 1, 2, 3, 3 bits


def v2(mu: float) -> list[float]:
    return mirostat_probs(torch.tensor(HALVES).unsqueeze(0), torch.tensor([2]), torch.tensor([mu]))[0].tolist()


def test_v2_keeps_the_tokens_whose_surprise_is_at_most_mu():
    assert np.allclose(v2(2.5), [2 / 3, 1 / 3, 0, 0])
    assert np.allclose(v2(3.0), [0.5, 0.25, 0.125, 0.125])
    assert np.allclose(v2(0.5), [1, 0, 0, 0])  # none that unsurprising: the most likely stays (llama.cpp)


def test_v1_keeps_the_top_k_its_zipf_estimate_gives():
    # p_i ~ 1 / (i + 1) ** 2 over V = 200: s = 2 exactly, so k = (2 ** mu / (1 - 200 ** -1)) ** (1 / 2); mu 6: 8.02
    p = 1 / np.arange(1, 201, dtype=np.float64) ** 2
    logits = torch.tensor(np.log(p / p.sum()), dtype=torch.float32).unsqueeze(0)
    kept = mirostat_probs(logits, torch.tensor([1]), torch.tensor([6.0]))[0]
    assert (kept > 0).sum() == 8 and bool((kept[:8] > 0).all())
    assert (mirostat_probs(logits, torch.tensor([1]), torch.tensor([8.0]))[0] > 0).sum() == 16  # (256 / .995) ** .5


def test_the_state_moves_by_the_sampled_token_s_surprise():
    p = SamplingParams(mirostat=2, mirostat_tau=5.0, mirostat_eta=0.1)
    state = MirostatState(0.5)  # only token 0 is kept: p 1, surprise 0 -> mu - 0.1 * (0 - 5) = 1.0
    tokens, _ = sample(torch.tensor(HALVES).unsqueeze(0), [p], [torch.Generator().manual_seed(0)], [([], [])], [state])
    assert tokens.tolist() == [0] and state.mu == pytest.approx(1.0)
    state = MirostatState(2.5)  # kept [2/3, 1/3]: token 0's surprise log2(3/2), token 1's log2(3)
    tokens, _ = sample(torch.tensor(HALVES).unsqueeze(0), [p], [torch.Generator().manual_seed(1)], [([], [])], [state])
    surprise = np.log2(3 / 2) if tokens.item() == 0 else np.log2(3)
    assert state.mu == pytest.approx(2.5 - 0.1 * (surprise - 5.0))


def test_it_replaces_the_filters_and_follows_its_distribution():
    # tau 1.25: a request starts at mu 2.5 -> [2/3, 1/3]; top-p 0.3 and XTC would have left token 0 / tokens 1-3
    p = SamplingParams(mirostat=2, mirostat_tau=1.25, top_p=0.3, xtc_probability=1.0, xtc_threshold=0.1)
    exact = np.array([2 / 3, 1 / 3, 0, 0])
    assert np.allclose(target_probs(torch.tensor(HALVES).unsqueeze(0), [p])[0].numpy(), exact)
    check(draw(HALVES, p), exact, np.array([0.5, 0.25, 0.125, 0.125]), np.array([1.0, 0, 0, 0]) * 0.5 + exact * 0.5)


def test_a_seeded_row_and_its_state_are_the_same_alone_and_batched():
    p = SamplingParams(mirostat=2, mirostat_tau=3.0, temperature=0.9, seed=42)
    others = [SamplingParams(temperature=0.7, top_k=3), SamplingParams(mirostat=1, temperature=1.2),
              SamplingParams(temperature=0)]
    rng = np.random.default_rng(0)
    steps = [torch.tensor(rng.normal(size=(4, 64)) * 3, dtype=torch.float32) for _ in range(30)]

    def run(batch: bool) -> tuple[list[int], float]:
        params = [p, *others] if batch else [p]
        states = [MirostatState(6.0), MirostatState(6.0), MirostatState(10.0), None][:len(params)]
        gens = [torch.Generator().manual_seed(42), *[torch.Generator().manual_seed(1)] * 3][:len(params)]
        out = []
        for logits in steps:
            tokens, _ = sample(logits[:len(params)].clone(), params, gens, [([], [])] * len(params), states)
            out.append(int(tokens[0]))
        return out, states[0].mu

    assert run(True) == run(False) and len(set(run(False)[0])) > 5


def test_verification_moves_the_state_by_the_committed_token():
    p = SamplingParams(mirostat=2, mirostat_tau=5.0, mirostat_eta=0.1)
    state = MirostatState(0.5)
    (out,), _, _ = verify(torch.tensor(HALVES).unsqueeze(0), [p], [([], [])], [torch.Generator().manual_seed(0)], [[]],
                          False, mirostat=[state])
    assert out == [0] and state.mu == pytest.approx(1.0)


@pytest.mark.parametrize("field,value", [("mirostat", 3), ("mirostat", -1), ("mirostat_eta", -0.5),
                                         ("mirostat_tau", float("inf"))])
def test_out_of_range_is_named(field, value):
    with pytest.raises(InvalidSamplingParams, match=field):
        SamplingParams(**{field: value})
