"""Does the guard's tool cap hide a tool BFCL's multi-turn ground truth needs? For every item of
multi_turn_base and each of its turns, rank the item's tools as the guard does (BM25 over the user
turns so far; the tools the conversation already called are kept), at the turn's first request, and
count the turns whose ground-truth calls name a tool left out. No model runs; seconds.

    python benchmarks/bfcl_tool_cap.py [CAP ...]     (default: 16 32 40)"""

from __future__ import annotations

import sys
from collections import Counter

from hearth.evals.backends import parse_call
from hearth.evals.bfcl_data import fetch_wheel, load_category
from hearth.evals.bfcl_tools import to_tools
from hearth.tool_guard.tool_rank import called_tools, rank_tools


def hidden(items, cap: int) -> tuple[int, int, set[str], Counter]:
    """(turns, turns with a needed tool hidden, items with such a turn, hidden tool -> turns)."""
    turns, missed, items_hit, names = 0, 0, set(), Counter()
    for item in items:
        tools, history = to_tools(item.functions).tools, []
        for t, user in enumerate(item.turns):
            history += user
            shown = {x["function"]["name"] for x in rank_tools(tools, history, cap, called_tools(history))}
            need = {parse_call(c)[0] for c in item.answer[t]} - shown
            turns += 1
            if need:
                missed, names = missed + 1, names + Counter(need)
                items_hit.add(item.id)
            calls = [{"id": f"c{t}_{i}", "type": "function", "function": {"name": parse_call(c)[0], "arguments": {}}}
                     for i, c in enumerate(item.answer[t])]
            history += [{"role": "assistant", "content": "", "tool_calls": calls}]
            history += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls]
    return turns, missed, items_hit, names


def main(caps: list[int]) -> None:
    items = load_category(fetch_wheel(progress=False), "multi_turn_base")
    for cap in caps:
        turns, missed, hit, names = hidden(items, cap)
        print(f"cap {cap}: a needed tool hidden in {missed}/{turns} turns, {len(hit)}/{len(items)} items; "
              f"most often: {', '.join(f'{n} {k}' for n, k in names.most_common(5))}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [16, 32, 40])
