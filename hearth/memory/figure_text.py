"""How each plan figure reads to a person: its section, its label and how its value prints. One
table for `hearth plan`'s report and for the benchmark's markdown, so both say the same thing."""

from __future__ import annotations

from hearth.memory.units import flops, nbytes, ops, rate


def _tokens(v) -> str:
    return f"{v:,} tokens"


def _yes(v) -> str:
    return "yes" if v else "NO"


# figure -> (section, label, how its value prints)
FIGURES = {
    "weight_bytes": ("memory", "weights (file)", nbytes),
    "resident_weight_bytes": ("memory", "weights (held)", nbytes),
    "kv_bytes_per_token": ("memory", "KV per token", nbytes),
    "kv_cache_bytes": ("memory", "KV cache", nbytes),
    "activation_bytes": ("memory", "activations", nbytes),
    "runtime_bytes": ("memory", "runtime", nbytes),
    "tokenizer_bytes": ("memory", "tokenizer", nbytes),
    "total_bytes": ("memory", "total", nbytes),
    "usable_bytes": ("memory", "usable", nbytes),
    "fits": ("memory", "fits", _yes),
    "max_context": ("limits", "max context", _tokens),
    "max_concurrency": ("limits", "max concurrency", lambda v: f"{v:,} sequences"),
    "decode_bytes_per_token": ("speed ceilings", "decode reads", lambda v: f"{nbytes(v)}/token"),
    "decode_tok_s_ceiling": ("speed ceilings", "decode", lambda v: f"{v:,.1f} tok/s"),
    "decode_tok_s_ceiling_aggregate": ("speed ceilings", "decode, all seqs", lambda v: f"{v:,.1f} tok/s"),
    "prefill_flops_per_token": ("speed ceilings", "prefill work", lambda v: f"{flops(v)}/token"),
    "prefill_tok_s_ceiling": ("speed ceilings", "prefill", lambda v: f"{v:,.0f} tok/s"),
    "bandwidth": ("device", "bandwidth", rate),
    "peak_flops": ("device", "compute", lambda v: f"{flops(v)}/s"),
    "int8_ops": ("device", "int8 compute", lambda v: f"{ops(v)}/s"),
}


def figure_text(key: str, value) -> str:
    return FIGURES[key][2](value)
