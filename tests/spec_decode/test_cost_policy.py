"""The policy's cost rule: a draft token's cost fitted from step times (StepCost), the draft length
that pays at an acceptance rate (best_length), and the engine drafting by them: long where drafts
are accepted, (almost) never where they fail, and a seeded sampled request deciding by fixed priors."""

from __future__ import annotations

import random
from types import SimpleNamespace

from hearth.sampling_params import SamplingParams
from hearth.spec_decode.acceptance import Acceptance
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.cost import StepCost
from hearth.spec_decode.policy import DraftOutcome, SpeculativeDecoder, best_length
from hearth.spec_decode.thresholds import POLICY

from tests.engine.fakes import ScriptedProposer
from tests.engine.test_scheduler import run_all
from tests.engine.test_spec_scheduler import make_spec_engine


def test_step_cost_measures_per_row_count_and_prices_the_unmeasured_optimistically():
    cost = StepCost(prior=0.25)
    assert cost.costs(1, 8) is None  # nothing measured at the plain step's size: draft nothing
    assert cost.prior_costs(2) == [1.0, 1.25, 1.5]
    cost.add(1, 0.050)
    cost.add(1, 0.040)  # smoothed: 0.7 * 50 + 0.3 * 40 ms
    assert abs(cost.seconds[1] - 0.047) < 1e-12
    cost.add(1, 0.067)  # a slower one weighs less: 0.95 * 47 + 0.05 * 67
    assert abs(cost.seconds[1] - 0.048) < 1e-12
    cost.seconds[1] = 0.043
    assert cost.costs(1, 8) == [1.0] * 9  # past the longest measured, priced as it: tried once
    cost.add(5, 0.086)  # 2 x the plain step
    got = cost.costs(1, 8)
    assert len(got) == 9 and got[4] == got[8] == 2.0
    assert all(abs(got[k] - (1 + k / 4)) < 1e-12 for k in range(5))  # linear between measured counts
    cost.add(13, 0.172)  # measured past `most`: still what the lengths below it are read between
    assert abs(cost.costs(1, 8)[8] - 3.0) < 1e-12


def test_a_length_costs_no_more_than_a_longer_one_measured():
    cost = StepCost(prior=0.25)
    for rows, ms in ((1, 46), (4, 67), (9, 137), (16, 132), (32, 251)):
        cost.add(rows, ms / 1e3)
    got = cost.costs(1, 31)
    assert abs(got[15] - 132 / 46) < 1e-9 and got[8] == got[15]  # 9 rows (the GEMV) priced as the 16 (tiles)
    assert abs(got[3] - 67 / 46) < 1e-9 and got[7] < got[8]  # below: measured and interpolated as before
    assert all(a <= b for a, b in zip(got, got[1:]))


def test_a_flat_pass_is_priced_by_any_count_measured_in_it():
    """AMX's exact tiles: 10-16 rows one pass, 17-24 that pass and a GEMV tail, 25-32 two passes
    (passes=(10, 16, 8)). Once 32 rows are measured, 25-31 cost as much, not a line from 16 up, so
    a long draft's length is 31 or at most 24; the control without passes interpolates."""
    ms = {1: 46, 4: 67, 16: 132, 32: 251}
    flat = StepCost(prior=0.25, passes=(10, 16, 8))
    plain = StepCost(prior=0.25)
    for rows, t in ms.items():
        flat.add(rows, t / 1e3)
        plain.add(rows, t / 1e3)
    got, line = flat.costs(1, 31), plain.costs(1, 31)
    assert all(abs(got[k] - 251 / 46) < 1e-9 for k in range(24, 32))  # 25..32 rows
    assert all(abs(got[k] - 132 / 46) < 1e-9 for k in range(9, 16))  # 10..16 rows: as the 16 measured
    assert 132 / 46 < got[20] < 251 / 46 and got[16] < got[23]  # 17..24: the GEMV tail, between
    assert line[24] < got[24]  # the control: the line prices 25 rows below what the pass costs
    assert got[9] == got[15] and line[9] < line[15]
    rates = [0.6] + [0.97] * 30
    assert best_length(rates, got, 1) in (15, 31) and best_length(rates, got, 1) != best_length(rates, line, 1)
    assert flat._flat(9) == 0 and flat._flat(10) == flat._flat(16) == 1
    assert flat._flat(17) == flat._flat(24) == 0 and flat._flat(25) == flat._flat(32) == 2


def brute(alpha, costs, batch):
    best, best_rate = 0, 1.0
    for k in range(1, len(costs)):
        rate = (batch + sum(alpha ** j for j in range(1, k + 1))) / (batch * costs[k])
        if rate > best_rate * (1 + POLICY.min_gain):
            best, best_rate = k, rate
    return best


def linear(cost, most=8):
    return [1 + cost * k for k in range(most + 1)]


def same(alpha, n=16):
    return [alpha] * n


def test_best_length_is_the_rate_maximizing_length():
    assert best_length(same(0.95), linear(0.05), 1) == 8  # accepted and cheap: the whole budget
    assert best_length(same(0.2), linear(0.25), 1) == 0  # 0.2 per position does not pay a quarter step
    assert best_length(same(0.95), linear(1.2), 1) == 0  # a draft costing more than a step never pays
    for alpha in (0.5, 0.7, 0.8, 0.9):
        for cost in (0.05, 0.1, 0.25, 0.5):
            for batch in (1, 2, 4):
                assert best_length(same(alpha), linear(cost, 12), batch) == brute(alpha, linear(cost, 12), batch)
    assert 0 < best_length(same(0.8), linear(0.25), 1) < 8  # a middle: some drafts, not all
    assert best_length(same(0.8), linear(0.1), 4) <= best_length(same(0.8), linear(0.1), 1)  # a batch shares the gain
    assert best_length(same(0.95, 3), linear(0.05), 1) == 3  # no longer than the rates known
    # a plateau (AMX tiles: 16 rows for the price of 9): the long draft wins where a line would not
    plateau = [1.0, 1.12, 1.3, 1.45, 1.6, 1.8, 2.0, 2.3, 2.6, 2.85] + [2.87] * 6
    assert best_length(same(0.9), plateau, 1) == 15 and best_length(same(0.9), plateau[:10], 1) < 9


def test_bursty_acceptance_pays_long_drafts_one_rate_would_not():
    """A request that copies, drafted 3 tokens at a time: half its drafts fail at once, the other
    half are accepted whole. Per position that is ~0.5 for the first draft and ~1 after it, so 16
    rows pay; one rate for every position (hits over tries, ~0.75) would keep the drafts short."""
    acc = Acceptance()
    for _ in range(10):
        acc.observe(0, 3)  # rejected at the first draft
        acc.observe(3, 3)  # accepted whole
    rates = acc.rates(0.6, 15)
    assert 0.4 < rates[0] < 0.6 and min(rates[1:]) > 0.85
    costs = [1.0, 1.22, 1.44, 1.66, 1.88, 2.1, 2.32, 2.54, 2.76] + [2.8] * 7  # 16 rows for 9's price
    assert best_length(rates, costs, 1) == 15
    hits, tries = sum(acc.hits), sum(acc.tries)
    assert best_length(same(hits / tries), costs, 1) < 15  # the control: one rate for every position
    fresh = Acceptance().rates(0.6, 4)
    assert fresh == [0.6] * 4  # nothing seen: the prior at every position
    assert Acceptance([2.0], [2.0]).rates(0.5, 3) == [0.75, 0.75, 0.75]  # unseen positions as the last seen


def test_an_old_miss_past_the_first_position_is_forgotten_once_less_than_a_try_is_left():
    """A copy whose 5th draft missed once and whose next 4-draft step was accepted whole: the 5th
    position, its one try decayed below one, is unseen again (the 4th's rate) and long drafts pay;
    right after the miss they do not."""
    acc = Acceptance()
    acc.observe(4, 8)  # the first draft: 4 accepted, the 5th missed
    costs = [1.0, 1.2, 1.4, 1.6, 1.8, 2.3, 2.5, 2.7, 2.8] + [2.8] * 7
    assert best_length(acc.rates(0.6, 15), costs, 1) == 4  # the miss is fresh
    acc.observe(4, 4)  # a whole accept of 4 drafts: the 5th not tried, its one try decays
    rates = acc.rates(0.6, 15)
    assert acc.tries[4] < 1.0 and rates[4] == rates[3]
    assert best_length(rates, costs, 1) == 15


class FixedCost(StepCost):
    """Step times of a line, 1 + prior per extra row, measured already; no timing in tests."""

    def __init__(self, prior):
        super().__init__(prior, seconds={r: 1 + prior * (r - 1) for r in range(1, 65)})

    def add(self, rows, seconds):
        pass


def engine_with_cost(drafts, prior=0.25):
    engine, sched, runner = make_spec_engine(drafts, num_blocks=64, k=8)
    engine.spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=8, disable_by_batch_size=0),
                                     FixedCost(prior))
    engine.spec.proposer = ScriptedProposer(drafts, obey_k=True)
    return engine, runner


def test_accepted_drafts_run_long_failing_ones_stop():
    right, runner = engine_with_cost(lambda r: [r.output_token_ids[-1] + 1 + i for i in range(8)])
    right.add_request([1], SamplingParams(max_tokens=40, temperature=0), "a")
    run_all(right)
    ks = [len(so.seqs[0].spec_token_ids) for so in runner.steps if so.seqs][1:]
    assert max(ks) >= 7 and ks[-2] >= 4  # the rate climbs to (near) the budget (the last step: max_tokens)

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


def test_an_unmeasured_step_cost_drafts_nothing_for_one_step_and_pauses_nothing():
    """A fresh engine knows no step time yet: the first decode steps draft nothing while they time
    the plain step, then drafting starts at once (it once paused the first request 8 steps)."""
    spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=8, disable_by_batch_size=0), StepCost(0.25))
    spec.proposer = ScriptedProposer(lambda r: [7] * 8, obey_k=True)
    req = SimpleNamespace(request_id="a", prompt_token_ids=[1], output_token_ids=[2],
                          params=SamplingParams(temperature=0), num_tokens=2)
    assert spec.propose([], 1) == {}  # the prompt's step: nobody decodes
    assert spec.propose([req], 1) == {} and spec.propose([req], 1) == {}  # no cost known: plain steps
    spec.cost.add(1, 0.05)  # what those plain steps measured
    assert len(spec.propose([req], 1).get("a", [])) > 0


def test_a_seeded_sampled_request_reads_neither_timings_nor_other_requests():
    """Its drafts decide which tokens it samples (rejection sampling), so its draft length comes
    from its own acceptance and the fixed priors: the same whatever the fit or the others say."""
    spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=8, disable_by_batch_size=0), StepCost(0.25))
    spec.proposer = ScriptedProposer(lambda r: [7] * 8, obey_k=True)

    def req(rid, **params):
        return SimpleNamespace(request_id=rid, prompt_token_ids=[1], output_token_ids=[2],
                               params=SamplingParams(**params), num_tokens=2)

    seeded, greedy = req("s", temperature=1.0, seed=3), req("g", temperature=0)
    spec.cost.add(2, 0.05)  # the plain step's size measured, and rows past it expensive
    for r in range(3, 11):
        spec.cost.add(r, 0.05 * (1 + (r - 2)))
    spec.acceptance = Acceptance([1.0] * 8, [10.0] * 8)  # everyone's drafts rarely accepted
    before = spec.propose([seeded, greedy], 2)
    for r in range(3, 11):  # the fit now says drafts are free, and everyone's drafts are accepted
        for _ in range(20):
            spec.cost.add(r, 0.05)
    spec.acceptance = Acceptance([1000.0] * 8, [1000.0] * 8)
    spec.tracks.clear()
    after = spec.propose([seeded, greedy], 2)
    assert len(before["s"]) == len(after["s"]) > 0
    assert len(after.get("g", [])) > len(before.get("g", []))  # the control: an unseeded request follows them


# A draft model's steps on a Zen 4 without AMX (Qwen2.5-Coder-1.5B target, 0.5B q4_0 draft, one
# thread, 2026-12-06): rows -> ms of a step verifying rows - 1 drafts, the draft's forwards included
ZEN4_DRAFT_MS = {1: 52, 2: 113, 3: 157, 5: 250}


def drafting_steps(ms, accept, steps=256, lag=0, catch_up_ms=4.2, keep=None):
    """A greedy request of `steps` tokens whose first draft is accepted at `accept`, with the step
    costs `ms` measured (None: no cost rule) and a draft model `lag` tokens behind until it first
    drafts, each costing catch_up_ms -> the steps that drafted (keep: a list the decoder is put in)."""
    cost = None if ms is None else StepCost(0.8)
    for rows, t in (ms or {}).items():
        cost.add(rows, t / 1e3)
    if cost is not None:
        cost.add_catch_up(100, catch_up_ms / 1e3 * 100)
    spec = SpeculativeDecoder(SpeculativeConfig(num_speculative_tokens=4, disable_by_batch_size=0), cost)
    if keep is not None:
        keep.append(spec)
    spec.proposer = ScriptedProposer(lambda r: [7] * 4, obey_k=True)
    spec.acceptance = Acceptance([accept * 20] + [0.0] * 3, [20.0] + [0.0] * 3)
    req = SimpleNamespace(request_id="a", prompt_token_ids=[1], output_token_ids=[],
                          params=SamplingParams(temperature=0, max_tokens=steps), num_tokens=1)
    spec.caught_up(0, 0.0, {"a": lag})
    drafted = []
    for i in range(steps):
        req.output_token_ids.append(2)
        d = spec.propose([req], 1).get("a", [])
        if d:
            spec.caught_up(0, 0.0, {"a": 0})
        if d:
            drafted.append(i)
            n = len(d)
            spec.observe([DraftOutcome("a", n, n if random.random() < accept else 0, n)])
    return drafted


def test_drafts_accepted_but_too_dear_are_not_probed_every_pause():
    """On that Zen 4 a draft step costs more than the tokens it gains, even with 0.93 of the first
    drafts accepted: the policy pauses. Each probe's draft was accepted, and an accepted draft ended
    the pause at 8 steps: a probe (the draft's catch-up, ~3 plain steps) every 9 steps ran 0.92x
    plain. A pause the cost rule chose now doubles however its probe went."""
    random.seed(0)
    rates = Acceptance([0.93 * 20] + [0.0] * 3, [20.0] + [0.0] * 3).rates(0.6, 4)
    cost = StepCost(0.8)
    for rows, t in ZEN4_DRAFT_MS.items():
        cost.add(rows, t / 1e3)
    assert best_length(rates, cost.costs(1, 4), 1) == 0
    drafted = drafting_steps(ZEN4_DRAFT_MS, 0.93)
    assert 1 <= len(drafted) <= 6  # probes at ~9, 26, 59, 124, 253: doubling pauses (was 25)
    # the control: where a verify row is nearly free (AMX: 1 row 46 ms, 5 rows 67), they draft on
    assert len(drafting_steps({1: 46, 2: 50, 3: 55, 5: 67}, 0.93)) > 0.9 * 256


def test_a_pause_is_counted_under_its_reason():
    """/metrics once said every pause was drafts that "kept failing", while on the Zen 4 (no AMX) the
    1.5B with the 0.5B draft paused on ~95% of steps because the cost rule priced its drafts out."""
    random.seed(0)
    priced, failing = [], []
    drafting_steps(ZEN4_DRAFT_MS, 0.93, keep=priced)  # accepted drafts, too dear: the cost rule's pauses
    s = priced[0].stats
    assert s.num_paused > 0.9 * s.num_steps
    assert s.num_paused_not_paying == s.num_paused and s.num_paused_failing == 0
    drafting_steps(None, 0.0, keep=failing)  # no cost rule; every draft rejected: the misses' pauses
    s = failing[0].stats
    assert s.num_paused > 0.5 * s.num_steps
    assert s.num_paused_failing == s.num_paused and s.num_paused_not_paying == 0


def test_no_probe_where_no_acceptance_would_pay():
    """Where even drafts all accepted would not beat plain decoding by min_gain, a probe (which
    only learns acceptance) cannot change the decision: the pauses pass without one."""
    random.seed(0)
    assert drafting_steps({1: 52, 2: 110, 3: 170, 5: 290}, 0.93) == []


def test_a_burst_of_load_moves_a_step_time_a_little_a_faster_step_as_before():
    """Other processes only ever add time: a plain step slowed by a burst of load made the verify
    steps measured before it look cheap (a draft model at 0.85x plain drafted on)."""
    cost = StepCost(0.8)
    cost.add(1, 0.052)
    cost.add(2, 0.113)
    for _ in range(3):
        cost.add(1, 0.100)  # a burst: three steps at ~2x
    assert cost.seconds[1] < 0.060 and cost.costs(1, 1)[1] > 1.9
    before = cost.seconds[1]
    cost.add(1, 0.040)  # a faster one weighs as before (keep 0.7)
    assert abs(cost.seconds[1] - (0.7 * before + 0.3 * 0.040)) < 1e-12


def test_a_draft_models_catch_up_is_weighed_against_what_the_tokens_left_could_win():
    """The code edit on that Zen 4: the 0.5B's first probe caught up the prompt (a 40-line file,
    317 tokens at ~4.2 ms each: ~25 plain steps) where 256 tokens, every draft accepted, could
    win ~10 (0.90x plain). Priced, nothing is drafted and no probe is made (a probe pays the whole
    catch-up to learn one acceptance). The controls: no lag (probes as before), and a CPU where
    verify rows are nearly free, whose drafting wins the catch-up back over 256 tokens but not
    over 16."""
    random.seed(0)
    amx = {1: 46, 2: 50, 3: 55, 5: 67}
    assert drafting_steps(ZEN4_DRAFT_MS, 0.93, lag=317) == []
    assert drafting_steps(ZEN4_DRAFT_MS, 0.93, steps=2048, lag=317) == []  # expected to win nothing
    assert 1 <= len(drafting_steps(ZEN4_DRAFT_MS, 0.93)) <= 6  # without the lag: probes as before
    assert len(drafting_steps(amx, 0.93, lag=317)) > 0.9 * 256
    assert drafting_steps(amx, 0.93, steps=16, lag=317) == []


def test_a_catch_up_is_priced_as_measured_against_the_plain_step():
    cost = StepCost(0.8, catch_up_prior=0.04)
    assert cost.catch_up(1) == 0.04  # nothing measured: the prior
    cost.add(1, 0.050)
    cost.add_catch_up(8, 0.1)  # a pause's few rows: the GEMV's price, not kept
    assert cost.catch_up(1) == 0.04
    cost.add_catch_up(500, 1.0)  # 2 ms a row
    cost.add_catch_up(100, 0.1)  # 1 ms a row, smoothed: 0.7 * 2 + 0.3 * 1
    assert abs(cost.catch_up(1) - 0.0017 / 0.050) < 1e-12
    assert cost.catch_up(2) == 0.04  # a plain step of 2 rows not measured
