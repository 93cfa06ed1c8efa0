"""Benchmark rows: one plain dict per (variant, workload, sight), as written to the JSONL file,
and the comparisons across rows (text equal to the engine's plain greedy, ratios to hearth plain
and to llama.cpp's best variant on the same workload and sight). Pure: no server, no clock."""

from __future__ import annotations

import hashlib

from hearth.bench.spec.client import Sample
from hearth.bench.spec.variants import PLAIN, Variant

SIGHTS = ("first", "repeat")
"""first: a fresh server's first timed request; repeat: the same request again to that server."""
HEARTH, LLAMA = "hearth", "llama.cpp"


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def acceptance_length(tokens: int | None, accepted: float | None) -> float | None:
    """Tokens committed per target forward while decoding: the first token comes from the prefill,
    the other n-1 from n-1-accepted forwards (each forward commits its accepted drafts + one)."""
    if tokens is None or accepted is None or tokens < 2:
        return None
    forwards = tokens - 1 - accepted
    return (tokens - 1) / forwards if forwards > 0 else None


def _spec_stats(s: Sample, speculative: bool) -> dict:
    """llama-server's per-request timings when it sent them; else the /metrics counters' delta.
    Without speculation a server may export no counters: nothing was drafted."""
    if s.timings is not None:
        return {"accepted": s.timings.get("draft_n_accepted", 0), "draft_tokens": s.timings.get("draft_n", 0),
                "drafts": s.counters.get("num_drafts")}
    missing = None if speculative else 0
    return {"accepted": s.counters.get("num_accepted_tokens", missing),
            "draft_tokens": s.counters.get("num_draft_tokens", missing), "drafts": s.counters.get("num_drafts", missing)}


def sample_row(s: Sample, variant: Variant, workload: str, sight: str, run: dict) -> dict:
    """`run`: what every row of the run shares (commit, tier, model hashes, threads, ...)."""
    n = s.completion_tokens
    decode_s = (s.last - s.first) if s.first is not None and s.last is not None else None
    stats = _spec_stats(s, bool(variant.config))
    row = {**run, "engine": variant.engine, "config_name": variant.name, "config": variant.config,
           "workload": workload, "sight": sight, "tokens": n, "prompt_tokens": s.prompt_tokens,
           "decode_tok_s": (n - 1) / decode_s if n and n >= 2 and decode_s else None,
           "e2e_tok_s": n / (s.end - s.start) if n and s.end > s.start else None,
           "ttft_s": s.first - s.start if s.first is not None else None,
           **stats, "acceptance_len": acceptance_length(n, stats["accepted"]),
           "server_decode_tok_s": (s.timings or {}).get("predicted_per_second"),
           "finish_reason": s.finish_reason, "error": s.error, "text_sha": text_sha(s.text), "text": s.text}
    if not variant.uses_draft:
        row.pop("draft_sha256", None)
    return row


def error_row(variant: Variant, workload: str, sight: str, run: dict, error: str) -> dict:
    """A variant that could not be measured (its server did not start, say): kept as a row, so the
    table shows it and the run goes on."""
    return sample_row(Sample(error=error), variant, workload, sight, run)


def _key(row: dict) -> tuple:
    return row["workload"], row["sight"]


def compare(rows: list[dict]) -> list[dict]:
    """Each row plus `equal` (its text == its engine's plain greedy on that workload at first
    sight; None without that reference), `vs_hearth_plain` and `vs_llama_best` (decode tok/s
    ratios on the same workload and sight; None without the other side) and `llama_best`."""
    ok = [r for r in rows if not r["error"] and r["decode_tok_s"]]
    plain_text = {(r["engine"], r["workload"]): r["text_sha"] for r in rows
                  if r["config_name"] == PLAIN and r["sight"] == "first" and not r["error"]}
    hearth_plain = {_key(r): r["decode_tok_s"] for r in ok if r["engine"] == HEARTH and r["config_name"] == PLAIN}
    best: dict[tuple, dict] = {}
    for r in ok:
        if r["engine"] == LLAMA and (_key(r) not in best or r["decode_tok_s"] > best[_key(r)]["decode_tok_s"]):
            best[_key(r)] = r
    out = []
    for r in rows:
        ref = plain_text.get((r["engine"], r["workload"]))
        b, hp, tok_s = best.get(_key(r)), hearth_plain.get(_key(r)), r["decode_tok_s"]
        out.append({**r, "equal": None if ref is None or r["error"] else r["text_sha"] == ref,
                    "vs_hearth_plain": tok_s / hp if tok_s and hp else None,
                    "vs_llama_best": tok_s / b["decode_tok_s"] if tok_s and b else None,
                    "llama_best": b["config_name"] if b else None})
    return out
