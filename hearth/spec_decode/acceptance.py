"""How likely a request's next drafts are accepted, per position of the draft.

Acceptance is bursty: where a request copies (an edited file, a repeated answer) a draft that got
past its first tokens is almost always right to the end; where it does not, the first one fails.
One rate for every position (the geometric model) averages the two and makes long drafts look
hopeless just where they pay most. So the counts are kept per position: rates()[j] is the chance
that draft j + 1 is accepted once the j before it were. Every position's counts decay with every
draft verified, tried there or not: a position the drafts stopped reaching forgets its failures
and takes the rate of the one before it again, so drafts that got reliable grow back. Past the
first, a position with less than one try left after the decay (a single miss, one verified draft
later) counts as unseen: that miss otherwise priced it low enough never to be tried again (the code
edit's copy ran 4 drafts a step for a miss at the 5th early on; replayed, docs/speculative.md). A
position that keeps failing is so re-tried about every other draft that reaches the one before it:
the positions before it, tried each time, carry the price."""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.spec_decode.thresholds import POLICY


@dataclass(slots=True)
class Acceptance:
    hits: list[float] = field(default_factory=list)
    """[j]: drafts accepted at position j + 1, decayed by POLICY.acceptance_decay per draft verified."""
    tries: list[float] = field(default_factory=list)
    """[j]: times position j + 1 was verified with every draft before it accepted, decayed likewise."""

    def observe(self, accepted: int, depth: int) -> None:
        """One verified draft of `depth` positions (a tree: its deepest path) with `accepted`
        accepted: positions 1..accepted hit, the one after (if drafted) missed."""
        reached = min(accepted + 1, depth)
        if reached > len(self.tries):
            self.hits.extend([0.0] * (reached - len(self.hits)))
            self.tries.extend([0.0] * (reached - len(self.tries)))
        d = POLICY.acceptance_decay
        for j in range(len(self.tries)):
            tried = j < reached
            self.hits[j] = d * self.hits[j] + (tried and j < accepted)
            self.tries[j] = d * self.tries[j] + tried

    def rates(self, prior: float, n: int) -> list[float]:
        """[j] for j < n: position j + 1's rate, its counts pulled by POLICY.prior_weight tries
        towards prior at position 1 and towards the rate of the position before at each later
        one (what is unseen behaves like what was seen last)."""
        w, out = POLICY.prior_weight, []
        for j in range(n):
            p = out[-1] if out else prior
            h, t = (self.hits[j], self.tries[j]) if j < len(self.tries) else (0.0, 0.0)
            if j and t < 1.0:  # less than one try's evidence left: unseen
                h = t = 0.0
            out.append((h + w * p) / (t + w))
        return out
