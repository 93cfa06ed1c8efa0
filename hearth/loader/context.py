"""The context length to run a model with, one rule for `serve --max-model-len`, `run --ctx` and
`plan --ctx`: what was asked (0: the model's own), never past the model's own (its rope and
training stop there), said in one warning line as llama.cpp does. So an error offers a larger context
only below the model's own (hearth.errors.can_raise_context, for every "raise --ctx/--max-model-len")."""

from __future__ import annotations

import logging

log = logging.getLogger("hearth")


def context_to_run(asked: int, trained: int) -> int:
    if asked > trained:
        log.warning(f"hearth: the model's context is {trained:,} tokens; using that, not the {asked:,} asked for")
    return min(asked or trained, trained)
