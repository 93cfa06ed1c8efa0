"""Method "mtp"'s setup for LLM: the file must carry an MTP block (one line saying what to do otherwise, before
the weights load), and the runner's drafter over its head, its K/V in the target's block layout."""

from __future__ import annotations

from hearth.models.mtp_head import mtp_head, require_mtp
from hearth.runner.mtp_drafter import MtpDrafter
from hearth.spec_decode.config import SpeculativeConfig


def check_mtp(spec: SpeculativeConfig | None, g) -> None:
    """spec's method mtp on the file g: the head is there."""
    if spec is not None and spec.method == "mtp":
        require_mtp(g)


def mtp_drafter(spec: SpeculativeConfig | None, model, g, cfg, num_blocks: int, block_size: int,
                max_rows: int) -> MtpDrafter | None:
    """The drafter of method mtp (its head built from g now: a model that never drafts with it reads none of it)."""
    if spec is None or spec.method != "mtp":
        return None
    return MtpDrafter(mtp_head(model, g), cfg, num_blocks, block_size, max_rows)
