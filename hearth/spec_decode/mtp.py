"""Method "mtp": drafts from the target's own multi-token-prediction head (Qwen3.5's nextn block:
hearth.models.mtp_head; llama.cpp's --spec-type draft-mtp). Registered so a speculative_config naming it
parses; the runner does not yet hand the proposer the target's hidden rows nor keep the head's K/V, so a
model that has the head is refused at load with one line (hearth.llm_mtp), never run wrongly."""

from __future__ import annotations

from hearth.spec_decode.proposer import Proposer


class MtpProposer(Proposer, method="mtp"):
    def propose(self, requests, num_tokens):
        # hearth.llm_mtp refuses the method before an engine is built: nothing reaches here
        raise NotImplementedError("the MTP proposer runs in the runner (not wired yet: hearth.llm_mtp)")
