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


POLICY = PolicyThresholds()
