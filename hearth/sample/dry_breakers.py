"""DRY's sequence breakers as token sequences, found as llama.cpp's get_overlapping_token_sequences finds them
(koboldcpp's rule): a breaker string may span tokens, so every token is checked against it by its bytes.
- a token that holds the breaker is one by itself: head -> [] (DRY never penalizes it, and a repeat stops there);
- a token that ends with the breaker's first k bytes is a head whose tail is the tokenization of the rest
  (at most MAX_TAIL tokens): the breaker is found where those tokens follow it.
Breakers are cut to MAX_BYTES bytes first (llama.cpp's MAX_CHAR_LEN, which counts a std::string's bytes).
The rest is tokenized alone, so a breaker the model writes with other token boundaries for that rest is
missed, as in llama.cpp. One difference: a token's bytes here are its piece as generated text holds it, where
llama.cpp detokenizes each token alone, which for a SentencePiece vocabulary drops a leading space: only a
breaker that begins with a space can match differently."""

from __future__ import annotations

from collections.abc import Callable, Sequence

MAX_BYTES = 40
MAX_TAIL = 20


def breaker_sequences(breakers: Sequence[str], pieces: Sequence[bytes],
                      encode: Callable[[str], list[int]]) -> dict[int, list[list[int]]]:
    """head token id -> its tails (no duplicates); pieces[i]: token i's bytes (special tokens as their
    text, llama.cpp's detokenize with special); encode: a text's ids, no BOS."""
    out: dict[int, list[list[int]]] = {}
    for breaker in breakers:
        s = breaker.encode()[:MAX_BYTES]
        for token, word in enumerate(pieces):
            if s in word:
                tails = [[]]
            else:  # word ends with s[:k]: the breaker continues with s[k:] after it
                tails = [encode(s[k:].decode("utf-8", errors="replace"))[:MAX_TAIL]
                         for k in range(1, len(s)) if word.endswith(s[:k])]
            for t in tails:
                have = out.setdefault(token, [])
                if t not in have:
                    have.append(t)
    return out
