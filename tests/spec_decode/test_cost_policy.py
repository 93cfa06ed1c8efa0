"""The policy's cost rule: a draft token's cost fitted from step times (StepCost), the draft length
that pays at an acceptance rate (best_length), and the engine drafting by them: long where drafts
are accepted, (almost) never where they fail, and a seeded sampled request deciding by fixed priors."""

from __future__ import annotations

import random
from types import SimpleNamespace

from hearth.sampling_params import SamplingParams
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.cost import StepCost
from hearth.spec_decode.policy import SpeculativeDecoder, best_length
from hearth.spec_decode.thresholds import POLICY

from tests.engine.fakes import ScriptedProposer
from tests.engine.test_scheduler import run_all
from tests.engine.test_spec_scheduler import make_spec_engine


def test_step_cost_fits_a_draft_tokens_share_of_a_step():
    """Steps of 46 ms plus 11 ms per draft token, with 2% noise: b / a = 0.239. Before enough
    steps, or while every step has the same draft count (no spread), the prior stands."""
    rng = random.Random(1)
    cost = StepCost(prior=0.5)
    assert cost.per_draft == 0.5
    for _ in range(5):
        cost.add(4, 0.046 + 0.011 * 4)
    assert cost.per_draft == 0.5
    for _ in range(200):
        cost.add(4, 0.046 + 0.011 * 4)
    assert cost.per_draft == 0.5  # no spread: b and a cannot be told apart
    for _ in range(200):
        k = rng.randint(0, 8)
        cost.add(k, (0.046 + 0.011 * k) * rng.uniform(0.98, 1.02))
    assert abs(cost.per_draft - 0.011 / 0.046) < 0.02


def brute(alpha, cost, batch, most):
    rates = [(batch + sum(alpha ** j for j in range(1, k + 1))) / (batch * (1 + cost * k)) for k in range(most + 1)]
    k = max(range(most + 1), key=rates.__getitem__)
    return k if rates[k] > 1 + POLICY.min_gain else 0


def test_best_length_is_the_rate_maximizing_length():
    assert best_length(0.95, 0.05, 1, 8) == 8  # accepted and cheap: the whole budget
    assert best_length(0.2, 0.25, 1, 8) == 0  # 0.2 per position does not pay a quarter step
    assert best_length(0.95, 1.2, 1, 8) == 0  # a draft costing more than a step never pays
    for alpha in (0.5, 0.7, 0.8, 0.9):
        for cost in (0.05, 0.1, 0.25, 0.5):
            for batch in (1, 2, 4):
                assert best_length(alpha, cost, batch, 12) == brute(alpha, cost, batch, 12)
    assert 0 < best_length(0.8, 0.25, 1, 8) < 8  # a middle: some drafts, not all
    assert best_length(0.8, 0.1, 4, 8) <= best_length(0.8, 0.1, 1, 8)  # a batch shares the step's gain


def engine_with_cost(drafts, prior=0.25):
    engine, sched, runner = make_spec_engine(drafts, num_blocks=64, k=8)
    engine.spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=8, disable_by_batch_size=0),
                                     StepCost(prior, min_weight=float("inf")))  # the prior only: no timing in tests
    engine.spec.proposer = ScriptedProposer(drafts, obey_k=True)
    return engine, runner


def test_accepted_drafts_run_long_failing_ones_stop():
    right, runner = engine_with_cost(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(8)])
    right.add_request([1], SamplingParams(max_tokens=40, temperature=0), "a")
    run_all(right)
    ks = [len(so.seqs[0].spec_token_ids) for so in runner.steps if so.seqs][1:]
    assert max(ks) == 8 and ks[-2] >= 4  # the rate climbs to the budget (the last step: max_tokens)

    wrong, runner = engine_with_cost(lambda r: [(r.output_token_ids[-1] + 5) % 50] * 8)
    wrong.add_request([1], SamplingParams(max_tokens=120, temperature=0), "b")
    run_all(wrong)
    ks = [len(so.seqs[0].spec_token_ids) for so in runner.steps if so.seqs][1:]
    assert sum(ks) < 0.1 * len(ks) and sum(k > 0 for k in ks) >= 3  # a few probes, each of 1 or so drafts
    s = wrong.spec.stats
    assert s.num_accepted_tokens == 0 and s.num_paused > 0.8 * s.num_steps

    free, _ = engine_with_cost(lambda r: [(r.output_token_ids[-1] + 5) % 50] * 8, prior=0.0)  # the control: drafts that cost nothing
    free.add_request([1], SamplingParams(max_tokens=40, temperature=0), "c")
    run_all(free)
    assert free.spec.stats.num_draft_tokens > wrong.spec.stats.num_draft_tokens


def test_a_seeded_sampled_request_reads_neither_timings_nor_other_requests():
    """Its drafts decide which tokens it samples (rejection sampling), so its draft length comes
    from its own acceptance and the fixed priors: the same whatever the fit or the others say."""
    spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=8, disable_by_batch_size=0), StepCost(0.25))
    spec.proposer = ScriptedProposer(lambda r: [7] * 8, obey_k=True)

    def req(rid, **params):
        return SimpleNamespace(request_id=rid, prompt_token_ids=[1], output_token_ids=[2],
                               params=SamplingParams(**params), num_tokens=2)

    seeded, greedy = req("s", temperature=1.0, seed=3), req("g", temperature=0)
    before = spec.propose([seeded, greedy], 2)
    for _ in range(200):  # the fit now says drafts are free, and everyone's drafts are accepted
        spec.cost.add(0, 0.05)
        spec.cost.add(8, 0.05)
    spec.hits, spec.tries = 1000.0, 1000.0
    spec.tracks.clear()
    after = spec.propose([seeded, greedy], 2)
    assert before["s"] == after["s"]
    assert len(after["g"]) > len(before["g"])  # the control: an unseeded request follows them
