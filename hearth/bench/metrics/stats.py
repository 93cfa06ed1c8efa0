"""Percentiles and summaries of a list of samples."""

from __future__ import annotations

import math

PERCENTILES = (1, 50, 90, 99)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), interpolating linearly between the two nearest ranks: numpy's
    default ("linear", Hyndman & Fan type 7), so p50 of [1, 2, 3, 4] is 2.5."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(values: list[float]) -> dict | None:
    """n, mean, min, max and the PERCENTILES as p1, p50, ...; None for no samples."""
    if not values:
        return None
    out = {"n": len(values), "mean": sum(values) / len(values), "min": min(values), "max": max(values)}
    out.update({f"p{q}": percentile(values, q) for q in PERCENTILES})
    return out
