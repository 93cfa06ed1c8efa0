"""An answer's reasoning tokens, as OpenAI's usage reports them (chat's completion_tokens_details, the Responses
API's output_tokens_details): the engine counts an answer's tokens, not its channels, so the reasoning's text
is encoded again; at most the answer's own count (a text re-encoded may split otherwise)."""

from __future__ import annotations


def reasoning_tokens(served, texts, completion_tokens: int) -> int:
    """texts: the answer's reasoning parts (every choice's); served: its ServedModel (encode_text)."""
    counted = sum(len(served.encode_text(t, add_special_tokens=False)) for t in texts if t)
    return min(counted, completion_tokens)
