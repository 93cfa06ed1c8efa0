"""How many drafts each request gets: a policy meant never to make decoding slower.

Per request, the draft length follows recent acceptance (a run of fully accepted drafts grows it
back to K, a partial accept sets it to what was accepted plus one), capped by what pays: with the
step time per row count measured on this machine (hearth.spec_decode.cost) and the request's
acceptance rate at each draft position (hearth.spec_decode.acceptance), best_length picks the
length with the most tokens per unit of time,
0 when none beats plain decoding. A request with nothing worth drafting, or whose drafts missed
POLICY.misses_to_pause times in a row (hearth.spec_decode.thresholds), pauses and re-probes after
a pause that doubles each time it fails again. A pause the cost rule chose doubles even after an
accepted probe (acceptance was not what it lacked), and passes without a probe where drafts would
not pay even were all of them accepted. A draft model that lags a request (its prompt before
the first drafts) drafts for it only when the steps drafting could save over the tokens left
(max_tokens) pay for that catch-up, as the runner timed it. A step with `disable_by_batch_size` running
sequences or more drafts nothing: a batch that large is compute-bound, where verify rows cost
about as much as the tokens they might save."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from hearth.spec_decode.acceptance import Acceptance
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.cost import StepCost
from hearth.spec_decode.proposer import PROPOSERS, DraftRequest, TextCodec
from hearth.spec_decode.tree import DraftTree

from hearth.spec_decode.thresholds import POLICY


@dataclass(slots=True)
class SpecDecodeStats:
    """vLLM's spec-decode counters (vllm:spec_decode_*)."""

    num_drafts: int = 0
    """Sequence-steps that verified at least one draft token."""
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    """[i]: drafts accepted at position i of their chain (depth i + 1 of their tree)."""
    num_accepted_off_chain: int = 0
    """Of the accepted, those on a tree branch other than its top-1 chain (first children)."""
    num_steps: int = 0
    """The policy's decisions: steps with a request decoding its next token..."""
    num_steps_drafting: int = 0
    """... of them, steps that offered drafts to at least one request..."""
    num_steps_batch_off: int = 0
    """... steps with none because the batch was at disable_by_batch_size or more..."""
    num_paused: int = 0
    """... and request-steps without drafts because the policy paused the request, for either reason:"""
    num_paused_failing: int = 0
    """... its drafts kept failing (POLICY.misses_to_pause in a row)..."""
    num_paused_not_paying: int = 0
    """... or the cost rule priced its drafts as not paying on this machine (best_length 0)."""

    def snapshot(self) -> SpecDecodeStats:
        """A copy another thread (metrics) can read while the engine counts on."""
        return replace(self, accepted_per_pos=list(self.accepted_per_pos))


class DraftOutcome(NamedTuple):
    """One sequence-step's drafts after verification."""

    request_id: str
    drafted: int
    """Drafts (tree nodes) verified."""
    accepted: int
    depth: int
    """The deepest path's length (= drafted for a chain): all of it accepted is a full accept."""
    off_chain: int = 0
    """Accepted drafts past where the accepted path leaves the top-1 chain."""

    @classmethod
    def of(cls, request_id: str, tokens: list[int], parents: list[int], accepted: list[int]) -> DraftOutcome:
        """tokens, parents: the tree verified (parents [] for a chain); accepted: its accepted path's tokens."""
        if not parents:
            return cls(request_id, len(tokens), len(accepted), len(tokens))
        tree = DraftTree(tokens, parents)
        chain = tree.chain()
        same = next((i for i, (a, c) in enumerate(zip(accepted, chain)) if a != c), min(len(accepted), len(chain)))
        return cls(request_id, len(tokens), len(accepted), max(tree.depths(), default=0), len(accepted) - same)


@dataclass(slots=True)
class _Track:
    k: int
    misses: int = 0
    paused_until: int = 0
    pause: int = POLICY.first_pause
    acceptance: Acceptance = field(default_factory=Acceptance)
    """The request's own, recent drafts weighing most."""
    priced_out: bool = False
    """The cost rule chose no drafts at its last look: an accepted probe then says nothing about
    what drafts cost, so it does not shorten the pause (it did, and a draft model whose drafts were
    accepted but did not pay probed every 9 steps, each probe ~3 plain steps' time: 0.92x plain)."""
    hopeless: bool = False
    """... and no length would pay even were every draft accepted: nothing a probe could learn
    (its acceptance) would change that, so the pause ends without one."""
    priced_pause: bool = False
    """The running pause is the cost rule's (drafts would not pay), not the misses' (drafts failed)."""


def best_rate(rates: list[float], costs: list[float], batch: int) -> tuple[int, float]:
    """The draft length k < len(costs) that makes the most tokens per unit of step time, each
    longer one taken only when it beats the best shorter one (plain decoding first) by
    POLICY.min_gain, and its speed over plain decoding: with `batch` sequences decoding, k drafts
    make batch + E(k) tokens in costs[k] steps' time, E(k) = a1 + a1 a2 + ... + a1 a2 ... ak
    (draft j is accepted with probability aj = rates[j - 1] once the ones before it were)."""
    best, best_rate, gained, p = 0, 1.0, 0.0, 1.0
    for k in range(1, min(len(costs), len(rates) + 1)):
        p *= rates[k - 1]
        gained += p
        rate = (batch + gained) / (batch * costs[k])
        if rate > best_rate * (1.0 + POLICY.min_gain):
            best, best_rate = k, rate
    return best, best_rate


def best_length(rates: list[float], costs: list[float], batch: int) -> int:
    return best_rate(rates, costs, batch)[0]


def tokens_left(req: DraftRequest) -> int:
    """The most output tokens the request may still make (POLICY.catch_up_horizon without max_tokens)."""
    most = req.params.max_tokens
    return POLICY.catch_up_horizon if most is None else max(most - len(req.output_token_ids), 0)


class SpeculativeDecoder:
    def __init__(self, config: SpeculativeConfig, cost: StepCost | None = None, codec: TextCodec | None = None):
        """cost: what a draft token costs here, fed by timed(); with it a request drafts only as
        many tokens as its acceptance rate pays for (best_length), else as many as the budget.
        codec: the tokenizer, for proposers that edit drafts as text."""
        self.config = config
        self.proposer = PROPOSERS[config.method](config, codec)
        self.stats = SpecDecodeStats(accepted_per_pos=[0] * config.k)
        self.tracks: dict[str, _Track] = {}
        self.step = 0
        self.cost = cost
        self.acceptance = Acceptance()  # every request's first drafts: the prior of each request's own
        self.lags: dict[str, int] = {}
        """request id -> tokens the draft model must catch up before it drafts for it (runner_state)."""

    def timed(self, rows: int, seconds: float) -> None:
        """A step in which every sequence decoded (no prompt chunk): its rows and time."""
        if self.cost is not None:
            self.cost.add(rows, seconds)

    def caught_up(self, rows: int, seconds: float, lags: dict[str, int]) -> None:
        """What the runner's draft model reported of a step: its catch-up prefills' rows and time,
        and each request's lag after it."""
        if self.cost is not None and rows:
            self.cost.add_catch_up(rows, seconds)
        self.lags.update(lags)

    def _length(self, t: _Track, req: DraftRequest, batch: int) -> int | None:
        """With a cost: the length best_length picks, up to the whole budget (the rate decides, not
        the last accept); None while a plain step of this batch size was never timed (this step,
        drafting nothing, times it). A seeded sampled request's drafts decide its tokens, so it
        reads neither timings nor other requests' acceptance, only fixed priors and its own."""
        if self.cost is None:
            return t.k
        most = self.config.max_drafts
        prior = POLICY.prior_acceptance
        seeded = req.params.seed is not None and not req.params.greedy
        if seeded:
            costs = self.cost.prior_costs(most)
        else:
            costs = self.cost.costs(batch, most)
            if costs is None:
                return None
            prior = self.acceptance.rates(prior, 1)[0]  # a first draft's rate over every request
        # a tree's nodes past its depth are branches, worth only what a rejected first choice
        # leaves them; counted as nothing (8 nodes at depth 4 ran 0.95x plain on the code edit,
        # 2026-12-03), so the cost rule grants a tree no more nodes than a chain
        depth = self.config.k if self.config.tree_budget else most
        k, rate = best_rate(t.acceptance.rates(prior, depth), costs, batch)
        hopeless = best_length([1.0] * depth, costs, batch) == 0  # not even with every draft accepted
        if not seeded and not self._catch_up_pays(req, rate, batch):
            k, hopeless = 0, True  # nor does a probe, which pays the whole catch-up to learn one acceptance
        t.priced_out = k == 0
        t.hopeless = k == 0 and hopeless
        return k

    def _catch_up_pays(self, req: DraftRequest, rate: float, batch: int) -> bool:
        """Whether drafting at `rate` (its expected speed over plain) saves more plain steps over the
        tokens left than the draft model's catch-up of the request costs: its lag, the prompt before
        the first drafts (on the Zen 4 a 40-line file cost the 0.5B ~25 plain steps of the 1.5B, more
        than drafting 256 tokens could win there). True without a lag."""
        lag = self.lags.get(req.request_id, 0)
        return not lag or tokens_left(req) * (1 - 1 / rate) > lag * self.cost.catch_up(batch)

    def propose(self, decoding: list[DraftRequest], num_running: int) -> dict[str, list[int] | DraftTree | int]:
        """Drafts for the requests that decode their next token this step; num_running: the
        running batch (prefill chunks included: they make a step compute-bound too)."""
        self.step += 1
        s = self.stats
        s.num_steps += bool(decoding)
        limit = self.config.disable_by_batch_size
        if limit and num_running >= limit:
            s.num_steps_batch_off += bool(decoding)
            self.proposer.track(decoding)
            return {}
        reqs, ks, paused, unmeasured = [], [], [], []
        for req in decoding:
            t = self.tracks.get(req.request_id)
            if t is None:
                t = self.tracks[req.request_id] = _Track(self.config.max_drafts)
            k = self._length(t, req, len(decoding)) if self.step > t.paused_until else 0
            if k is None:  # no step of this size timed yet: this plain step times it, and no pause
                unmeasured.append(req)
                continue
            if k == 0 and self.step > t.paused_until:  # drafts would not pay: probe with one, then pause
                if self.step == t.paused_until + 1 and not t.hopeless:
                    k = 1
                else:
                    t.paused_until = self.step + t.pause
                    t.pause = min(2 * t.pause, POLICY.longest_pause)
                    t.priced_pause = True
            if k:
                reqs.append(req)
                ks.append(k)
            else:
                paused.append(req)
                s.num_paused_not_paying += t.priced_pause
                s.num_paused_failing += not t.priced_pause
        if paused or unmeasured:
            self.proposer.track(paused + unmeasured)
        s.num_paused += len(paused)
        s.num_steps_drafting += bool(reqs)
        return self.proposer.propose(reqs, ks) if reqs else {}

    def observe(self, results: list[DraftOutcome]) -> None:
        """The last step's verified drafts. The budget (chain length, or tree nodes) grows by one
        after a full accept and falls to what was accepted plus one after a partial one (a tree's
        to no less than half of tree_budget: measured on SmolLM2's code prompt, accepted + 1 alone
        left trees too narrow to branch, 1 token accepted off the top-1 chain in 128, against 12
        with the whole budget kept)."""
        K, s = self.config.max_drafts, self.stats
        for rid, drafted, accepted, depth, off_chain in results:
            s.num_drafts += 1
            s.num_draft_tokens += drafted
            s.num_accepted_tokens += accepted
            s.num_accepted_off_chain += off_chain
            if accepted > len(s.accepted_per_pos):
                s.accepted_per_pos.extend([0] * (accepted - len(s.accepted_per_pos)))
            for i in range(accepted):
                s.accepted_per_pos[i] += 1
            self.acceptance.observe(accepted, min(depth, 1))  # only the first position is read of it
            t = self.tracks.get(rid)
            if t is None:
                continue
            t.acceptance.observe(accepted, depth)
            if accepted == depth:
                t.k = min(K, t.k + 1)
            else:  # a tree keeps half its budget for branches: a width-1 tree is a chain
                t.k = max(accepted + 1, K // 2 if self.config.tree_budget else 0)
            t.misses = 0 if accepted else t.misses + 1
            if t.misses >= POLICY.misses_to_pause:  # re-probed after the pause with K drafts again
                t.misses, t.k = 0, K
                t.paused_until = self.step + t.pause
                t.pause = min(2 * t.pause, POLICY.longest_pause)
                t.priced_pause = False
            elif accepted and not t.priced_out:
                t.pause = POLICY.first_pause

    def forget(self, request_id: str) -> None:
        self.tracks.pop(request_id, None)
        self.lags.pop(request_id, None)
        self.proposer.forget(request_id)
