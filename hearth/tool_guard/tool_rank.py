"""Many tools: above `max_tools` offered tools, only the `max_tools` most relevant to the
conversation are rendered into the prompt and allowed. Relevance is Okapi BM25 (Robertson & Zaragoza,
k1 = 1.2, b = 0.75) of the conversation's words against each tool's name, description, and
parameter names, descriptions and enum values. Tools the conversation already called, or the request
names (tool_choice, a workflow), are always kept."""

from __future__ import annotations

import math
import re
from collections import Counter

from hearth.tool_parsers.types import tool_function

DEFAULT_MAX_TOOLS = 32
"""Words miss the steps a user never names (pressBrakePedal before startEngine, a zip code lookup
before a distance): at 16, 78 of BFCL's 200 multi_turn_base items hid a tool their ground truth
calls in some turn; at 32, 4 (docs/eval-tools.md). Below the cap the tools also never change within
a conversation, so every step reuses the cached prompt."""
_K1, _B = 1.2, 0.75
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_STOP = frozenset("a an and are as at be by do for from get how i in is it me my of on or please set the "
                  "to use what when with you your".split())


def words(text: str) -> list[str]:
    """Lowercase words; snake_case and camelCase split (`getWeather`, `get_weather` -> get, weather)."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOP]


def tool_text(tool: dict) -> str:
    fn = tool_function(tool)
    parts = [str(fn.get("name", "")), str(fn.get("description", ""))]
    _schema_text(fn.get("parameters", fn.get("input_schema")) or {}, parts)
    return " ".join(parts)


def _schema_text(schema: dict, parts: list[str], depth: int = 0) -> None:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(props, dict) or depth > 3:
        return
    for name, sub in props.items():
        parts.append(str(name))
        if isinstance(sub, dict):
            parts.append(str(sub.get("description", "")))
            parts += [str(v) for v in sub.get("enum", []) if isinstance(v, (str, int))]
            _schema_text(sub, parts, depth + 1)
            _schema_text(sub.get("items") or {}, parts, depth + 1)


def bm25(query: list[str], docs: list[list[str]]) -> list[float]:
    """Okapi BM25 score of each doc for the query (idf with +1 inside the log, so never negative)."""
    n = len(docs)
    avg = sum(map(len, docs)) / n if n else 0.0
    df = Counter(w for doc in docs for w in set(doc))
    idf = {w: math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) for w in set(query)}
    scores = []
    for doc in docs:
        tf, norm = Counter(doc), _K1 * (1 - _B + _B * len(doc) / avg) if avg else _K1
        scores.append(sum(idf[w] * tf[w] * (_K1 + 1) / (tf[w] + norm) for w in query if tf[w]))
    return scores


def conversation_query(messages: list[dict]) -> list[str]:
    """The words of the user turns and of the last message (often a tool result to act on)."""
    texts = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    if messages and messages[-1].get("role") != "user":
        texts.append(messages[-1].get("content") or "")
    return words(" ".join(t for t in texts if isinstance(t, str)))


def rank_tools(tools: list[dict], messages: list[dict], max_tools: int,
               keep: frozenset[str] = frozenset()) -> list[dict]:
    """At most `max_tools` of `tools` (all of them when there are no more), in their offered order:
    the `keep` names first, then the best BM25 scores (ties: the earlier offered)."""
    if len(tools) <= max_tools:
        return tools
    names = [str(tool_function(t).get("name", "")) for t in tools]
    scores = bm25(conversation_query(messages), [words(tool_text(t)) for t in tools])
    order = sorted(range(len(tools)), key=lambda i: (names[i] not in keep, -scores[i], i))
    chosen = set(order[:max(max_tools, sum(1 for n in names if n in keep))])
    return [t for i, t in enumerate(tools) if i in chosen]


def called_tools(messages: list[dict]) -> frozenset[str]:
    """Tools the conversation's assistant turns already called (kept so history renders the same)."""
    return frozenset((c.get("function") or {}).get("name", "") for m in messages if m.get("role") == "assistant"
                     for c in m.get("tool_calls") or [])
