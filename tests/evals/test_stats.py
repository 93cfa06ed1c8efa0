"""Wilson intervals and McNemar's exact test against values worked out by hand / published tables."""

from __future__ import annotations

import math

import pytest

from hearth.evals.stats import mcnemar_exact, mean, percentile, wilson


@pytest.mark.parametrize("k,n,lo,hi", [
    (0, 10, 0.0, 0.27753),   # Wilson at 0 successes: upper z^2 / (n + z^2)
    (10, 10, 0.72247, 1.0),
    (5, 10, 0.23659, 0.76341),
    (81, 263, 0.25529, 0.36621),  # Newcombe (1998), Table I: 0.2553-0.3662
])
def test_wilson(k, n, lo, hi):
    got = wilson(k, n)
    assert got[0] == pytest.approx(lo, abs=1e-5) and got[1] == pytest.approx(hi, abs=1e-5)


def test_wilson_no_items():
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("b,c,p", [
    (0, 0, 1.0),
    (3, 3, 1.0),
    (0, 6, 2 / 64),            # all 6 discordant pairs one way
    (1, 9, 2 * 11 / 1024),     # P(X <= 1) for Binomial(10, 1/2), doubled
    (9, 1, 2 * 11 / 1024),     # symmetric
    (0, 1, 1.0),               # doubled tail 1.0 is capped
])
def test_mcnemar_exact(b, c, p):
    assert math.isclose(mcnemar_exact(b, c), p)


def test_mean_and_percentile():
    assert mean([]) is None and percentile([], 95) is None
    xs = [float(i) for i in range(1, 101)]
    assert mean(xs) == 50.5
    assert percentile(xs, 95) == pytest.approx(95.05)  # numpy.percentile(range(1, 101), 95)
    assert percentile([3.0], 95) == 3.0
