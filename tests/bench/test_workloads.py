"""Workloads are a pure function of (workload, seed): same seed, same prompts, on any machine."""

from __future__ import annotations

import json

import pytest

from hearth.bench import BenchError, corpus
from hearth.bench.workloads import (LONG_PROMPT_WORDS, SHARED_PREFIX_CONVERSATIONS, SHARED_PREFIX_SYSTEM_PROMPTS,
                                    SHARED_PREFIX_TURNS, WORKLOADS, build_workload, shared_prefix_order,
                                    sweep_levels, warmup_request)


def _prompts(w):
    return [[r.messages for r in level.requests] for level in w.levels]


def _shas(w):
    return [r.prompt_sha for level in w.levels for r in level.requests]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_same_seed_same_prompts(name):
    a, b = build_workload(name, seed=7), build_workload(name, seed=7)
    assert json.dumps(_prompts(a)) == json.dumps(_prompts(b))
    assert _shas(a) == _shas(b)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_another_seed_other_prompts(name):
    a, b = build_workload(name, seed=1, requests=4), build_workload(name, seed=2, requests=4)
    assert _prompts(a) != _prompts(b)


def test_fewer_requests_send_a_prefix():
    short, long = build_workload("chat", seed=3, requests=3), build_workload("chat", seed=3, requests=8)
    assert _prompts(short)[0] == _prompts(long)[0][:3]
    assert [r.index for r in long.levels[0].requests] == list(range(8))


def test_pinned_prompts_do_not_drift():
    # a changed generator or data file would silently break every saved reference: say so here
    w = build_workload("chat", seed=0, requests=2)
    assert [r.prompt_sha for r in w.levels[0].requests] == ["a1503b6171c96b22", "18e9442d4a26b14c"]


def test_defaults_and_overrides():
    w = build_workload("code-edit")
    spec = WORKLOADS["code-edit"]
    assert (w.max_tokens, w.max_concurrency, w.num_requests) == (spec.max_tokens, spec.concurrency, spec.requests)
    w = build_workload("chat", requests=5, concurrency=3, max_tokens=9)
    assert (w.max_tokens, w.max_concurrency, w.num_requests) == (9, 3, 5)
    assert all(r.max_tokens == 9 for r in w.levels[0].requests)


def test_sweep_levels():
    assert sweep_levels(1) == [1]
    assert sweep_levels(8) == [1, 2, 4, 8]
    assert sweep_levels(6) == [1, 2, 4, 6]
    w = build_workload("concurrency-sweep", concurrency=4)
    assert [(lv.concurrency, len(lv.requests)) for lv in w.levels] == [(1, 2), (2, 4), (4, 8)]
    w = build_workload("concurrency-sweep", concurrency=4, requests=3)
    assert [len(lv.requests) for lv in w.levels] == [3, 3, 3]
    # no prompt twice: a repeat would hit the prefix cache and flatter its TTFT
    assert [r.index for lv in w.levels for r in lv.requests] == list(range(9))
    assert _prompts(w)[0] == _prompts(build_workload("chat", requests=3))[0]


def test_chosen_levels():
    w = build_workload("concurrency-sweep", levels=[1, 8, 32])
    assert [(lv.concurrency, len(lv.requests)) for lv in w.levels] == [(1, 2), (8, 16), (32, 64)]
    assert [r.index for lv in w.levels for r in lv.requests] == list(range(82))  # still no prompt twice
    w = build_workload("chat", levels=[1, 2, 3], requests=2)
    assert [(lv.concurrency, len(lv.requests)) for lv in w.levels] == [(1, 2), (2, 2)]  # 3 in flight: never
    with pytest.raises(BenchError, match="give --concurrency or --levels, not both"):
        build_workload("chat", levels=[2], concurrency=2)
    with pytest.raises(BenchError, match=r"--levels must each be between 1 and 1024, got \[\]"):
        build_workload("chat", levels=[])


def test_a_level_runs_at_most_its_requests_in_flight(caplog):
    """`hearth bench --requests 1` reported concurrency 4 (chat's) for one request at a time, and its % of ceiling
    against 4 sequences' share: a level runs at most --requests in flight, said once; without --requests a level
    gets at least as many requests as its concurrency."""
    with caplog.at_level("WARNING", logger="hearth"):
        w = build_workload("chat", requests=1)
    assert [(lv.concurrency, len(lv.requests)) for lv in w.levels] == [(1, 1)] and w.max_concurrency == 1
    assert [r.getMessage() for r in caplog.records] == [
        "--requests 1 keeps at most 1 in flight: concurrency 4 runs as 1"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="hearth"):
        w = build_workload("concurrency-sweep", concurrency=8, requests=3)
    assert [(lv.concurrency, len(lv.requests)) for lv in w.levels] == [(1, 3), (2, 3), (3, 3)]
    assert [r.getMessage() for r in caplog.records] == [
        "--requests 3 keeps at most 3 in flight: concurrency 4, 8 run as 3"]
    w = build_workload("chat", concurrency=16)  # chat's 8 requests would keep 8 in flight
    assert [(lv.concurrency, len(lv.requests)) for lv in w.levels] == [(16, 16)]


def test_warmup_prompt_is_no_workloads():
    warm = warmup_request(4)
    assert warm.max_tokens == 4 and warm.index == -1
    for name in WORKLOADS:
        assert warm.prompt_sha not in _shas(build_workload(name, requests=40))


def test_prompt_shapes():
    chat = build_workload("chat", requests=16).levels[0].requests
    assert all(r.messages[-1]["role"] == "user" for r in chat)
    assert any(len(r.messages) > 2 for r in chat) and any(r.messages[0]["role"] == "system" for r in chat)
    long = build_workload("long-prompt").levels[0].requests[0].messages
    words = len(long[0]["content"].split())
    assert LONG_PROMPT_WORDS <= words < LONG_PROMPT_WORDS + 250
    edit = build_workload("code-edit").levels[0].requests[0].messages
    assert edit[0]["role"] == "system" and "```python\n" in edit[1]["content"]


def test_shared_prefix_conversations_grow_a_turn_at_a_time_over_a_few_system_prompts():
    n, k = SHARED_PREFIX_CONVERSATIONS, SHARED_PREFIX_SYSTEM_PROMPTS
    requests = [r.messages for r in build_workload("shared-prefix", requests=3 * n).levels[0].requests]
    systems = [m[0]["content"] for m in requests]
    assert len(set(systems)) == k and all(len(s.split()) > 500 for s in systems)
    firsts = {s.split(".")[0] for s in systems}
    assert len(firsts) == k  # they differ from their first words: no KV block in common
    for round_ in range(3):  # every conversation once a round, at turn `round_`
        turn = requests[round_ * n:(round_ + 1) * n]
        assert all(len(m) == 2 + 2 * round_ and m[-1]["role"] == "user" for m in turn)
    # each round-1 prompt extends exactly one round-0 prompt (its conversation's first turn), and so on
    for earlier, later in ((requests[:n], requests[n:2 * n]), (requests[n:2 * n], requests[2 * n:])):
        for m in later:
            assert sum(m[:len(e) - 1] == e[:-1] and m[len(e) - 1] == e[-1] for e in earlier) == 1
    # the order is not a fixed cycle (round-robin would then keep a conversation on one replica) and a
    # conversation's next turn comes at least half a round after its last
    orders = [shared_prefix_order(0, r) for r in range(4)]
    assert len({tuple(o) for o in orders}) == 4
    for a, b in zip(orders, orders[1:]):
        assert all(n - a.index(c) + b.index(c) > n // 2 for c in range(n))
    assert build_workload("shared-prefix", seed=1).levels[0].requests[0].messages[0]["content"] not in systems


def test_shared_prefix_conversations_end_after_their_last_turn():
    n, turns = SHARED_PREFIX_CONVERSATIONS, SHARED_PREFIX_TURNS
    w = build_workload("shared-prefix", requests=(turns + 1) * n)
    lengths = [len(r.messages) for r in w.levels[0].requests]
    assert max(lengths) == 2 * turns and lengths[-n:] == [2] * n  # a new conversation in each place


def test_shipped_text_is_complete():
    data = corpus.chat()
    assert len(data["questions"]) >= 20 and len(data["conversations"]) >= 5
    assert len(corpus.paragraphs()) >= 30
    for name, edits in corpus.code_edits().items():
        assert len(edits) >= 3
        compile(corpus.code_file(name), name, "exec")  # the code files are real, valid Python


@pytest.mark.parametrize("kw, needle", [
    ({"name": "poetry"}, "unknown workload 'poetry'; known: chat, long-prompt"),
    ({"name": "chat", "requests": 0}, "--requests must be at least 1"),
    ({"name": "chat", "concurrency": 0}, "--concurrency must be between 1"),
    ({"name": "chat", "max_tokens": -1}, "--max-tokens must be at least 1"),
])
def test_bad_numbers(kw, needle):
    with pytest.raises(BenchError, match=needle):
        build_workload(**kw)
