"""Query-document pairs for a reranker (SamplingParams.pooling "rank"): a pair's prompt ids and where
its second text starts, a pair cut to a token limit, vLLM's score API's pairing of two lists, and the
score's activation. Plain Python over a tokenizer: the API and LLM.score share it."""

from __future__ import annotations

import math


def pair_prompt(tokenizer, first: str, second: str) -> tuple[list[int], int]:
    """(ids, pair_start): the first text with its special tokens, then the second's without its BOS:
    BERT's [CLS] query [SEP] document [SEP], what transformers' tokenizer gives a text pair and
    llama-server's format_prompt_rerank builds; pair_start: the document's first token. Both are read as
    text (a "[SEP]" written in one stays characters), as llama-server tokenizes them."""
    a = tokenizer.encode(first, add_special_tokens=True, parse_special=False)
    b = tokenizer.encode(second, add_special_tokens=True, parse_special=False)
    if tokenizer.add_bos and b and b[0] == tokenizer.bos_id:
        b = b[1:]
    return a + b, len(a)


def closing_tokens(tokenizer) -> int:
    """How many special tokens the tokenizer puts after a text (EOS, SEP): a cut pair keeps them."""
    return int(tokenizer.add_eos) + int(tokenizer.add_sep)


def cut_pair(ids: list[int], pair_start: int, limit: int, closing: int) -> list[int] | None:
    """The pair in at most `limit` tokens, its document's last text tokens dropped (its closing special
    tokens kept; the query whole: transformers' "only_second" truncation); None where the query alone,
    with one document token, does not fit."""
    if len(ids) <= limit:
        return ids
    keep = limit - pair_start - closing  # document text tokens that fit
    if keep < 1:
        return None
    return ids[:pair_start + keep] + ids[len(ids) - closing:]


def paired(first: str | list[str], second: str | list[str]) -> list[tuple[str, str]]:
    """vLLM's score API's pairs: one first text against each second (1:1, 1:N), or the two lists zipped
    (N:N). Raises ValueError naming the counts where they differ."""
    a = [first] if isinstance(first, str) else list(first)
    b = [second] if isinstance(second, str) else list(second)
    if len(a) == 1:
        return [(a[0], t) for t in b]
    if len(a) != len(b):
        raise ValueError(f"text_1 has {len(a)} texts and text_2 {len(b)}: give one text_1, or as many as text_2")
    return list(zip(a, b))


def activated(logit: float, use_activation: bool = True) -> float:
    """The score a client reads: the sigmoid of a one-label head's logit, in (0, 1), as vLLM, TEI, Jina and
    Cohere answer (sentence-transformers' CrossEncoder default); use_activation False: the logit itself,
    what llama-server answers."""
    if not use_activation:
        return logit
    if logit >= 0:  # stable both ways: exp of a large positive would overflow
        return 1.0 / (1.0 + math.exp(-logit))
    e = math.exp(logit)
    return e / (1.0 + e)
