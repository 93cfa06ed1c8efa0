"""ArchSpec: how an architecture's decoder block differs from llama's, and the rule every fused
implementation of that block follows (DESIGN.md, style 14): it declares which ArchSpec fields it
implements, and values it is limited to; a model that sets any other field away from its default
does not run on it, with the reason logged once."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass

log = logging.getLogger("hearth.models")


@dataclass(frozen=True, slots=True)
class ArchSpec:
    """How an architecture's block differs from llama's."""

    neox_rope: bool = False
    """Rotate halves (qwen, gemma) rather than adjacent pairs (llama GGUFs)."""
    activation: str = "silu"
    qk_norm: bool = False
    """Per-head RMSNorm on q and k before rope (qwen3, gemma3)."""
    sandwich_norm: bool = False
    """Extra norms after attention and after the MLP (gemma2/3)."""
    embed_scale: bool = False
    """Multiply embeddings by sqrt(hidden_size) (gemma)."""
    moe: bool = False
    """Routed experts in place of the dense MLP (qwen3moe: hearth.models.moe)."""
    lora: bool = False
    """Low-rank adapter terms on the linears, each row's own scale (hearth.models.lora)."""
    attn_sinks: bool = False
    """A learned logit per head joins each attention softmax's denominator (gpt-oss: attn_sinks.weight)."""
    pre_norm: bool = True
    """RMSNorm before attention and before the MLP; False: only sandwich_norm's after them (olmo2)."""
    qk_norm_whole: bool = False
    """qk_norm over each projection whole (all of q's heads together, all of k's: olmo2), not per head."""
    v_norm: bool = False
    """V RMS-normed (no weight) before the cache; K reused as V where a layer has no attn_v (gemma4)."""
    per_layer_input: bool = False
    """Gemma 4's per-layer embeddings (PLE): a per-layer input added after the MLP through a gate and a projection,
    and a per-layer output scalar (hearth.models.gemma4_layer)."""
    attn_temperature: bool = False
    """Queries scaled after rope by a factor of their position (mistral3: hearth.layers.attn_temperature); set
    by CausalLM where the file gives the scale."""
    attn_output_gate: bool = False
    """q_proj emits per head the query and a gate; attention's output is multiplied by sigmoid(gate) before o
    (qwen35: hearth.models.qwen35.GatedAttentionLayer)."""


Implements = Mapping[str, Collection | None]
"""ArchSpec field name -> the values a fused implementation runs (None: every value)."""


def refusal(name: str, implements: Implements, spec: ArchSpec) -> str | None:
    """Why the fused implementation `name` cannot run `spec`, or None when it can. Iterates the
    spec's dataclass fields, so a field added later is refused until an implementation declares it."""
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.name not in implements:
            if value != f.default:
                return f"{name} does not implement ArchSpec.{f.name}={value!r}"
        elif implements[f.name] is not None and value not in implements[f.name]:
            return f"{name} implements ArchSpec.{f.name} only as {sorted(implements[f.name])}, not {value!r}"
    return None


_logged: set[str] = set()


def admits(name: str, implements: Implements, spec: ArchSpec) -> bool:
    """refusal() is None; a refusal is logged once per reason (not once per layer), at info: it is how such a
    model runs (slower), not something the user did wrong."""
    reason = refusal(name, implements, spec)
    if reason is not None and reason not in _logged:
        _logged.add(reason)
        log.info(f"{reason}; those layers run op by op")
    return reason is None
