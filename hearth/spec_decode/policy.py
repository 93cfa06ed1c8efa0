"""How many drafts each request gets: a policy meant never to make decoding slower.

Per request, the draft length follows recent acceptance (a run of fully accepted drafts grows it
back to K, a partial accept sets it to what was accepted plus one), and after MISSES_TO_PAUSE
drafts in a row with nothing accepted the request stops drafting for a while, re-probing after
a pause that doubles each time it fails again. A step with `disable_by_batch_size` running
sequences or more drafts nothing: a batch that large is compute-bound, where verify rows cost
about as much as the tokens they might save."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.proposer import PROPOSERS, DraftRequest
from hearth.spec_decode.tree import DraftTree

MISSES_TO_PAUSE = 3
FIRST_PAUSE, LONGEST_PAUSE = 8, 256  # steps


@dataclass(slots=True)
class SpecDecodeStats:
    """vLLM's spec-decode counters (vllm:spec_decode_*)."""

    num_drafts: int = 0
    """Sequence-steps that verified at least one draft token."""
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    """[i]: drafts accepted at position i of their chain."""

    def snapshot(self) -> SpecDecodeStats:
        """A copy another thread (metrics) can read while the engine counts on."""
        return replace(self, accepted_per_pos=list(self.accepted_per_pos))


@dataclass(slots=True)
class _Track:
    k: int
    misses: int = 0
    paused_until: int = 0
    pause: int = FIRST_PAUSE


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
        limit = self.config.disable_by_batch_size
        if limit and num_running >= limit:
            self.proposer.track(decoding)
            return {}
        reqs, ks, paused = [], [], []
        for req in decoding:
            t = self.tracks.get(req.request_id)
            if t is None:
                t = self.tracks[req.request_id] = _Track(self.config.num_speculative_tokens)
            if self.step > t.paused_until:
                reqs.append(req)
                ks.append(t.k)
            else:
                paused.append(req)
        if paused:
            self.proposer.track(paused)
        return self.proposer.propose(reqs, ks) if reqs else {}

    def observe(self, results: list[tuple[str, int, int]]) -> None:
        """(request id, drafts verified, drafts accepted) of the last step."""
        K, s = self.config.num_speculative_tokens, self.stats
        for rid, drafted, accepted in results:
            s.num_drafts += 1
            s.num_draft_tokens += drafted
            s.num_accepted_tokens += accepted
            for i in range(accepted):
                s.accepted_per_pos[i] += 1
            t = self.tracks.get(rid)
            if t is None:
                continue
            t.k = min(K, t.k + 1) if accepted == drafted else accepted + 1
            t.misses = 0 if accepted else t.misses + 1
            if t.misses >= MISSES_TO_PAUSE:  # re-probed after the pause with K drafts again
                t.misses, t.k = 0, K
                t.paused_until = self.step + t.pause
                t.pause = min(2 * t.pause, LONGEST_PAUSE)
            elif accepted:
                t.pause = FIRST_PAUSE

    def forget(self, request_id: str) -> None:
        self.tracks.pop(request_id, None)
        self.proposer.forget(request_id)
