"""Architecture descriptions: `layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256` -> a
ModelShape and a weight quant, for models that are not on disk. A description may start with a
preset name and override some keys: `llama-70b,quant=Q8_0,context=32768`.

Keys (ints unless said): layers, hidden, heads, vocab (required); kv_heads (default heads);
head_dim (default hidden / heads); ffn (dense MLP width; required unless experts); experts,
active, expert_ffn (default ffn), shared_ffn (MoE); window (sliding-window size) with
global_every (every n-th layer is global; default 0: every layer slides); tied (yes/no: head shares
the embedding); context (default 4096); quant (weight quantization preset, default Q4_K_M)."""

from __future__ import annotations

from hearth.memory import PlanError
from hearth.memory.quant_mix import mix
from hearth.memory.shape import ModelShape, every_nth_global

# Public configs (config.json of each model); descriptions themselves so they stay readable.
PRESETS: dict[str, str] = {
    "llama-7b": "layers=32,hidden=4096,heads=32,ffn=11008,vocab=32000,context=4096",
    "llama3-8b": "layers=32,hidden=4096,heads=32,kv_heads=8,ffn=14336,vocab=128256,context=131072",
    "llama-70b": "layers=80,hidden=8192,heads=64,kv_heads=8,ffn=28672,vocab=128256,context=131072",
    "qwen3-8b": "layers=36,hidden=4096,heads=32,kv_heads=8,head_dim=128,ffn=12288,vocab=151936,context=40960",
    "mixtral-8x7b": "layers=32,hidden=4096,heads=32,kv_heads=8,experts=8,active=2,expert_ffn=14336,"
                    "vocab=32000,context=32768",
    "qwen3-30b-a3b": "layers=48,hidden=2048,heads=32,kv_heads=4,head_dim=128,experts=128,active=8,"
                     "expert_ffn=768,vocab=151936,context=40960",
    "gemma3-27b": "layers=62,hidden=5376,heads=32,kv_heads=16,head_dim=128,ffn=21504,vocab=262208,"
                  "context=131072,window=1024,global_every=6,tied=yes",
}
INT_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "context", "experts",
            "active", "expert_ffn", "shared_ffn", "window", "global_every")
KEYS = (*INT_KEYS, "tied", "quant")
REQUIRED = ("layers", "hidden", "heads", "vocab")
DEFAULT_QUANT = "Q4_K_M"
DEFAULT_CONTEXT = 4096
TRUE, FALSE = ("1", "yes", "true", "y"), ("0", "no", "false", "n")


def is_description(text: str) -> bool:
    return "=" in text or text.split(",")[0].lower() in PRESETS


def describe(text: str) -> tuple[ModelShape, str]:
    """(shape, quant) of a description or preset name."""
    values, name = _parse(text)
    quant = values.get("quant", DEFAULT_QUANT).upper()
    mix(quant)  # an unknown quant is an error now, naming the known ones
    return _shape(values, name), quant


def _parse(text: str) -> tuple[dict, str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    values: dict = {}
    name = "described model"
    if parts and "=" not in parts[0]:
        name = parts.pop(0).lower()
        if name not in PRESETS:
            raise PlanError(f"unknown architecture preset {name!r}; known: {', '.join(PRESETS)}")
        values, _ = _parse(PRESETS[name])
    for part in parts:
        key, _, raw = part.partition("=")
        key = key.strip().lower()
        if key not in KEYS:
            raise PlanError(f"unknown description key {key!r}; known: {', '.join(KEYS)}")
        values[key] = _value(key, raw.strip())
    return values, name


def _value(key: str, raw: str):
    if key == "quant":
        return raw
    if key == "tied":
        if raw.lower() not in TRUE + FALSE:
            raise PlanError(f"tied={raw!r}: use yes or no")
        return raw.lower() in TRUE
    try:
        v = int(raw)
    except ValueError:
        raise PlanError(f"{key}={raw!r} is not a whole number") from None
    if v < 0:
        raise PlanError(f"{key}={v} cannot be negative")
    return v


def _shape(v: dict, name: str) -> ModelShape:
    missing = [k for k in REQUIRED if not v.get(k)]
    if not v.get("ffn") and not v.get("experts"):
        missing.append("ffn (or experts)")
    if missing:
        raise PlanError(f"architecture description is missing {', '.join(missing)}")
    layers, hidden, heads = v["layers"], v["hidden"], v["heads"]
    kv_heads = v.get("kv_heads") or heads
    if heads % kv_heads:
        raise PlanError(f"heads={heads} is not a multiple of kv_heads={kv_heads}")
    head_dim = v.get("head_dim") or _head_dim(hidden, heads)
    experts, active = v.get("experts", 0), v.get("active", 0)
    if experts and not 0 < active <= experts:
        raise PlanError(f"active={active} must be between 1 and experts={experts}")
    if experts and not (v.get("expert_ffn") or v.get("ffn")):
        raise PlanError("an MoE description needs expert_ffn (the width of one expert)")
    window, every = v.get("window", 0), v.get("global_every", 0)
    sliding = (every_nth_global(every)(layers) if every else (True,) * layers) if window else ()
    return ModelShape(
        name=name, arch="described", num_layers=layers, hidden_size=hidden, num_heads=heads,
        kv_heads=(kv_heads,) * layers, head_dim_k=head_dim, head_dim_v=head_dim, ffn=v.get("ffn", 0),
        vocab_size=v["vocab"], context_length=v.get("context") or DEFAULT_CONTEXT, num_experts=experts,
        active_experts=active, expert_ffn=(v.get("expert_ffn") or v.get("ffn", 0)) if experts else 0,
        shared_ffn=v.get("shared_ffn", 0), sliding_window=window, sliding=sliding,
        tied_embeddings=v.get("tied", False))


def _head_dim(hidden: int, heads: int) -> int:
    if hidden % heads:
        raise PlanError(f"hidden={hidden} does not split into {heads} heads; give head_dim")
    return hidden // heads
