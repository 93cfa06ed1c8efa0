"""Sampler options past float32's range (llama-server's and vLLM's routes take any positive repetition penalty, DRY
multiplier and base): they were inf or 0 in the sampler's float32 tensors, and inf * 0 or a row of -inf made NaN
logits, which greedy picks first; a DRY base of 1e300 raised OverflowError in the engine step. Now clamped where
the clamp samples as the value would (hearth.sample.sampler.REPETITION_PENALTY_RANGE, hearth.sample.dry.MAX_PENALTY).
Those already refused by range (presence / frequency in [-2, 2], XTC's in [0, 1]) and those whose inf cannot make a
NaN (top-nσ's n keeps every token; mirostat's tau and eta move a target that only masks) stay as they are."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hearth.sample.dry import MAX_PENALTY, dry_penalties
from hearth.sample.sampler import apply_bias_and_penalties, sample
from hearth.sampling_params import SamplingParams
from tests.sample.reference import draw

LOGITS = [0.0, 1.0, -1.0, 2.0, 0.5]
PROMPT = [0, 1, 2]  # the tokens the repetition penalty reads


def penalized(**options) -> torch.Tensor:
    return apply_bias_and_penalties(torch.tensor([LOGITS]), [SamplingParams(**options)], [(PROMPT, [])])[0]


@pytest.mark.parametrize("huge", [1e39, 1e300])
def test_a_huge_repetition_penalty_is_the_largest_applied(huge):
    """0 * inf was NaN at token 0, and greedy took it."""
    out = penalized(repetition_penalty=huge)
    assert torch.isfinite(out).all(), out
    assert torch.equal(out, penalized(repetition_penalty=1e30))
    assert draw(LOGITS, SamplingParams(temperature=0, repetition_penalty=huge), n=10, history=(PROMPT, ()))[3] == 10


@pytest.mark.parametrize("tiny", [1e-50, 1e-300])
def test_a_tiny_repetition_penalty_is_the_smallest_applied(tiny):
    """A positive logit / 0 was inf, and softmax's inf - inf NaN: token 1 (1.0 / tiny, the largest) is certain."""
    out = penalized(repetition_penalty=tiny)
    assert torch.isfinite(out).all(), out
    assert torch.equal(out, penalized(repetition_penalty=1e-30))
    counts = draw(LOGITS, SamplingParams(temperature=1.0, repetition_penalty=tiny), n=200, history=(PROMPT, ()))
    assert counts[1] == 200, counts


REPEAT = [5, 6, 5, 6, 5]  # "5 6 5" repeats: token 6 would extend it (a repeat of 3, allowed_length 2)


@pytest.mark.parametrize("multiplier,base", [(1e39, 1.75), (1e308, 1e308), (1.0, 1e300)])
def test_a_huge_dry_penalty_is_capped_and_raises_nothing(multiplier, base):
    out = dry_penalties(REPEAT, {}, multiplier, base, 1)
    assert out == {6: MAX_PENALTY}


def test_a_dry_penalty_past_float32_leaves_the_one_allowed_token_drawn():
    """A grammar's one choice (every other token at -inf) that DRY hit was -inf too: a row of -inf, and token 0,
    banned, was drawn."""
    logits = np.full(8, -np.inf, dtype=np.float32)
    logits[6] = 1.0
    for temperature in (0.0, 1.0):
        params = SamplingParams(temperature=temperature, dry_multiplier=1e39, dry_penalty_last_n=-1)
        assert draw(logits, params, n=20, history=(REPEAT, ()))[6] == 20


@pytest.mark.parametrize("options", [dict(top_n_sigma=1e39), dict(mirostat=2, mirostat_tau=1e39),
                                     dict(mirostat=1, mirostat_tau=1e300), dict(mirostat=2, mirostat_eta=1e39)])
def test_other_huge_options_make_no_nan(options):
    """Left as they are: their inf only masks (top-nσ keeps every token; mirostat's mu keeps every token, or its
    NaN the most likely alone)."""
    logits = torch.tensor([LOGITS] * 4)
    g = torch.Generator().manual_seed(0)
    tokens, _ = sample(logits, [SamplingParams(**options)] * 4, [g] * 4, [(PROMPT, [])] * 4)
    assert all(0 <= t < len(LOGITS) for t in tokens.tolist())
