"""A seeded storm of concurrent requests on a real server of three tiny random models: uvicorn on a loopback
port in this process (so the engines' bookkeeping can be read after), built as `hearth serve --models FILE
--max-memory` builds it, with room for two models, so requests for the third load it and unload another; one
model keeps its KV cache in q8_0, one speculates (prompt lookup).

From SEED: chat (tools under the guard, JSON mode), completions (batches of prompts, logprobs, echo), messages,
responses (background ones polled or cancelled) and Ollama's chat and generate (keep_alive 0 unloads), streamed
and whole, n > 1, max_tokens of 1 to 200, stop strings, a KV pool small enough to preempt, a queue short enough
for 429s, clients that go away mid-stream or before the first byte, a few invalid bodies and unknown models, with
/health, /v1/models and /metrics polled throughout.

What hearth promises its clients, checked for every request: a 2xx with a whole answer (as many choices as
asked, no stop string in them), or a 4xx (an invalid body's), 429 or 503 in the route's error shape with a
message; a completed stream ends as its API ends one, with no error event; every request ends (generous
timeouts, never a speed); the polls answer, and show at most two models loaded. After the storm: every loaded
engine runs and queues nothing, its KV blocks are all free again (the prefix cache's stay findable, held by
no one), the pool holds no request, the engines of unloaded models are freed, /metrics agrees, and each model
gives the same greedy answer it gave before the storm."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import time
import weakref
from dataclasses import dataclass, field

import httpx
import pytest

from tests.gguf_factory import write_tiny_gguf
from tests.server.chat_browser import PageServer
from tests.server.fakes import TEMPLATE

SEED = 20261207
REQUESTS = 150
CONCURRENCY = 16
"""Requests in flight at once: enough to batch, queue and preempt; few enough that a model waiting for room
mostly finds one idle (a busy one is waited for, then a 503: allowed, but slow)."""
MODELS = {"m0": "", "m1": 'kv_cache_dtype = "q8_0"\n',
          "m2": 'speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_min = 1 }\n'}
"""Each model's own lines in the models file: one of each KV format's and speculation's bookkeeping."""
TIMEOUT = 300  # seconds per request: a shared 2-core machine under load is slow, never stuck this long
SETTLE = 120  # seconds for the engines to take the last aborts once every client is done
HI = [{"role": "user", "content": "Say hi."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
WORDS = "the a of to cat dog sun moon red blue one two".split()
ENGINE_FLAGS = ("--max-model-len", "448", "--max-num-seqs", "4", "--max-num-batched-tokens", "64",
                "--num-kv-blocks", "28", "--max-queued", "8")
"""28 blocks of 16 tokens: four 200-token answers do not fit together, so the scheduler preempts."""


def serve_args(*argv: str):
    from hearth.cli import command_parser

    return command_parser("serve").parse_intermixed_args(list(argv))


class Server(PageServer):
    """The app `hearth serve --models FILE` builds, under uvicorn on a free loopback port in a thread."""

    def __init__(self, models_file):
        from hearth.api.app import create_app
        from hearth.commands.serve import server_config
        from hearth.commands.serve_models import build_pool

        flags = ("--models", str(models_file), *ENGINE_FLAGS)
        one = max(s.spec.footprint for s in build_pool(serve_args(*flags)).slots)
        args = serve_args(*flags, "--max-memory", f"{2.5 * one / 2**30:.6f}", "--log-level", "warning")
        self.pool = build_pool(args)
        self.cores: list[weakref.ref] = []  # every engine core ever loaded: those unloaded must be freed
        load = self.pool.loader

        def loader(spec):
            served = load(spec)
            self.cores.append(weakref.ref(served.engine.core))
            return served
        self.pool.loader = loader
        self.pool.busy_wait_s = 60  # a model waits this long for a busy one's room: longer than any answer here
        self.pool.preload()
        self.app = create_app(self.pool, server_config(args, listen=True))
        super().__init__(self.app)

    def engines(self) -> dict:
        return {slot.spec.name: slot.served.engine for slot in self.pool.slots if slot.served is not None}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stress")
    lines = []
    for i, (name, own) in enumerate(MODELS.items()):
        path = tmp / f"{name}.gguf"  # Q8_0 weights: the native kernels, which speculation needs; q8_0's head_dim 32
        write_tiny_gguf(path, "qwen2", seed=i, qtype="Q8_0", chat_template=TEMPLATE, context=1024, tied=False,
                        hidden=128, heads=4, kv_heads=2, head_dim=32)
        lines.append(f'[[models]]\nname = "{name}"\nmodel = "{path}"\n{own}')
    (tmp / "models.toml").write_text("".join(lines))
    with Server(tmp / "models.toml") as s:
        yield s


# -- the requests --

@dataclass
class Call:
    """One request of the storm: what was sent and what it promises."""
    route: str
    body: dict | str
    stream: bool = False
    leave_after: int | None = None
    """Stream lines read before the client goes away (None: reads it all)."""
    cancel: bool = False
    """The client gives up (its task cancelled) after 0 to 0.5 s: before sending, before the first byte or
    before the whole answer; an answer that came first is checked as any other."""
    then: str = ""
    """A background response's follow-up: poll it to its end, or cancel it."""
    invalid: bool = False
    """Sent to be refused: a 4xx is what it must get."""
    outcome: str = ""
    problems: list[str] = field(default_factory=list)

    def body_model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None


def _prompt(rng: random.Random, most: int = 30) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, most)))


def _limits(rng: random.Random) -> tuple[int, list[str] | None]:
    max_tokens = rng.choice([1, 2, 5, 16, 40, 200])
    stop = rng.sample(["e", "th", "o ", "!", "zz"], rng.randint(1, 2)) if rng.random() < 0.3 else None
    return max_tokens, stop


def make_call(rng: random.Random) -> Call:
    model = rng.choice(list(MODELS))
    kind = rng.choices(["chat", "tools", "completions", "messages", "responses", "ollama", "invalid"],
                       [4, 1, 3, 3, 2, 2, 1])[0]
    max_tokens, stop = _limits(rng)
    stream = rng.random() < 0.5
    if kind == "chat":
        body = {"model": model, "messages": [{"role": "user", "content": _prompt(rng)}], "max_tokens": max_tokens,
                "n": rng.choice([1, 1, 2, 3]), "stream": stream, "seed": rng.randint(0, 99),
                **({"stop": stop} if stop else {})}
        if stream and rng.random() < 0.3:
            body["stream_options"] = {"include_usage": True}
        call = Call("/v1/chat/completions", body, stream)
    elif kind == "tools":  # the tool guard's grammar, forced or lazy; or JSON mode's
        body = {"model": model, "messages": [{"role": "user", "content": _prompt(rng, 10)}],  # tools take ~350 tokens
                "max_tokens": min(max_tokens, 40), "stream": stream, "n": rng.choice([1, 2])}
        if rng.random() < 0.7:
            body |= {"tools": TOOLS, "tool_choice": rng.choice(["auto", "required"])}
        else:
            body["response_format"] = {"type": "json_object"}
        call = Call("/v1/chat/completions", body, stream)
    elif kind == "ollama":  # keep_alive 0 unloads the model once its answer is sent
        keep = {"keep_alive": rng.choice([0, "1s", "5m"])} if rng.random() < 0.5 else {}
        options = {"num_predict": max_tokens, **({"stop": stop} if stop else {})}
        if rng.random() < 0.5:
            body = {"model": model, "messages": [{"role": "user", "content": _prompt(rng)}], "options": options,
                    "stream": stream, **keep}
            call = Call("/api/chat", body, stream)
        else:
            body = {"model": model, "prompt": _prompt(rng) if rng.random() < 0.9 else "", "options": options,
                    "stream": stream, **keep}
            call = Call("/api/generate", body, stream)
    elif kind == "completions":
        prompt = _prompt(rng) if rng.random() < 0.7 else [_prompt(rng) for _ in range(rng.randint(2, 3))]
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "n": rng.choice([1, 2]),
                "stream": stream, "temperature": 0, **({"stop": stop} if stop else {})}
        if rng.random() < 0.3:
            body |= {"logprobs": 2, "echo": not stream and rng.random() < 0.5}
        call = Call("/v1/completions", body, stream)
    elif kind == "messages":
        body = {"model": model, "messages": [{"role": "user", "content": _prompt(rng)}], "max_tokens": max_tokens,
                "stream": stream, **({"stop_sequences": stop} if stop else {})}
        call = Call("/v1/messages", body, stream)
    elif kind == "responses":
        body = {"model": model, "input": _prompt(rng), "max_output_tokens": max(max_tokens, 16), "stream": stream}
        call = Call("/v1/responses", body, stream)
        if rng.random() < 0.3:  # answered at once, generated apart from the connection: polled, or cancelled
            body["background"] = True
            call.then = rng.choice(["poll", "cancel"])
    else:
        return _invalid(rng, model)
    gone = rng.random()
    if stream and gone < 0.2:
        call.leave_after = rng.randint(1, 6)
    elif gone < 0.3:
        call.cancel = True
    return call


def _invalid(rng: random.Random, model: str) -> Call:
    route, body = rng.choice([
        ("/v1/chat/completions", {"model": model, "messages": "not a list"}),
        ("/v1/chat/completions", {"model": model, "messages": HI, "n": 0}),
        ("/v1/chat/completions", {"model": "no-such-model", "messages": HI}),
        ("/v1/chat/completions", '{"model": "m0", "messages": ['),
        ("/v1/completions", {"model": model, "prompt": "x", "max_tokens": -1}),
        ("/v1/completions", {"model": model, "prompt": "x", "temperature": "hot"}),
        ("/v1/messages", {"model": model, "messages": HI}),  # no max_tokens
        ("/v1/messages", {"model": model, "max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]}),
        ("/v1/responses", {"model": model, "input": "x", "max_output_tokens": 10**9}),
    ])
    return Call(route, body, stream=rng.random() < 0.5 and isinstance(body, dict), invalid=True)


# -- the checks --

def error_problem(call: Call, status: int, text: str) -> str | None:
    """None: `text` is the route's error shape with a message; else what is wrong with it."""
    try:
        body = json.loads(text)
    except ValueError:
        return f"{status} with a body that is no JSON: {text[:200]!r}"
    if call.route == "/v1/messages":
        ok = body.get("type") == "error" and isinstance(body.get("error"), dict) and body["error"].get("message")
    elif call.route.startswith("/api/"):  # Ollama's: one string
        ok = isinstance(body.get("error"), str) and body["error"]
    else:
        ok = isinstance(body.get("error"), dict) and body["error"].get("message") and body["error"].get("type")
    return None if ok else f"{status} with a body not in the route's error shape: {text[:200]!r}"


def sse_events(lines: list[str]) -> list[tuple[str | None, str]]:
    """(event name, data) of each event, in order."""
    events, name = [], None
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            events.append((name, line[5:].strip()))
            name = None
    return events


def stream_problem(call: Call, lines: list[str]) -> str | None:
    """None: a stream that ended as its API ends one, with no error event in it."""
    if call.route.startswith("/api/"):  # Ollama's NDJSON: the last line says done
        objects = [json.loads(line) for line in lines if line.strip()]
        if not objects or any("error" in o for o in objects) or not objects[-1].get("done"):
            return f"an NDJSON stream that does not end done: {lines[-3:]!r}"
        return None
    events = sse_events(lines)
    if not events:
        return "a stream of no events"
    if call.route in ("/v1/chat/completions", "/v1/completions"):
        if events[-1][1] != "[DONE]":
            return f"a stream that does not end with [DONE]: {events[-1][1][:200]!r}"
        for _, data in events[:-1]:
            if "error" in json.loads(data):
                return f"an error event in a stream: {data[:200]}"
        return None
    kinds = [json.loads(d).get("type") for _, d in events if d != "[DONE]"]
    if "error" in kinds:
        return f"an error event in a stream: {events[kinds.index('error')][1][:200]}"
    last = {"/v1/messages": ("message_stop",),
            "/v1/responses": ("response.completed", "response.incomplete", "response.failed")}[call.route]
    return None if kinds[-1] in last else f"a stream that ends with {kinds[-1]!r}, not {last}"


def whole_problem(call: Call, body: dict) -> str | None:
    """None: a whole answer of as many choices as asked, each at most max_tokens long, none with a stop string."""
    b = call.body
    stops = b.get("stop") or b.get("stop_sequences") or b.get("options", {}).get("stop") or []
    if any(s in text for text in _texts(call, body) for s in stops):
        return f"a stop string {stops} in the answer: {str(body)[:300]}"
    if call.route in ("/v1/chat/completions", "/v1/completions"):
        prompts = len(b["prompt"]) if isinstance(b.get("prompt"), list) else 1
        if len(body.get("choices", [])) != b.get("n", 1) * prompts:
            return f"{len(body.get('choices', []))} choices for n={b.get('n', 1)}"
        if body["usage"]["completion_tokens"] > b["max_tokens"] * b.get("n", 1) * prompts:
            return f"usage {body['usage']} over max_tokens {b['max_tokens']}"
    elif call.route.startswith("/api/"):
        if not body.get("done") or body.get("eval_count", 0) > b["options"]["num_predict"]:
            return f"not a whole answer: {str(body)[:200]}"
    elif call.route == "/v1/messages":
        if body.get("type") != "message" or body["usage"]["output_tokens"] > b["max_tokens"]:
            return f"not a whole message: {str(body)[:200]}"
    elif body.get("status") not in (("queued", "in_progress", "completed") if b.get("background") else
                                    ("completed", "incomplete")):
        return f"a response with status {body.get('status')!r}"
    return None


def _texts(call: Call, body: dict) -> list[str]:
    """The text of each answer in a whole reply (the prompt an echo gives back left out)."""
    if call.route == "/v1/chat/completions":
        return [c["message"].get("content") or "" for c in body.get("choices", [])]
    if call.route == "/v1/completions":
        return [] if call.body.get("echo") else [c["text"] for c in body.get("choices", [])]
    if call.route == "/v1/messages":
        return [c.get("text", "") for c in body.get("content", [])]
    if call.route == "/api/chat":
        return [body.get("message", {}).get("content", "")]
    return [body.get("response", "")] if call.route == "/api/generate" else []


async def send(client: httpx.AsyncClient, call: Call) -> None:
    kw = {"content": call.body} if isinstance(call.body, str) else {"json": call.body}
    if call.cancel:  # the task is cancelled as it waits for the answer: the connection closes under it
        task = asyncio.ensure_future(client.post(call.route, **kw))
        await asyncio.sleep(random.Random(str(call.body)).choice([0, 0.001, 0.01, 0.05, 0.2, 0.5]))
        task.cancel()
        try:
            response = await task
        except asyncio.CancelledError:
            call.outcome = "cancelled"
            return
        if call.stream and response.status_code == 200:  # all of it came before the client could leave
            check_stream(call, response.text.splitlines())
        else:
            check_whole(call, response.status_code, response.text)
        return
    if not call.stream:
        response = await client.post(call.route, **kw)
        check_whole(call, response.status_code, response.text)
        if call.then and response.status_code == 200:
            await follow_up(client, call, response.json()["id"])
        return
    async with client.stream("POST", call.route, **kw) as response:
        if response.status_code != 200:
            check_whole(call, response.status_code, (await response.aread()).decode())
            return
        lines = []
        async for line in response.aiter_lines():
            lines.append(line)
            if call.leave_after is not None and sum(1 for x in lines if x.startswith("data:")) >= call.leave_after:
                call.outcome = "left"
                return  # leaving the block closes the connection mid-stream
    check_stream(call, lines)


def check_stream(call: Call, lines: list[str]) -> None:
    call.outcome = "streamed"
    if problem := stream_problem(call, lines):
        call.problems.append(problem)
    if call.invalid:
        call.problems.append("an invalid body was answered with a stream")


async def follow_up(client: httpx.AsyncClient, call: Call, rid: str) -> None:
    """A background response: cancelled, or polled; either way it reaches an end."""
    if call.then == "cancel":
        r = await client.post(f"/v1/responses/{rid}/cancel")
        if r.status_code != 200:
            call.problems.append(f"cancel: {r.status_code} {r.text[:200]!r}")
    while True:
        r = await client.get(f"/v1/responses/{rid}")
        if r.status_code != 200:
            call.problems.append(f"GET: {r.status_code} {r.text[:200]!r}")
            return
        status = r.json()["status"]
        if status not in ("queued", "in_progress"):
            break
        await asyncio.sleep(0.05)
    want = ("cancelled", "completed", "incomplete") if call.then == "cancel" else ("completed", "incomplete")
    if status not in want:
        call.problems.append(f"a background response {call.then}ed ended {status!r}")
    call.outcome = f"background {status}"


def check_whole(call: Call, status: int, text: str) -> None:
    call.outcome = str(status)
    if 200 <= status < 300 and not call.invalid:
        if problem := whole_problem(call, json.loads(text)):
            call.problems.append(problem)
    elif (400 <= status < 500 and call.invalid) or status in (429, 503):
        if problem := error_problem(call, status, text):
            call.problems.append(problem)
    else:
        call.problems.append(f"status {status}: {text[:300]!r}")
    if call.invalid and not 400 <= status < 500:
        call.problems.append(f"an invalid body got {status}")


async def poll(client: httpx.AsyncClient, done: asyncio.Event, seen: list[str]) -> None:
    """/health, /v1/models and /metrics, over and over until the storm ends: each answers 200, two models at most
    are loaded (the budget's room), and no engine runs more than its sequences or holds more than its blocks."""
    while not done.is_set():
        for path in ("/health", "/v1/models", "/metrics"):
            r = await client.get(path)
            if r.status_code != 200:
                seen.append(f"GET {path}: {r.status_code} {r.text[:200]!r}")
            elif path == "/v1/models":
                loaded = [m["id"] for m in r.json()["data"] if m["hearth"]["loaded"]]
                if len(loaded) > 2:
                    seen.append(f"{loaded} loaded at once, in a budget of two")
            elif path == "/metrics":
                seen += metrics_problems(r.text)
        await asyncio.sleep(0.05)


def samples(text: str, name: str, *more: str) -> dict:
    """model_name (with `more` labels: a tuple of theirs, then it) -> the value of series `name` in a /metrics text."""
    out = {}
    for line in text.splitlines():
        if line.startswith(f"hearth:{name}{{"):
            labels, value = line.rsplit(" ", 1)
            keys = tuple(labels.split(f'{k}="')[1].split('"')[0] for k in (*more, "model_name"))
            out[keys if more else keys[0]] = float(value)
    return out


def metrics_problems(text: str) -> list[str]:
    running, used, total = (samples(text, g) for g in ("num_requests_running", "kv_cache_blocks_used",
                                                       "kv_cache_blocks_total"))
    problems = [f"{m}: {n:g} requests running, max_num_seqs 4" for m, n in running.items() if n > 4]
    problems += [f"{m}: {u:g} of {total.get(m)} KV blocks used" for m, u in used.items()
                 if not 0 <= u <= total.get(m, -1)]
    return problems


async def storm(url: str, calls: list[Call]) -> list[str]:
    limits = httpx.Limits(max_connections=CONCURRENCY + 4, max_keepalive_connections=CONCURRENCY + 4)
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT, limits=limits) as client:
        gate, done, polled = asyncio.Semaphore(CONCURRENCY), asyncio.Event(), []

        async def one(call: Call) -> None:
            async with gate:
                try:
                    await asyncio.wait_for(send(client, call), TIMEOUT)
                except asyncio.TimeoutError:
                    call.problems.append(f"no answer in {TIMEOUT}s")
                except Exception as e:  # noqa: BLE001  (a reply the checks could not read: reported with the rest)
                    call.problems.append(f"{type(e).__name__}: {e}")

        pollers = [asyncio.ensure_future(poll(client, done, polled)) for _ in range(2)]
        await asyncio.gather(*(one(c) for c in calls))
        done.set()
        await asyncio.gather(*pollers)
        return polled


# -- after the storm --

def settled(server: Server) -> dict[str, str]:
    """What each loaded engine still holds (empty: nothing), once it has had time to take the last aborts."""
    deadline = time.monotonic() + SETTLE
    while True:
        held = {}
        for name, engine in server.engines().items():
            s, kv = engine.stats(), engine.core.scheduler.kv
            refs = sum(1 for r in kv.pool.ref_cnt if r)
            if engine.num_in_flight or s.num_running or s.num_waiting or refs or kv.pool.num_free != kv.pool.num_blocks:
                held[name] = (f"{engine.num_in_flight} in flight, {s.num_running} running, {s.num_waiting} waiting, "
                              f"{refs} blocks referenced, {kv.pool.num_free}/{kv.pool.num_blocks} free")
        held.update({slot.spec.name: f"{slot.pending} pending, {slot.served.holds.count if slot.served else 0} holds"
                     for slot in server.pool.slots if slot.pending or (slot.served and slot.served.holds.count)})
        if not held or time.monotonic() > deadline:
            return held
        time.sleep(0.1)


def greedy(url: str, model: str) -> str:
    r = httpx.post(f"{url}/v1/chat/completions", timeout=TIMEOUT,
                   json={"model": model, "messages": HI, "max_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def test_a_storm_of_requests_breaks_no_client_and_leaks_nothing(server):
    before = {m: greedy(server.url, m) for m in MODELS}  # loads all three: one unloads on the way
    rng = random.Random(SEED)
    calls = [make_call(rng) for _ in range(REQUESTS)]
    polled = asyncio.run(storm(server.url, calls))

    broken = [f"{c.route} {json.dumps(c.body)[:160]} -> {c.outcome}: {'; '.join(c.problems)}"
              for c in calls if c.problems]
    assert not broken, f"{len(broken)} of {len(calls)} requests broken:\n" + "\n".join(broken[:20])
    assert not polled, "\n".join(polled[:20])
    outcomes = {c.outcome for c in calls}
    assert {"200", "streamed", "left", "cancelled"} <= outcomes, outcomes  # the storm did what it says
    assert settled(server) == {}
    gc.collect()
    loaded = [e.core for e in server.engines().values()]
    kept = [r() for r in server.cores if r() is not None and all(r() is not core for core in loaded)]
    assert len(server.cores) > len(MODELS) and not kept, "an unloaded model's engine is still referenced"
    assert not server.app.state.background  # every background response ended
    cards = httpx.get(f"{server.url}/v1/models", timeout=TIMEOUT).json()["data"]
    assert {c["id"] for c in cards if c["hearth"]["loaded"]} == set(server.engines())
    assert not [c["id"] for c in cards if c["hearth"]["loading"]]
    ps = httpx.get(f"{server.url}/api/ps", timeout=TIMEOUT).json()["models"]  # Ollama's list agrees
    assert {m["name"].removesuffix(":latest") for m in ps} == set(server.engines())
    metrics = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    for name in server.engines():
        for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_blocks_used"):
            assert f'hearth:{gauge}{{model_name="{name}"}} 0.0' in metrics, (gauge, name)
    assert {m: greedy(server.url, m) for m in MODELS} == before
    finished = httpx.get(f"{server.url}/metrics", timeout=TIMEOUT).text
    answered = {m: 2 + sum(answered_choices(c) for c in calls if c.body_model() == m) for m in MODELS}  # 2: greedy's
    counted = {m: sum(v for k, v in samples(finished, "request_success_total", "finished_reason").items()
                      if k[1] == m) for m in MODELS}
    assert all(counted[m] >= answered[m] for m in MODELS), (counted, answered)  # more: retries, cancels too late


def answered_choices(call: Call) -> int:
    """Engine requests a whole answer or an ended stream of `call` finished (each counts in request_success)."""
    b = call.body
    if call.invalid or call.outcome not in ("200", "streamed") or call.route == "/api/generate" and not b["prompt"]:
        return 0
    return b.get("n", 1) * (len(b["prompt"]) if isinstance(b.get("prompt"), list) else 1)
