"""One concurrency level's numbers: latencies as distributions, throughput as totals over wall time."""

from __future__ import annotations

from hearth.bench.metrics.stats import summarize
from hearth.bench.records import LevelRun

MAX_ERRORS_SHOWN = 3


def speculative_summary(counts: dict | None, output_tokens: int) -> dict | None:
    """Acceptance length: output tokens per target forward of a sequence. Every forward that
    yields output commits one token of its own plus the drafts it accepted, so the forwards are
    output - accepted. Also vLLM's mean acceptance length: 1 + accepted per drafting step."""
    if counts is None:
        return None
    accepted, forwards = counts["accepted_tokens"], output_tokens - counts["accepted_tokens"]
    return {**counts, "acceptance_length": output_tokens / forwards if forwards > 0 else None,
            "acceptance_length_drafted": 1 + accepted / counts["drafts"] if counts["drafts"] else None}


def level_summary(run: LevelRun) -> dict:
    ok = [r for r in run.results if r.ok]
    duration = max(run.duration, 1e-9)
    output = sum(r.output_tokens for r in ok)
    known = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    prompt = sum(known) if known and len(known) == len(ok) else None
    return {
        "concurrency": run.concurrency,
        "requests": len(run.results),
        "failed": len(run.results) - len(ok),
        "duration_s": run.duration,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "mean_prompt_tokens": prompt / len(ok) if prompt is not None and ok else None,
        "mean_output_tokens": output / len(ok) if ok else None,
        "output_tok_s": output / duration,
        "total_tok_s": (output + (prompt or 0)) / duration if prompt is not None else None,
        "requests_per_s": len(ok) / duration,
        "ttft_s": summarize([r.ttft for r in ok if r.ttft is not None]),
        "itl_s": summarize([gap for r in ok for gap in r.itls]),
        "decode_tok_s": summarize([r.decode_tok_s for r in ok if r.decode_tok_s is not None]),
        "latency_s": summarize([r.latency for r in ok]),
        "peak_rss_bytes": run.peak_rss,
        "speculative": speculative_summary(run.spec, output),
        "errors": sorted({r.error for r in run.results if r.error})[:MAX_ERRORS_SHOWN],
    }
