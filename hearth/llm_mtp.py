"""Method "mtp"'s setup for LLM: the file must carry an MTP block (one line saying what to do otherwise), and
the runner's half (the target's hidden rows handed to the head, its K/V in the block manager and rolled back
with rejected drafts) is not built yet: refused with one line too, before the weights load."""

from __future__ import annotations

from hearth.errors import UnsupportedError
from hearth.models.mtp_head import require_mtp
from hearth.spec_decode.config import SpeculativeConfig


def check_mtp(spec: SpeculativeConfig | None, g) -> None:
    """spec's method mtp on the file g: the head is there, and then refused until the runner drafts with it."""
    if spec is None or spec.method != "mtp":
        return
    require_mtp(g)
    raise UnsupportedError(f"{g.path.name}: speculative_config method \"mtp\": the file's MTP head loads "
                           "(hearth.models.mtp_head) but the runner does not draft with it yet; use method ngram "
                           "or suffix, or a draft model")
