"""One BFCL item through the client loop, scored: single-turn items by the AST rules
(hearth.evals.ast_scorer) on the first response; multi-turn items by BFCL's per-turn checks, run
as the conversation goes: after each user turn the ground truth's calls for that turn run on their
own copy of the backends, and the turn passes when (state) every public attribute of the model's
backends equals the ground truth's and (response) every result the ground truth's calls returned
is among the results of the model's calls so far (a multiset, any order). The first failing turn
fails the item and ends it (later turns cannot change the verdict)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO

from hearth.evals import ast_scorer
from hearth.evals.backends import BackendError, Backends, parse_call
from hearth.evals.bfcl_data import MULTI_TURN, Item
from hearth.evals.bfcl_tools import to_tools
from hearth.evals.chat_loop import MAX_STEPS, ChatClient, decode


@dataclass(slots=True)
class ItemResult:
    id: str
    category: str
    passed: bool
    reason: str = ""
    exchanges: list = field(default_factory=list)

    def row(self, meta: dict) -> dict:
        ex = self.exchanges
        return {**meta, "category": self.category, "id": self.id, "result": "pass" if self.passed else "fail",
                "reason": self.reason, "requests": len(ex),
                "latency_s": [round(e.latency_s, 4) for e in ex],
                "prompt_tokens": [e.prompt_tokens for e in ex], "completion_tokens": [e.completion_tokens for e in ex],
                "called": sum(e.called for e in ex), "valid_calls": sum(e.valid for e in ex),
                "retries": sum(e.retries for e in ex), "confidence": [e.confidence for e in ex],
                "declined": sum(e.declined for e in ex), "name_prob": [e.name_prob for e in ex],
                **({"router": [e.router for e in ex]} if any(e.router for e in ex) else {})}


@dataclass(slots=True)
class Run:
    """One way of asking (a client and its extensions) over the items: its rows, and their file."""
    client: ChatClient
    meta: dict
    tag: str = ""
    out: TextIO | None = None
    rows: list[dict] = field(default_factory=list)


def run_in_turns(items: list[Item], runs: list[Run], backends: Backends | None,
                 note: Callable[[int, Item, Run, dict], None] | None = None, concurrency: int = 1) -> None:
    """Each item through every run before the next item, the runs' order reversed every other item:
    runs in one process then share the machine's load, and neither always goes first. With concurrency
    N > 1, up to N items are asked at once (each on fresh copies of the runs' clients; multi-turn items
    one at a time, as they share the backends' state); rows are still written and noted in item order."""
    turn = threading.Lock()

    def ask(n: int, item: Item) -> list[tuple[Run, dict]]:
        with turn if item.category in MULTI_TURN else contextlib.nullcontext():
            return [(run, run_item(item, run.client.fresh(), backends).row(run.meta))
                    for run in (runs if n % 2 else runs[::-1])]

    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="eval-item")
    try:
        asked = [pool.submit(ask, n, item) for n, item in enumerate(items, 1)]
        for n, (item, done) in enumerate(zip(items, asked), 1):
            for run, row in done.result():
                run.rows.append(row)
                if run.out is not None:
                    run.out.write(json.dumps(row) + "\n")
                    run.out.flush()
                if note is not None:
                    note(n, item, run, row)
    finally:
        pool.shutdown(cancel_futures=True)


def run_item(item: Item, client: ChatClient, backends: Backends | None) -> ItemResult:
    client.exchanges = []
    if item.category in MULTI_TURN:
        if backends is None:
            raise ValueError("multi-turn items need the tool backends")
        passed, reason = _multi_turn(item, client, backends)
    else:
        passed, reason = _single_turn(item, client)
    return ItemResult(item.id, item.category, passed, reason, list(client.exchanges))


def _single_turn(item: Item, client: ChatClient) -> tuple[bool, str]:
    toolset = to_tools(item.functions)
    reply = client.chat(item.turns[0], toolset)
    if reply.error:
        return False, reply.error
    calls = []
    for c in reply.calls:
        try:
            name, args = decode(c, toolset)
        except ValueError:
            return False, f"{c['function'].get('name')}: arguments are not JSON"
        calls.append({name: args})
    v = ast_scorer.score(item.category, item.functions, calls, item.answer)
    return v.ok, v.reason


def _execute(call: dict, toolset, backends: Backends) -> str:
    try:
        name, args = decode(call, toolset)
    except ValueError as e:
        return f"Error: the arguments are not valid JSON ({e})"
    if not isinstance(args, dict):
        return "Error: the arguments must be a JSON object"
    return backends.call("model", name, kwargs=args)


def _multi_turn(item: Item, client: ChatClient, backends: Backends) -> tuple[bool, str]:
    toolset = to_tools(item.functions)
    try:
        backends.load(item.involved_classes, item.initial_config)
        history: list[dict] = []
        results_so_far: list[str] = []
        for t, user in enumerate(item.turns):
            history += user
            turn_results: list[str] = []
            for _ in range(MAX_STEPS):
                reply = client.chat(history, toolset)
                if reply.error:
                    return False, f"turn {t}: {reply.error}"
                history.append(reply.message)
                if not reply.calls:
                    break
                for call in reply.calls:
                    result = _execute(call, toolset, backends)
                    turn_results.append(result)
                    history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            else:
                return False, f"turn {t}: still calling after {MAX_STEPS} requests"
            ok, why = _check_turn(item, t, turn_results, results_so_far, backends)
            if not ok:
                said = (reply.message.get("content") or "").strip().replace("\n", " ")
                return False, f"turn {t}: {why}" + (f"; the model said {said[:120]!r}" if said and not reply.calls else "")
    except BackendError as e:
        return False, str(e)
    return True, ""


def _check_turn(item: Item, t: int, turn_results: list[str], so_far: list[str], backends: Backends) -> tuple[bool, str]:
    truth = [backends.call("truth", *parse_call(s)) for s in item.answer[t]]
    so_far += turn_results
    if not item.answer[t]:
        return True, ""
    if not turn_results:
        return False, "no call where the ground truth makes some"
    diffs = backends.differences()
    if diffs:
        attr, (mine, want) = next(iter(diffs.items()))
        return False, f"state differs: {attr} is {mine}, expected {want}" + (f" (+{len(diffs) - 1} more)" if len(diffs) > 1 else "")
    missing = Counter(truth) - Counter(so_far)
    if missing:
        return False, f"results missing from the model's calls: {list(missing.elements())[0][:200]!r}"
    return True, ""

