"""What the cluster's front end adds to TTFT (issue 23 point 6: < 5 ms at p50), against the replica
reached directly.

One process holds a local Ray instance with one replica actor (SmolLM2, one thread), the cluster's
HTTP front end (`hearth cluster serve`'s app, served by uvicorn in a thread) and the client. Each
pair sends the same one-token chat request both ways, the order swapped every pair:

- front end: HTTP POST /v1/chat/completions (stream) -> auth, chat template, tokenizer, checks,
  router -> Ray -> replica; TTFT = first content delta read by the client;
- direct: this process calls the replica actor's `generate` with the same token ids (what the front
  end would send) and waits for its first delta: the Ray hop and the engine, nothing else.

After the first pair the prompt is a prefix-cache hit, so the engine computes one token either way
and the difference is the front end's work: HTTP, routes, template, tokenization, routing and the
SSE write. CPU time is taken around each request too, which a loaded machine inflates far less than
wall time: for the front end, this process's threads but the client's (the front end's event loop
and the Ray threads serving its call); for the direct call, the whole process (its Ray call). The
replica's own process is in neither. The difference is what the front end spends beyond the call.

    .venv/bin/python benchmarks/bench_cluster_frontend.py [--pairs 200] [--model smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's hearth, wherever the script is run from

from hearth.bench.http_client import HttpClient  # noqa: E402
from hearth.bench.metrics.stats import percentile  # noqa: E402
from hearth.bench.spec.servers import free_port  # noqa: E402
from hearth.bench.workloads import BenchRequest  # noqa: E402
from hearth.sampling_params import SamplingParams  # noqa: E402

MESSAGES = [{"role": "user", "content": "Name one colour."}]


def start_front_end(app, port: int):
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("the front end did not start")
        time.sleep(0.05)
    return server, thread


def prompt_ids(served) -> list[int]:
    """The token ids the front end sends for MESSAGES (its own template and encoding)."""
    return served.encode_chat_text(served.render_chat(MESSAGES))


def direct(handle, ids: list[int]) -> tuple[float, float]:
    """(seconds to the replica's first delta, CPU seconds of this process until the answer ended)."""
    import ray

    c0, t0 = time.process_time(), time.perf_counter()
    gen = handle.generate.options(num_returns="streaming").remote(ids, SamplingParams(max_tokens=1, temperature=0),
                                                                  uuid.uuid4().hex)
    first = ray.get(next(gen))
    ttft = time.perf_counter() - t0
    for ref in gen:  # drain: the request ends in the replica before the next one starts
        ray.get(ref)
    if getattr(first, "new_token_ids", None) is None:
        raise SystemExit(f"the replica answered {first!r}")
    return ttft, time.process_time() - c0


def via_front_end(client: HttpClient) -> tuple[float, float]:
    """(TTFT, CPU seconds of this process's threads but the client's own, the main one)."""
    c0, m0 = time.process_time(), time.thread_time()
    r = client._send(BenchRequest(0, MESSAGES, 1), 1)
    if r.error or r.ttft is None:
        raise SystemExit(f"front end request failed: {r.error}")
    return r.ttft, (time.process_time() - c0) - (time.thread_time() - m0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--pairs", type=int, default=200)
    args = p.parse_args()
    from hearth.api.app import ServerConfig
    from hearth.cluster.front import served_model
    from hearth.cluster.launch import ClusterSpec, connect, import_ray, start_replicas
    from hearth.commands.cluster import build_app

    ray = import_ray(local=True)
    connect(None, num_cpus=1, log_to_driver=False)
    try:
        engine = start_replicas(ClusterSpec(args.model, 1, 1, dict(max_model_len=2048, num_kv_blocks=256)))
        app = build_app(args.model, None, engine, ServerConfig())
        port = free_port()
        server, thread = start_front_end(app, port)
        client, handle = HttpClient(f"http://127.0.0.1:{port}"), engine.slots[0].handle
        ids = prompt_ids(served_model(args.model, None, engine))
        runs = {"front": lambda: via_front_end(client), "direct": lambda: direct(handle, ids)}
        got: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
        for i in range(args.pairs + 2):  # the first two pairs warm up (and make the prompt a cache hit)
            for k in (list(runs) if i % 2 else list(runs)[::-1]):
                value = runs[k]()
                if i >= 2:
                    got[k].append(value)
        server.should_exit = True
        thread.join(30)
    finally:
        ray.shutdown()
    ttft = {k: [t for t, _ in v] for k, v in got.items()}
    cpu = {k: [c for _, c in v] for k, v in got.items()}
    diffs = [a - b for a, b in zip(ttft["front"], ttft["direct"])]
    row = {"pairs": args.pairs, "loadavg": Path("/proc/loadavg").read_text().split()[0],
           **{f"{k}_ttft_p50_ms": 1e3 * statistics.median(v) for k, v in ttft.items()},
           "added_ttft_p50_ms": 1e3 * statistics.median(diffs), "added_ttft_p90_ms": 1e3 * percentile(diffs, 90),
           **{f"{k}_cpu_p50_ms": 1e3 * statistics.median(v) for k, v in cpu.items()},
           "added_cpu_p50_ms": 1e3 * (statistics.median(cpu["front"]) - statistics.median(cpu["direct"]))}
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
