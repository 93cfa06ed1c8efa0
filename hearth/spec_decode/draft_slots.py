"""The draft model's engine half (method "draft"): it proposes no tokens, only how many draft slots
each request gets. The drafts need the draft model's tensors, so the runner writes them into the
slots (hearth.runner.drafter) right before verifying; the policy sizes the slots as it sizes n-gram
drafts, so a request whose drafts fail backs off the same way.

With draft_lookup_min, prompt lookup goes first: a request whose text ends in an n-gram of at least
that many tokens seen earlier in it gets the lookup's continuation as its chain and no slots, so the
draft model spends no steps on it this step (an answer copying its input drafts for free)."""

from __future__ import annotations


from hearth.spec_decode import ngram  # the module: proposer.py imports this one while ngram may be loading
from hearth.spec_decode.proposer import DraftRequest, Proposer


class DraftSlots(Proposer, method="draft"):
    def __init__(self, config, codec=None) -> None:
        super().__init__(config, codec)
        self.lookup: ngram.NgramProposer | None = None
        self.num_lookup = self.num_slotted = 0
        """Request-steps drafted by the lookup instead of the draft model; given draft model slots."""
        n = config.draft_lookup_min
        if n:
            self.lookup = ngram.NgramProposer(config.lookup(n), codec)

    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, list[int] | int]:
        found = self.lookup.propose(requests, num_tokens) if self.lookup is not None else {}
        out: dict[str, list[int] | int] = {}
        for req, k in zip(requests, num_tokens):
            if found.get(req.request_id):
                out[req.request_id] = found[req.request_id]
                self.num_lookup += 1
            elif k > 0:
                out[req.request_id] = k
                self.num_slotted += 1
        return out

    def forget(self, request_id: str) -> None:
        if self.lookup is not None:
            self.lookup.forget(request_id)
