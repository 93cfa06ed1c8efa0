"""What drafts cost on this machine, measured on the engine's own steps.

A step's time grows with the rows it computes, but not in a line: on the GEMV each row costs
~a fifth of a decode step, while from 10 rows on AMX tiles take 16 rows for the price of ~9
(measured on Qwen2.5-Coder-1.5B: 1 row 46 ms, 4: 67, 9: 131, 16: 132, 32: 251). So the policy
keeps the time of decode-only steps per row count, smoothed, and reads a draft length's cost from
it. Lengths past the longest measured are priced as the longest measured: optimism, so a long
draft that might pay is tried once and then known, and the policy (best_length) takes it only when
that beats the best shorter one by a margin. A length never costs more than a longer one measured
(the kernels' regimes make 9 rows dearer than 16: the policy then jumps from 4 to 16, where
creeping up one row at a time would stop at the dear 9). Where the backend says how its verify
matmuls pass over the weights (StepCost.passes: AMX's 16 rows a pass), a count not measured in a
pass's flat part is priced as one measured there."""

from __future__ import annotations

from dataclasses import dataclass, field


CATCH_UP_MIN_ROWS = 32
"""Catch-ups of fewer rows are not timed (StepCost.add_catch_up)."""


@dataclass(slots=True)
class StepCost:
    prior: float
    """A draft token's time as a share of a step without drafts: the cost of lengths while nothing
    is measured, and always for a seeded sampled request (its drafts must not depend on timing)."""
    keep: float = 0.7
    """Weight of a row count's smoothed time against a newest step that was faster..."""
    keep_slower: float = 0.95
    """... and against one that was slower. Other processes' load only ever adds time, and it comes
    in bursts: a plain step slowed by one (on a shared Zen 4, 52 ms steps timed at up to 100) made
    the verify steps measured before it look cheap, and a draft model that runs 0.85x plain drafted
    on. So a slow step moves the estimate a little (a longer context's slower steps still come
    through, over ~20 steps), a fast one as before."""
    seconds: dict[int, float] = field(default_factory=dict)
    """Row count -> smoothed time of a decode-only step of that many rows."""
    catch_up_prior: float = 0.0
    """A token the draft model catches up (its prompt, a pause) as a share of a plain step, until
    one is measured (0: a proposer that never lags)."""
    catch_up_row: float | None = None
    """Smoothed seconds per row of the draft model's catch-up prefills, as measured."""
    passes: tuple[int, int, int] = (0, 0, 0)
    """(first, rows, tail): from `first` rows on, a verify step's matmuls take the rows in passes of
    `rows` (AMX tiles: 16) over the weights, each pass costing about as much however few rows it
    holds, except that up to `tail` rows past a multiple of `rows` take the GEMV instead (~a
    tenth of a pass each). So a pass's last rows - tail counts cost about the same (10-16 rows,
    25-32, ...), and one not measured is priced as the nearest measured among them: once 32 rows
    are measured, 25 is known to cost as much. (0, 0, 0): no passes known."""

    def _flat(self, rows: int) -> int:
        """The flat group (a pass's counts past its GEMV tail) `rows` is in, 0 for none."""
        first, size, tail = self.passes
        if not size or rows < first:
            return 0
        j, within = divmod(rows - 1, size)
        return 0 if j and within < tail else j + 1

    def add(self, rows: int, seconds: float) -> None:
        """One decode-only step (every sequence its next token, and drafts): its rows and time."""
        old = self.seconds.get(rows)
        keep = self.keep if old is None or seconds < old else self.keep_slower
        self.seconds[rows] = seconds if old is None else keep * old + (1 - keep) * seconds

    def add_catch_up(self, rows: int, seconds: float) -> None:
        """The draft model's catch-up prefills of one step. Only long ones: a few rows run on the
        GEMV at a few times a prefill row's price, and a pause's catch-up is cheap either way."""
        if rows >= CATCH_UP_MIN_ROWS:
            row, old = seconds / rows, self.catch_up_row
            self.catch_up_row = row if old is None else self.keep * old + (1 - self.keep) * row

    def catch_up(self, rows: int) -> float:
        """A caught-up token's time as a share of a plain step of `rows` rows: measured, else the prior."""
        base = self.seconds.get(rows)
        return self.catch_up_prior if self.catch_up_row is None or base is None else self.catch_up_row / base

    def prior_costs(self, most: int) -> list[float]:
        return [1.0 + self.prior * k for k in range(most + 1)]

    def costs(self, rows: int, most: int) -> list[float] | None:
        """[k]: the time of a step of rows + k rows over one of `rows`, for k from 0 to `most`:
        measured, else as the nearest measured in its flat group (`passes`), else linear between
        the measured counts around it, past the longest measured as that one (optimism: tried, then
        measured); none above a longer one's. None until a step of `rows` rows was measured (the
        caller drafts nothing, which measures it)."""
        base = self.seconds.get(rows)
        if base is None:
            return None
        seen = sorted(r for r in self.seconds if r >= rows)
        out, lo = [], rows
        for r in range(rows, rows + most + 1):
            same = [m for m in seen if self._flat(r) and self._flat(m) == self._flat(r)]
            if r in self.seconds:
                t, lo = self.seconds[r], r
            elif same:  # its flat group measured: as the nearest measured there
                t = self.seconds[min(same, key=lambda m: (abs(m - r), -m))]
            elif r > seen[-1]:
                t = self.seconds[seen[-1]]
            else:
                hi = next(h for h in seen if h > r)
                t = self.seconds[lo] + (self.seconds[hi] - self.seconds[lo]) * (r - lo) / (hi - lo)
            out.append(t / base)
        for k in range(len(out) - 2, -1, -1):
            out[k] = min(out[k], out[k + 1])
        return out
