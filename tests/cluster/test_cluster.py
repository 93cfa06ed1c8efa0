"""`hearth cluster serve` on a local Ray instance: two SmolLM2 replicas behind one front end, driven
through the official SDKs; prefix routing seen in the replicas' prefix-cache counters; a replica
killed under load; /metrics per replica."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import anthropic
import httpx2
import openai
import pytest
import ray

from hearth.cli import main
from hearth.cluster.router import make_router
from tests.cluster.conftest import API_KEY, ENGINE_ARGS, one_error_line
from tests.gguf_factory import write_header_only_gguf

TIMEOUT = 300  # a shared 2-core machine can take seconds per step; no test waits this long when it passes


def _openai(cluster, cls=openai.OpenAI):
    return cls(base_url=cluster.url + "/v1", api_key=API_KEY, timeout=TIMEOUT, max_retries=0)


def metrics(cluster) -> dict[tuple[str, str], float]:
    """(sample name, replica label or "") -> value."""
    text = httpx2.get(cluster.url + "/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT).text
    out = {}
    for line in text.splitlines():
        if line.startswith("hearth:"):
            name, value = line.rsplit(" ", 1)
            replica = name.split('replica="')[1].split('"')[0] if 'replica="' in name else ""
            key = (name.split("{")[0], replica)
            out[key] = out.get(key, 0.0) + float(value)
    return out


def test_openai_and_anthropic_sdks_streamed_and_not(cluster):
    client = _openai(cluster)
    messages = [{"role": "user", "content": "Name three colors."}]
    whole = client.chat.completions.create(model=cluster.model, messages=messages, max_tokens=16, temperature=0)
    assert whole.choices[0].message.content and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(model=cluster.model, messages=messages, max_tokens=16,
                                                 temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    claude = anthropic.Anthropic(base_url=cluster.url, api_key=API_KEY, timeout=TIMEOUT, max_retries=0)
    msg = claude.messages.create(model=cluster.model, max_tokens=16, messages=messages)
    assert msg.content[0].text and msg.stop_reason in ("end_turn", "max_tokens")
    with claude.messages.stream(model=cluster.model, max_tokens=16, messages=messages) as s:
        assert "".join(s.text_stream)
        assert s.get_final_message().stop_reason in ("end_turn", "max_tokens")
    emb = client.embeddings.create(model=cluster.model, input=["a red apple", "a red apple", "quarterly taxes"])
    a, b, c = (d.embedding for d in emb.data)
    assert len(a) == 576 and sum(x * x for x in a) == pytest.approx(1.0, abs=1e-5)
    assert a == pytest.approx(b, abs=1e-5) and a != pytest.approx(c, abs=1e-2)
    with pytest.raises(openai.AuthenticationError):  # the front end's auth, as hearth serve's
        openai.OpenAI(base_url=cluster.url + "/v1", api_key="wrong", max_retries=0).models.list()


def test_bad_request_is_a_400_from_the_front_end(cluster):
    with pytest.raises(openai.BadRequestError, match="context"):
        _openai(cluster).completions.create(model=cluster.model, prompt="hi " * 3000, max_tokens=4)


SYSTEM = ("You are the support assistant of the Lighthouse Lending Library. The library lends lamps, tents, "
          "tools, board games and bicycles to members of the town. Members may borrow up to five items at a "
          "time for two weeks; a renewal adds one week if nobody is waiting. Late items cost ten cents a day, "
          "capped at the price of the item. Answer in one short sentence, politely, and never invent rules "
          "that are not written here. Opening hours: Monday to Friday nine to six, Saturday ten to two.") * 2


def _routed_and_hits(cluster) -> dict[str, tuple[float, float]]:
    m = metrics(cluster)
    return {s.name: (m[("hearth:replica_requests_routed_total", s.name)], m[("hearth:prefix_cache_hits_total", s.name)])
            for s in cluster.engine.slots}


def test_prefix_routing_keeps_a_shared_system_prompt_on_one_replica(cluster):
    client = _openai(cluster)
    before = _routed_and_hits(cluster)
    questions = ["Can I borrow a tent?", "How late are you open on Saturday?", "What does a late lamp cost?",
                 "How many items may I take?"]
    for q in questions:
        client.chat.completions.create(model=cluster.model, max_tokens=4, temperature=0,
                                       messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}])
    after = _routed_and_hits(cluster)
    routed = {r: after[r][0] - before[r][0] for r in after}
    hits = {r: after[r][1] - before[r][1] for r in after}
    home = max(routed, key=routed.get)
    assert routed[home] == len(questions) and sum(routed.values()) == len(questions), routed
    # every question after the first reuses at least the 8 routing blocks of the system prompt
    block = cluster.engine.slots[0].info.block_size
    assert hits[home] >= (len(questions) - 1) * 8 * block, hits
    assert all(hits[r] == 0 for r in hits if r != home), hits


def _only(cluster, name: str) -> None:
    """Route everything to replica `name`: the others drain (take no new request) meanwhile."""
    for s in cluster.engine.slots:
        s.draining = s.name != name


def test_replicas_share_one_disk_tier(cluster):
    """A prompt answered on r0 has its full blocks written to r0's folder of the shared tier; the same
    prompt on r1 (which never saw it) loads them from there instead of computing them."""
    client = _openai(cluster)
    # a prompt no earlier test sent: neither replica holds any of it in memory (SYSTEM's blocks may be in
    # r1's from the routing test, and r0's written counter may already pass 8 from them)
    prompt = "Renewals. " + " ".join(f"Item {i} renews for {i % 7 + 1} weeks." for i in range(30))
    written = ("hearth:kv_disk_blocks_written_total", "r0")
    try:
        _only(cluster, "r0")
        written_before = metrics(cluster).get(written, 0)
        client.completions.create(model=cluster.model, prompt=prompt, max_tokens=1)
        deadline = time.monotonic() + TIMEOUT
        while metrics(cluster).get(written, 0) < written_before + 8:  # writes are queued
            assert time.monotonic() < deadline, metrics(cluster)
            time.sleep(0.1)
        before = metrics(cluster)[("hearth:prefix_cache_disk_hits_total", "r1")]
        _only(cluster, "r1")
        r = client.completions.create(model=cluster.model, prompt=prompt, max_tokens=1)
        disk_hits = metrics(cluster)[("hearth:prefix_cache_disk_hits_total", "r1")] - before
        assert disk_hits >= 8 * cluster.engine.slots[0].info.block_size, disk_hits
        assert r.usage.prompt_tokens_details.cached_tokens >= disk_hits
    finally:
        for s in cluster.engine.slots:
            s.draining = False


def test_metrics_aggregate_per_replica(cluster):
    m = metrics(cluster)
    names = [s.name for s in cluster.engine.slots]
    assert names == ["r0", "r1"]
    for r in names:
        assert m[("hearth:replica_up", r)] == 1
        assert m[("hearth:kv_cache_blocks_total", r)] > 0
        assert ("hearth:prefix_cache_queries_total", r) in m and ("hearth:num_requests_running", r) in m
    assert m[("hearth:generation_tokens_total", "")] > 0  # counted by the front end, across replicas
    assert m[("hearth:time_to_first_token_seconds_count", "")] > 0
    assert sum(m[("hearth:replica_requests_routed_total", r)] for r in names) > 0


def test_props_counts_the_replicas_slots(cluster):
    """Each replica reports its max_num_seqs (2 here) and whether it speculates as it loads: /props sums them."""
    r = httpx2.get(cluster.url + "/props", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT)
    assert r.json()["total_slots"] == 2 * ENGINE_ARGS["max_num_seqs"], r.text
    assert r.json()["default_generation_settings"]["speculative"] is False


def test_scale_up_and_down_while_serving(cluster):
    """POST /cluster/replicas: a third replica loads, then takes requests; scaling back drains it."""
    http = httpx2.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=TIMEOUT)
    r = http.post("/cluster/replicas", json={"replicas": 3})
    assert r.status_code == 200 and [x["name"] for x in r.json()["replicas"]] == ["r0", "r1", "r2"], r.text
    engine = cluster.engine
    prefix_router = engine.router
    engine.router = make_router("round-robin", 3)
    try:
        client = _openai(cluster)
        for i in range(3):
            client.completions.create(model=cluster.model, prompt=f"Count to {i}", max_tokens=2)
        assert engine.slots[2].routed >= 1
        assert metrics(cluster)[("hearth:replica_up", "r2")] == 1
    finally:
        engine.router = prefix_router
    r = http.post("/cluster/replicas", json={"replicas": 2})
    assert r.status_code == 200 and [x["name"] for x in r.json()["replicas"]] == ["r0", "r1"]
    assert ("hearth:replica_up", "r2") not in metrics(cluster)
    r = http.post("/cluster/replicas", json={"replicas": 0})
    assert r.status_code == 400 and "at least 1" in r.json()["error"]["message"]
    r = http.post("/cluster/replicas", json={"replicas": 9})  # 7 more CPUs than the instance has
    assert r.status_code == 400 and "7 more replicas x 1 thread need 7 CPUs" in r.json()["error"]["message"]
    deadline = time.monotonic() + 60  # r2's CPU comes back once Ray has ended its actor
    while ray.available_resources().get("CPU", 0) < 1:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.1)


async def _ask(client, model: str, i: int, stream: bool) -> tuple:
    """("ok", finish_reason, characters) or ("error", message): one client of the kill test. 64 tokens: r0 is
    killed within milliseconds of its first delta, dozens of decode steps before an answer could end; after
    the kill r1 answers 4-5 of them 2 at a time (160 until 2026-12-07: 13-19 s of the test at load 9-10, now 9-10 s,
    most of it r0's restart)."""
    kw = dict(model=model, max_tokens=64, temperature=0, extra_body={"ignore_eos": True},
              messages=[{"role": "user", "content": f"Tell story number {i} about a lighthouse."}])
    try:
        if not stream:
            r = await client.chat.completions.create(**kw)
            return "ok", r.choices[0].finish_reason, len(r.choices[0].message.content)
        finish, n = None, 0
        async for chunk in await client.chat.completions.create(stream=True, **kw):
            if chunk.choices:
                n += len(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        return "ok", finish, n
    except openai.APIError as e:
        return "error", str(e)


def test_a_replica_killed_under_load(cluster):
    """Round-robin spreads 6 requests 3/3 over replicas that run 2 at once: r0 has two running and one
    queued when it is killed. Running ones with output end with a clean error; the queued one (and any
    running one without output yet) is retried on r1; nothing hangs; r0 comes back and serves."""
    engine = cluster.engine
    prefix_router = engine.router
    engine.router = make_router("round-robin", 2)
    victim = engine.slots[0]
    old_pid = victim.info.pid

    async def run():
        client = _openai(cluster, openai.AsyncOpenAI)
        tasks = [asyncio.create_task(_ask(client, cluster.model, i, stream=i % 2 == 0)) for i in range(6)]
        deadline = time.monotonic() + TIMEOUT
        while victim.answering == 0:  # r0 is mid-answer on at least one request
            assert time.monotonic() < deadline and not any(t.done() for t in tasks)
            await asyncio.sleep(0.01)
        answering, queued = victim.answering, victim.in_flight - victim.answering
        os.kill(old_pid, signal.SIGKILL)
        return answering, queued, await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)

    try:
        answering, queued, results = asyncio.run(run())
        errors = [r for r in results if r[0] == "error"]
        assert all(r[1] == "length" and r[2] > 0 for r in results if r[0] == "ok"), results
        assert all("replica r0 died mid-answer" in r[1] for r in errors), results
        # the answers cut are those r0 had started (output can arrive between our look and the kill:
        # at most its 2 running ones); the ones queued on it were answered by r1
        assert 1 <= answering <= len(errors) <= 2, (answering, results)
        assert queued >= 1 and len(results) - len(errors) >= 4, (queued, results)
        deadline = time.monotonic() + TIMEOUT
        while not (victim.up and victim.info.pid != old_pid):
            assert time.monotonic() < deadline, "the killed replica did not come back"
            time.sleep(0.2)
        assert metrics(cluster)[("hearth:replica_restarts_total", "r0")] >= 1
        before = victim.routed
        client = _openai(cluster)
        for i in range(2):
            r = client.chat.completions.create(model=cluster.model, max_tokens=4,
                                               messages=[{"role": "user", "content": f"Hello {i}"}])
            assert r.choices[0].finish_reason in ("stop", "length")
        assert victim.routed > before  # round-robin sent one of them to the restarted replica
    finally:
        engine.router = prefix_router


# Refusals that need the running cluster (kept in this module: the cluster fixture is built once per
# module under make test's xdist workers); the others: tests/cluster/test_cluster_bad_input.py
def _free_cpus() -> float:
    return ray.available_resources().get("CPU", 0)


def test_more_replicas_than_the_cluster_can_place(cluster, capsys):
    assert _free_cpus() == 1  # 3 logical CPUs, 2 held by the serving replicas
    assert main(["cluster", "serve", cluster.path, "--replicas", "2"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "2 replicas x 1 thread need 2 CPUs, but the Ray cluster has 1 free of its 3: lower --replicas" in line


def test_a_model_a_replica_cannot_load(cluster, tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    write_header_only_gguf(bad, "nosucharch")
    assert main(["cluster", "serve", str(bad), "--replicas", "1"]) == 1
    line = one_error_line(capsys.readouterr().err)
    assert "replica r0 could not load the model: unsupported architecture 'nosucharch'" in line, line
    deadline = time.monotonic() + 60  # the failed replica's actor is killed, its CPU freed
    while _free_cpus() < 1:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.1)
