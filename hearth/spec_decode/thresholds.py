"""The speculation policy's thresholds in one record (hearth.spec_decode.policy reads them; the
config's disable_by_batch_size defaults to one). They are meant to come from measurement, not
taste: benchmarks/bench_spec_concurrency.py runs plain vs each proposer at 16 and 64 concurrent
sequences and prints the share of steps that drafted, and the values here are the ones such a run
supports (issue 19, point 5: aggregate throughput never below plain). Measure again on the machine
that serves before changing them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PolicyThresholds:
    disable_by_batch_size: int = 8
    """No drafts in a step with this many running sequences or more: there the step is compute-bound
    and verify rows cost about what they save (the first estimate: re-measure at 16 and 64)."""
    misses_to_pause: int = 3
    """Drafts in a row with nothing accepted after which a request stops drafting for a while."""
    first_pause: int = 8
    """Steps of a request's first pause; each pause that ends in another miss doubles it..."""
    longest_pause: int = 256
    """... up to this many steps."""
    min_gain: float = 0.03
    """With a measured step cost (hearth.spec_decode.cost), a request drafts only when the expected
    tokens per unit of time beat plain decoding's by this share (timing noise, and chat's >= 0.97x)."""
    prior_acceptance: float = 0.6
    """Acceptance rate per draft position assumed before any draft was verified."""
    prior_weight: float = 2.0
    """Tries' worth of weight a draft position's prior has in its rate (hearth.spec_decode.acceptance:
    the first position's prior is the rate over every request, a later one's the position before)."""
    acceptance_decay: float = 0.9
    """Weight an acceptance count keeps per later verified step (recent drafts count most)."""
    draft_token_cost: float = 0.25
    """A draft token's time as a share of a step, for a seeded sampled request (which must not read
    timings: hearth.spec_decode.cost): a verify row, 11 ms of a 46 ms decode step of
    Qwen2.5-Coder-1.5B on the int8 GEMV (AMX machine, 2 threads)."""
    draft_model_token_cost: float = 0.8
    """The same with a draft model, whose own step per draft position comes on top."""
    draft_catch_up_cost: float = 0.07
    """A token the draft model catches up (a request's prompt before its first drafts) as a share of
    the target's plain step, until the engine has timed one (hearth.spec_decode.cost): ~0.06-0.08
    for Qwen2.5-Coder-0.5B (q4_0, 64k head) catching up for the 1.5B on an AMD Zen 4 without AMX,
    2026-12-06 (one thread: 3.2-4.2 ms a token against 52 ms steps; two: 1.8-1.9 against ~31)."""
    catch_up_horizon: int = 512
    """Output tokens a request without max_tokens is assumed to have left, for what drafting could
    win against a catch-up's price."""


POLICY = PolicyThresholds()
