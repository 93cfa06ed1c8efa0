"""Query-document pairs for a reranker (SamplingParams.pooling "rank"): a pair's prompt ids and where
its second text starts, a pair cut to a token limit, every pair of a request checked against the context,
vLLM's score API's pairing of two lists, the score's activation, and the one wording of "is / is not a
reranker". A pair's prompt has one of two formats, as llama-server picks them: the file's rerank template
where it has one (hearth.engine.rerank_template: Qwen3-Reranker's), else the texts joined by the
tokenizer's special tokens (SepPair: a cross-encoder's). Plain Python over a tokenizer: the API, the engines
and LLM.score share it."""

from __future__ import annotations

import math

from hearth.engine.rerank_template import TemplatePair


def pair_prompt(tokenizer, first: str, second: str) -> tuple[list[int], int]:
    """(ids, pair_start): the first text with its special tokens, the file's sep where it asks for one
    (pair_sep), then the second text's without its BOS, as llama-server's format_prompt_rerank builds it:
    BERT's [CLS] query [SEP] document [SEP] and RoBERTa's <s> query </s></s> document </s>, what
    transformers' tokenizers give a text pair; pair_start: the document's first token. Both are read as
    text (a "[SEP]" written in one stays characters), as llama-server tokenizes them."""
    a = tokenizer.encode(first, add_special_tokens=True, parse_special=False) + [tokenizer.sep_id] * tokenizer.pair_sep
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


class SepPair:
    """The pair format of a file without a rerank template: pair_prompt's, cut by cut_pair."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def prompt(self, query: str, document: str) -> tuple[list[int], int | None]:
        return pair_prompt(self.tokenizer, query, document)

    def fixed(self, query: str, start: int | None) -> str:
        return f"its query takes {start} tokens"

    def first_tokens(self, query: str, document: str, ids: list[int], start: int | None,
                     n: int) -> tuple[list[int], str]:
        closing = closing_tokens(self.tokenizer)
        return cut_pair(ids, start, start + n + closing, closing), document

    def cut(self, query: str, document: str, ids: list[int], start: int | None, limit: int) -> list[int] | None:
        return cut_pair(ids, start, limit, closing_tokens(self.tokenizer))


def pair_format(tokenizer) -> SepPair | TemplatePair:
    """llama-server's rule: the file's rerank template where it has one, else the texts and special tokens."""
    template = getattr(tokenizer, "rerank_template", None)
    return SepPair(tokenizer) if template is None else TemplatePair(tokenizer, template)


class PairError(ValueError):
    """A pair the context cannot hold (index: which), or a truncate_prompt_tokens out of range (index None)."""

    def __init__(self, message: str, index: int | None = None):
        super().__init__(message)
        self.index = index


def pair_prompts(tokenizer, pairs: list[tuple[str, str]], truncate: int | None, room: int,
                 where: list[str] | None = None, second_tokens: int | None = None) -> tuple[list[list[int]], list[int]]:
    """Each pair's prompt ids and where its second text starts. second_tokens (Cohere's max_tokens_per_doc)
    first cuts each second text to its first that many tokens. truncate (vLLM's truncate_prompt_tokens):
    k cuts a pair past k tokens, -1 past the context (`room`), None refuses it; a pair that cannot fit, or a
    truncate out of range, raises PairError naming it (where[i]; default "pair i") and both numbers."""
    check_truncate(truncate, room)
    limit = room if truncate in (None, -1) else truncate
    fmt = pair_format(tokenizer)
    prompts, starts = [], []
    for i, (a, b) in enumerate(pairs):
        name = where[i] if where else f"pair {i}"
        ids, start = fmt.prompt(a, b)
        if second_tokens is not None:
            ids, b = fmt.first_tokens(a, b, ids, start, second_tokens)
        if len(ids) > limit and truncate is None:
            raise PairError(f"{name}: the pair with its query is {len(ids)} tokens, more than the context holds "
                            f"for one ({room}); shorten it or set truncate_prompt_tokens to -1", i)
        cut = fmt.cut(a, b, ids, start, limit)
        if cut is None:
            raise PairError(f"{name}: {fmt.fixed(a, start)}, which leaves no document token within {limit}", i)
        prompts.append(cut)
        starts.append(start)
    return prompts, starts


def check_truncate(truncate: int | None, room: int) -> None:
    """truncate_prompt_tokens: None, -1 or 1 to `room` (the context's), else a PairError naming the range."""
    if truncate is not None and (isinstance(truncate, bool) or not (truncate == -1 or 1 <= truncate <= room)):
        raise PairError(f"truncate_prompt_tokens: must be -1 or 1 to {room} (the context), got {truncate!r}")


def a_reranker(subject: str) -> str:
    """`subject` (a model, named) is a reranker: the one line every refusal of text or embeddings from one says."""
    return (f"{subject} is a reranker: it scores query-document pairs (POST /v1/rerank, /v1/score, LLM.score), "
            "not text generation nor embeddings")


def not_a_reranker(subject: str, kind: str) -> str:
    """`subject` (a model, named; kind: what it is instead) is no reranker: the one line every refusal of a
    pair to score says."""
    return (f"{subject} is not a reranker ({kind}): reranking and scoring need a cross-encoder GGUF, whose "
            "pooling_type is 4 (rank) and which has a classification head (cls.*)")


def paired(first: str | list[str], second: str | list[str],
           names: tuple[str, str] = ("text_1", "text_2")) -> list[tuple[str, str]]:
    """vLLM's score API's pairs: one first text against each second (1:1, 1:N), or the two lists zipped
    (N:N). Raises ValueError naming the counts (and the fields, `names`) where they differ."""
    a = [first] if isinstance(first, str) else list(first)
    b = [second] if isinstance(second, str) else list(second)
    if len(a) == 1:
        return [(a[0], t) for t in b]
    if len(a) != len(b):
        raise ValueError(f"{names[0]} has {len(a)} texts and {names[1]} {len(b)}: give one {names[0]}, or as many "
                         f"as {names[1]}")
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
