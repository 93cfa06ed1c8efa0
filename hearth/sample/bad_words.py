"""vLLM's `bad_words`: each string's token sequence is never generated. A word's sequences are found as vLLM's
SamplingParams.update_from_tokenizer finds them (word_token_ids), and a row may not sample a sequence's last
token where the tokens before it are the last ones generated (banned_last_tokens, vLLM's
v1/sample/ops/bad_words.py): the prompt never counts, and a one-token word is banned everywhere."""

from __future__ import annotations

from collections.abc import Callable


def word_token_ids(words: list[str], encode: Callable[[str], list[int]]) -> list[list[int]]:
    """Each word's token ids (encode: no BOS/EOS added) as it starts a text, and after a space where that gives
    another first token and as many tokens (vLLM's rule: a word mid-text is usually its spaced variant)."""
    out = []
    for word in words:
        plain = encode(word.lstrip())
        out.append(plain)
        spaced = encode(" " + word.lstrip())
        if spaced and spaced[0] != plain[0] and len(spaced) == len(plain):
            out.append(spaced)
    return out


def banned_last_tokens(sequences: list[list[int]], output: list[int]) -> list[int]:
    """The sequences' last tokens the next row may not sample after `output` (the tokens generated so far; on a
    verify row, the drafts before it too): those whose other tokens end `output`."""
    return [s[-1] for s in sequences
            if len(s) == 1 or len(s) - 1 <= len(output) and output[len(output) - len(s) + 1:] == s[:-1]]


def history_needed(sequences: list[list[int]]) -> int:
    """How many of the last generated tokens banned_last_tokens reads (the longest sequence's prefix)."""
    return max((len(s) - 1 for s in sequences), default=0)
