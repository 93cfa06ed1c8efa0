"""The draft model's engine half (method "draft"): it proposes no tokens, only how many draft slots
each request gets. The drafts need the draft model's tensors, so the runner writes them into the
slots (hearth.runner.drafter) right before verifying; the policy sizes the slots as it sizes n-gram
drafts, so a request whose drafts fail backs off the same way."""

from __future__ import annotations

from hearth.spec_decode.proposer import DraftRequest, Proposer


class DraftSlots(Proposer, method="draft"):
    def propose(self, requests: list[DraftRequest], num_tokens: list[int]) -> dict[str, int]:
        return {req.request_id: k for req, k in zip(requests, num_tokens) if k > 0}
