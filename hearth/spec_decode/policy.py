"""How many drafts each request gets: a policy meant never to make decoding slower.

Per request, the draft length follows recent acceptance (a run of fully accepted drafts grows it
back to K, a partial accept sets it to what was accepted plus one), and after POLICY.misses_to_pause (hearth.spec_decode.thresholds)
drafts in a row with nothing accepted the request stops drafting for a while, re-probing after
a pause that doubles each time it fails again. A step with `disable_by_batch_size` running
sequences or more drafts nothing: a batch that large is compute-bound, where verify rows cost
about as much as the tokens they might save."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.proposer import PROPOSERS, DraftRequest
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
    """... and request-steps without drafts because the request's drafts kept failing (paused)."""

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


class SpeculativeDecoder:
    def __init__(self, config: SpeculativeConfig):
        self.config = config
        self.proposer = PROPOSERS[config.method](config)
        self.stats = SpecDecodeStats(accepted_per_pos=[0] * config.num_speculative_tokens)
        self.tracks: dict[str, _Track] = {}
        self.step = 0

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
        reqs, ks, paused = [], [], []
        for req in decoding:
            t = self.tracks.get(req.request_id)
            if t is None:
                t = self.tracks[req.request_id] = _Track(self.config.max_drafts)
            if self.step > t.paused_until:
                reqs.append(req)
                ks.append(t.k)
            else:
                paused.append(req)
        if paused:
            self.proposer.track(paused)
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
            t = self.tracks.get(rid)
            if t is None:
                continue
            if accepted == depth:
                t.k = min(K, t.k + 1)
            else:  # a tree keeps half its budget for branches: a width-1 tree is a chain
                t.k = max(accepted + 1, K // 2 if self.config.tree_budget else 0)
            t.misses = 0 if accepted else t.misses + 1
            if t.misses >= POLICY.misses_to_pause:  # re-probed after the pause with K drafts again
                t.misses, t.k = 0, K
                t.paused_until = self.step + t.pause
                t.pause = min(2 * t.pause, POLICY.longest_pause)
            elif accepted:
                t.pause = POLICY.first_pause

    def forget(self, request_id: str) -> None:
        self.tracks.pop(request_id, None)
        self.proposer.forget(request_id)
