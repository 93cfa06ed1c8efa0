"""Exact sampling distributions written from the definitions (numpy, float64, one token at a time),
a chi-square goodness-of-fit test, and a helper that draws many tokens from hearth's sampler.

Nothing here calls the sampler's own helpers: the reference is the rule as vLLM documents it
(logit bias -> repetition / frequency / presence -> temperature -> min-p -> top-k -> top-p)."""

from __future__ import annotations

import numpy as np
import torch

from hearth.sample.sampler import sample
from hearth.sampling_params import SamplingParams

N = 20_000
"""Draws per distribution test."""
ALPHA = 1e-4
"""A right sampler passes when the chi-square p-value is above this (seeded, so deterministic)."""
CONTROL_ALPHA = 1e-9
"""The same statistic against a wrong distribution must fall below this, or the test has no power."""


def softmax(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x[np.isfinite(x)].max())  # exp(-inf) = 0
    return e / e.sum()


def penalized(logits, prompt=(), output=(), repetition=1.0, presence=0.0, frequency=0.0, bias=None):
    """logit bias, then HF's repetition penalty over prompt + output (each id once), then OpenAI's
    frequency and presence penalties over output only."""
    x = np.asarray(logits, dtype=np.float64).copy()
    for t, b in (bias or {}).items():
        x[t] += b
    for t in set(prompt) | set(output):
        x[t] = x[t] / repetition if x[t] > 0 else x[t] * repetition
    for t in set(output):
        x[t] -= frequency * list(output).count(t) + presence
    return x


def filtered(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) -> np.ndarray:
    """The probability of every token after temperature, min-p, top-k and top-p (vLLM's order)."""
    x = np.asarray(logits, dtype=np.float64)
    if temperature == 0:  # greedy: the first maximum
        out = np.zeros(len(x))
        out[int(np.argmax(x))] = 1.0
        return out
    p = softmax(x / temperature)
    keep = p > 0
    if min_p > 0:
        keep &= p >= min_p * p.max()
    if top_k > 0:  # every token tied with the k-th largest survivor stays
        ranked = sorted(x[keep], reverse=True)
        keep &= x >= ranked[min(top_k, len(ranked)) - 1]
    if top_p < 1:  # smallest prefix (by probability, then id) whose renormalized mass reaches top_p
        q = np.where(keep, p, 0.0) / p[keep].sum()
        mass = 0.0
        for i, t in enumerate(sorted(np.flatnonzero(keep), key=lambda t: (-q[t], t))):
            if i and mass >= top_p:  # the first is always kept (top_p 0: it alone)
                keep[t] = False
            mass += q[t]
    out = np.where(keep, p, 0.0)
    return out / out.sum()


def chi2_sf(stat: float, df: int) -> float:
    """P(X >= stat) for X ~ chi-square(df): the regularized upper incomplete gamma Q(df/2, stat/2)."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def chi2_pvalue(counts, probs, min_expected: float = 5.0) -> float:
    """Pearson's goodness of fit of counts [V] to probs [V]; bins expecting fewer than min_expected
    draws are pooled into one. A draw where probs is 0 gives 0."""
    counts, probs = np.asarray(counts, dtype=np.float64), np.asarray(probs, dtype=np.float64)
    expected = probs / probs.sum() * counts.sum()
    if (counts[expected == 0] > 0).any():
        return 0.0
    big = expected >= min_expected
    obs, exp = list(counts[big]), list(expected[big])
    small = ~big & (expected > 0)
    if small.any():
        obs.append(counts[small].sum())
        exp.append(expected[small].sum())
    obs, exp = np.array(obs), np.array(exp)
    if len(obs) == 1:
        return 1.0
    return chi2_sf(float(((obs - exp) ** 2 / exp).sum()), len(obs) - 1)


def draw(logits, params: SamplingParams, n: int = N, history=((), ()), seed: int = 0) -> np.ndarray:
    """Token counts [V] of n draws: n copies of one row in one batch, sharing one seeded generator
    (rows draw from it in turn, so the draws are independent)."""
    row = torch.tensor(np.asarray(logits, dtype=np.float32))
    g = torch.Generator().manual_seed(seed)
    hist = (list(history[0]), list(history[1]))
    tokens, _ = sample(row.repeat(n, 1), [params] * n, [g] * n, [hist] * n)
    return np.bincount(tokens.numpy(), minlength=row.numel())


def check(counts, exact, *wrong) -> None:
    """counts fit exact; tokens exact rules out never appear; every wrong distribution is rejected."""
    counts = np.asarray(counts)
    assert counts[np.asarray(exact) == 0].sum() == 0, f"impossible tokens drawn: {counts} vs {exact}"
    p = chi2_pvalue(counts, exact)
    assert p > ALPHA, f"p = {p:.3g}: counts {counts.tolist()} vs expected {np.round(exact * counts.sum())}"
    for w in wrong:
        assert not np.allclose(w, exact, atol=1e-3), "the negative control equals the exact distribution"
        pw = chi2_pvalue(counts, w)
        assert pw < CONTROL_ALPHA, f"negative control not rejected: p = {pw:.3g} for {np.round(w, 4)}"
