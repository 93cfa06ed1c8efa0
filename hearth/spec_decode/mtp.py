"""Method "mtp": drafts from the target's own multi-token-prediction head (Qwen3.5's nextn block:
hearth.models.mtp_head; llama.cpp's --spec-type draft-mtp). The engine half is the draft model's: it proposes
only how many draft slots each request gets, sized by the policy as any draft; the head writes them in the
runner (hearth.runner.mtp_drafter), which holds the target's hidden rows it reads."""

from __future__ import annotations

from hearth.spec_decode.draft_slots import DraftSlots


class MtpSlots(DraftSlots, method="mtp"):
    pass
