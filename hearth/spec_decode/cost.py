"""What a draft token costs on this machine, measured on the engine's own steps.

A step's time grows with the draft tokens it verifies (each is a full row of every matmul, and a
draft model runs a step of its own per draft position), so the policy needs the marginal cost of
one draft relative to a step without any. It is fitted online by least squares over recent
decode-only steps, time = a + b * drafts, weighted to forget old steps; until those steps show
enough spread in their draft counts, a prior stands in (hearth.spec_decode.thresholds)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StepCost:
    prior: float
    """Relative cost of a draft token (b / a) before the fit has enough steps."""
    decay: float = 0.97
    """Weight of the fit's past per new step: ~1 / (1 - decay) steps count."""
    min_weight: float = 8.0
    min_spread: float = 0.5
    """Variance of the weighted draft counts the fit needs before it replaces the prior."""
    _w: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def add(self, drafts: int, seconds: float) -> None:
        """One decode-only step: its draft tokens (verified rows beyond one per sequence) and time."""
        d = self.decay
        self._w = d * self._w + 1.0
        self._x = d * self._x + drafts
        self._y = d * self._y + seconds
        self._xx = d * self._xx + drafts * drafts
        self._xy = d * self._xy + drafts * seconds

    @property
    def per_draft(self) -> float:
        """b / a: one draft token's time as a share of a step without drafts (>= 0)."""
        if self._w < self.min_weight:
            return self.prior
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var < self.min_spread:
            return self.prior
        b = (self._xy / self._w - mx * my) / var
        a = my - b * mx
        return max(0.0, b / a) if a > 0 else self.prior
