"""The context length to run a model with, one rule for `serve --max-model-len`, `run --ctx` and
`plan --ctx`: what was asked (0: the model's own), never past the model's own (its rope and
training stop there), said in one warning line as llama.cpp does. So an error offers a larger context
only below the model's own (hearth.errors.can_raise_context, for every "raise --ctx/--max-model-len").
Then never past what the KV cache holds for one sequence (context_in_cache)."""

from __future__ import annotations

import logging

from hearth.errors import HearthError

log = logging.getLogger("hearth")


def context_to_run(asked: int, trained: int) -> int:
    if asked > trained:
        log.warning(f"hearth: the model's context is {trained:,} tokens; using that, not the {asked:,} asked for")
    return min(asked or trained, trained)


def context_in_cache(context: int, cache_tokens: int, asked: int) -> int:
    """The context clamped to cache_tokens, the K/V one sequence can hold in the whole pool: a longer
    request could never be admitted (it waited forever). A context the user asked for that the cache
    cannot hold is refused, as vLLM refuses to start (kv_cache_utils.check_enough_kv_cache_memory);
    the model's own is lowered, in one warning line."""
    if context <= cache_tokens:
        return context
    if asked:
        raise HearthError(f"--max-model-len {context:,} does not fit the KV cache, which holds {cache_tokens:,} "
                          "tokens for one sequence; lower --max-model-len or raise --num-kv-blocks "
                          "(or --kv-cache-memory-gb)")
    log.warning(f"hearth: the KV cache holds {cache_tokens:,} tokens for one sequence; using that as the "
                f"context, not the model's {context:,} (raise --num-kv-blocks or --kv-cache-memory-gb)")
    return cache_tokens
