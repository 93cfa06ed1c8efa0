"""results.json objects as `hearth bench` writes them, with numbers chosen so a report's medians and
ratios can be worked out by hand."""

from __future__ import annotations

MiB = 2**20


def level(c: int, tok_s: float, ttft=(0.2, 0.4), itl=(0.014, 0.028), decode=60.0, pct=37.0, rss=200 * MiB,
          failed: int = 0) -> dict:
    return {"concurrency": c, "requests": 2 * c, "failed": failed, "duration_s": 1.0, "output_tokens": 64,
            "output_tok_s": tok_s, "ttft_s": {"n": 2, "p50": ttft[0], "p99": ttft[1]},
            "itl_s": {"n": 60, "p50": itl[0], "p99": itl[1]}, "decode_tok_s": {"n": 2, "p50": decode, "p1": decode},
            "decode_ceiling": {"pct": pct, "tok_s_per_sequence": 100 * decode / pct}, "peak_rss_bytes": rss,
            "errors": ["HTTP 500: boom"] if failed else []}


def results(label: str, seed: int, levels: list[dict], workload: str = "concurrency-sweep", max_tokens: int = 32,
            created: str = "2026-11-29T10:00:00+00:00", load: float = 0.5, cpu: str = "Xeon Test CPU",
            quality: dict | None = None) -> dict:
    return {
        "hearth_bench": 1, "created": created, "mode": "url",
        "target": {"url": "http://127.0.0.1:9999", "served_model": "smol", "model": "/m/SmolLM2.Q4_1.gguf",
                   "model_path": "/m/SmolLM2.Q4_1.gguf", "device": "this (Xeon Test CPU, 2 cores)",
                   "bandwidth": 18.3e9, "threads": 2, "label": label, "ignore_eos": True},
        "machine": {"cpu": cpu, "cores": 2, "memory_bytes": 24 * 2**30, "os": "Linux 6.1", "python": "3.11",
                    "hearth": "0.1.0", "load_average_1m": load},
        "workload": {"name": workload, "seed": seed, "max_tokens": max_tokens,
                     "concurrency": [lv["concurrency"] for lv in levels],
                     "requests": [lv["requests"] for lv in levels], "sampling": "greedy"},
        "levels": levels, "peak_rss_bytes": max(lv["peak_rss_bytes"] for lv in levels), "peak_rss_per_level": True,
        "quality": quality or {"status": "reference written to", "reference": f"/refs/{workload}-{seed}.json",
                               "agreement": None},
    }


def compared(workload: str, seed: int, agreement: float, exact: float) -> dict:
    return {"status": "compared with", "reference": f"/refs/{workload}-{seed}.json", "unit": "words",
            "compared": 4, "agreement": agreement, "exact_match": exact, "by_concurrency": {}}
