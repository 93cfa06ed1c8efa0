"""Engine logprobs ({token_id: logprob} per token, sampled token first) -> OpenAI's two shapes:
chat's `logprobs.content[]` and completions' `tokens` / `token_logprobs` / `top_logprobs`; and the
prompt's, as vLLM's `prompt_logprobs` extension returns them."""

from __future__ import annotations


def token_bytes(tokenizer, token_id: int) -> bytes:
    to_bytes = getattr(tokenizer, "token_to_bytes", None)
    if to_bytes is not None:
        return to_bytes(token_id)
    return tokenizer.decode([token_id]).encode()


def _token_text(tokenizer, token_id: int) -> str:
    return token_bytes(tokenizer, token_id).decode("utf-8", errors="replace")


def _top(entry: dict[int, float], k: int) -> list[tuple[int, float]]:
    """The k most likely tokens: the entry holds the top k plus the sampled one when it is not among them."""
    return sorted(entry.items(), key=lambda kv: -kv[1])[:k] if k else []


def chat_logprobs(tokenizer, token_ids: list[int], entries: list[dict[int, float]], k: int) -> list[dict]:
    """`choices[].logprobs.content` items, one per generated token."""
    out = []
    for token_id, entry in zip(token_ids, entries):
        item = _chat_item(tokenizer, token_id, entry.get(token_id, next(iter(entry.values()), 0.0)))
        item["top_logprobs"] = [_chat_item(tokenizer, t, lp) for t, lp in _top(entry, k)]
        out.append(item)
    return out


def _chat_item(tokenizer, token_id: int, logprob: float) -> dict:
    raw = token_bytes(tokenizer, token_id)
    return {"token": raw.decode("utf-8", errors="replace"), "logprob": _finite(logprob), "bytes": list(raw)}


def completion_logprobs(tokenizer, token_ids: list[int], entries: list[dict[int, float] | None], k: int,
                        text_offset: int = 0) -> dict:
    """An entry None (an echoed prompt's first token: nothing precedes it) is null in both lists, as OpenAI's."""
    tokens, token_logprobs, tops, offsets = [], [], [], []
    for token_id, entry in zip(token_ids, entries):
        text = _token_text(tokenizer, token_id)
        tokens.append(text)
        token_logprobs.append(None if entry is None else _finite(entry.get(token_id, 0.0)))
        tops.append(None if entry is None else _legacy_top(tokenizer, token_id, entry, k))
        offsets.append(text_offset)
        text_offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}


def _legacy_top(tokenizer, token_id: int, entry: dict[int, float], k: int) -> dict[str, float]:
    """The k most likely and the chosen token, as OpenAI's legacy API ("the API will always return the
    logprob of the sampled token, so there may be up to logprobs+1 elements") and vLLM do; chat's
    top_logprobs hold exactly k (chat_logprobs)."""
    top = _top(entry, k)
    if token_id not in dict(top):
        top.append((token_id, entry.get(token_id, 0.0)))
    return {_token_text(tokenizer, t): _finite(lp) for t, lp in top}


def prompt_logprobs(tokenizer, prompt_ids: list[int], entries: list[dict[int, float] | None],
                    ranks: list[int | None], k: int) -> list[dict | None]:
    """vLLM's `prompt_logprobs`: per prompt token null (the first: nothing precedes it), else
    {"<token id>": {"logprob", "rank", "decoded_token"}} holding the prompt token with its rank in the
    vocabulary (the engine's), then the k most likely, ranked 1..k (the prompt token among them keeps
    its own entry)."""
    out = []
    for token_id, entry, rank in zip(prompt_ids, entries, ranks):
        if entry is None:
            out.append(None)
            continue
        item = {str(token_id): _ranked(tokenizer, token_id, entry[token_id], rank)}
        for r, (t, lp) in enumerate(_top(entry, k), 1):
            item.setdefault(str(t), _ranked(tokenizer, t, lp, r))
        out.append(item)
    return out


def _ranked(tokenizer, token_id: int, logprob: float, rank: int) -> dict:
    return {"logprob": _finite(logprob), "rank": rank, "decoded_token": _token_text(tokenizer, token_id)}


def _finite(x: float) -> float:
    """JSON has no -inf; OpenAI clients get the most negative float instead (as vLLM does)."""
    x = float(x)
    return max(x, -9999.0) if x == x else -9999.0
