"""The context length to run a model with, one rule for `serve --max-model-len`, `run --ctx` and
`plan --ctx`: what was asked (0: the model's own), never past the model's own (its rope and
training stop there), said in one warning line as llama.cpp does. So an error offers a larger context
only below the model's own (hearth.errors.can_raise_context, for every "raise --ctx/--max-model-len").
Then never past what the KV cache holds for one sequence (context_in_cache), said likewise."""

from __future__ import annotations

import logging

log = logging.getLogger("hearth")


def context_to_run(asked: int, trained: int, quiet: bool = False) -> int:
    """quiet: no warning (a check before the load, which says it once itself)."""
    if asked > trained and not quiet:
        log.warning(f"the model's context is {trained:,} tokens; using that, not the {asked:,} asked for")
    return min(asked or trained, trained)


def context_in_cache(context: int, cache_tokens: int) -> int:
    """The context clamped to cache_tokens, the K/V one sequence can hold in the whole pool: a longer
    request could never be admitted (it waited forever). Lowered in one warning line, never refused,
    whether the context was asked for or the model's own (as context_to_run: the user gets the
    largest that fits; `run --ctx 200000` and a models-file `context` past the cache once failed)."""
    if context <= cache_tokens:
        return context
    log.warning(f"context lowered to {cache_tokens:,} tokens (from {context:,}): the KV cache holds "
                f"{cache_tokens:,} tokens for one sequence; a larger KV cache (kv_cache_memory_gb / "
                "num_kv_blocks) raises it, or, with a quantized KV cache, fewer max_num_seqs (their staging "
                "shares the bound)")
    return cache_tokens
