"""% of the decode ceiling: measured decode speed against what `hearth plan` says the memory
system allows for this model, KV format and context (hearth.memory.roofline)."""

from __future__ import annotations

from pathlib import Path

from hearth.loader.gguf_loader import GGUFFile
from hearth.memory.devices import Device
from hearth.memory.kv_formats import kv_format
from hearth.memory.model_input import from_gguf
from hearth.memory.overhead import DEFAULT_BATCH_TOKENS
from hearth.memory.request import DEFAULT_BLOCK
from hearth.memory.roofline import Roofline
from hearth.memory.units import nbytes, rate


def decode_roofline(gguf: GGUFFile | str | Path, device: Device, kv_cache_dtype: str = "auto",
                    block_size: int | None = None) -> Roofline:
    """device: from hearth.memory.devices.get_device (`this` is measured once, then cached)."""
    g = gguf if isinstance(gguf, GGUFFile) else GGUFFile(Path(gguf))
    m = from_gguf(g)
    fmt = kv_format(kv_cache_dtype)
    return Roofline(m.shape, m.tensors, device, fmt, fmt.block_size(block_size, DEFAULT_BLOCK),
                    DEFAULT_BATCH_TOKENS)


def level_ceiling(roof: Roofline, summary: dict) -> dict | None:
    """The ceiling at the level's concurrency and mean decode context (prompt + half the output),
    and the measured median per-request decode speed as a share of one sequence's part of it.
    With speculative decoding a forward commits `acceptance_length` tokens for one read of the
    weights, so the ceiling is that many times the one-token one."""
    mean_out = summary.get("mean_output_tokens")
    if not mean_out:
        return None
    ctx = max(1, round((summary.get("mean_prompt_tokens") or 0) + mean_out / 2))
    c = summary["concurrency"]
    spec = summary.get("speculative") or {}
    accept = spec.get("acceptance_length") or 1.0
    aggregate = roof.decode_tok_s(ctx, c) * accept
    per_sequence = aggregate / c
    decode = summary.get("decode_tok_s")
    measured = decode["p50"] if decode else None
    step = roof.decode_step_bytes(ctx, c)
    spec_note = (f" x acceptance length {accept:.2f} (tokens committed per forward of a sequence)"
                 if spec.get("acceptance_length") else "")
    return {
        "context": ctx,
        "tok_s_per_sequence": per_sequence,
        "tok_s_aggregate": aggregate,
        "bytes_per_step": step,
        "acceptance_length": spec.get("acceptance_length"),
        "pct": 100 * measured / per_sequence if measured else None,
        "pct_aggregate": 100 * summary["output_tok_s"] / aggregate,
        "reason": (f"{c} sequence(s) at ~{ctx:,} tokens read {nbytes(step)} a step at {rate(roof.device.bandwidth)} "
                   f"({roof.device.source}){spec_note}; pct = median per-request decode tok/s over the ceiling / {c}; "
                   "pct_aggregate = output tok/s over wall time (prefill included) over the ceiling"),
    }
