"""ModelShape from a GGUF file's `{arch}.*` metadata. Reads metadata only: works for any
architecture llama.cpp writes, including ones hearth cannot run yet (planning comes first)."""

from __future__ import annotations

from hearth.config import parse_rope_scaling, stretched_context
from hearth.loader.gguf_kind import check_model_file
from hearth.loader.gguf_loader import GGUFFile
from hearth.memory import PlanError
from hearth.memory.shape import SLIDING_PATTERNS, ModelShape


def run_context(g: GGUFFile, rope_scaling: dict | None = None) -> int:
    """The context the model runs at, from the header: the file's, stretched by the engine's rope scaling
    (EngineConfig.rope_scaling: llama-server's --rope-scaling) where one is given."""
    context = int(g.arch_get("context_length", 2048))
    if (y := parse_rope_scaling(rope_scaling)) is None:
        return context
    return stretched_context(y, context, int(g.arch_get("rope.scaling.original_context_length") or 0))[0]


def shape_from_gguf(g: GGUFFile, rope_scaling: dict | None = None) -> ModelShape:
    """rope_scaling: the engine's (its context_length is then the stretched one)."""
    check_model_file(g)  # plan, serve's memory budget and --ctx read the shape before any load
    layers = int(_require(g, "block_count"))
    hidden, heads = int(_require(g, "embedding_length")), int(_require(g, "attention.head_count"))
    kv = g.arch_get("attention.head_count_kv", heads)
    kv_heads = tuple(int(k) for k in kv) if isinstance(kv, list) else (int(kv),) * layers
    head_k = int(g.arch_get("attention.key_length", hidden // heads))
    window = int(g.arch_get("attention.sliding_window", 0) or 0)
    conv = int(g.arch_get("shortconv.l_cache", 0) or 0)  # lfm2: its layers with no KV heads are short convolutions
    conv_dims = tuple(hidden if conv and not k else 0 for k in kv_heads) if conv else ()
    sliding = _sliding(g, layers) if window else ()
    shared = int(g.arch_get("attention.shared_kv_layers", 0) or 0)  # gemma4: the last layers keep no K/V
    return ModelShape(
        name=str(g.get("general.name", g.path.name)),
        arch=g.arch,
        num_layers=layers - _mtp_layers(g),  # the multi-token-prediction layers: only method mtp runs one (llm_kv)
        hidden_size=hidden,
        num_heads=heads,
        kv_heads=kv_heads,
        head_dim_k=head_k,
        head_dim_v=int(g.arch_get("attention.value_length", head_k)),
        ffn=_widest(g.arch_get("feed_forward_length", 0)),
        vocab_size=int(g.arch_get("vocab_size") or g.tensor("token_embd.weight").shape[0]),
        context_length=run_context(g, rope_scaling),
        num_experts=int(g.arch_get("expert_count", 0)),
        active_experts=int(g.arch_get("expert_used_count", 0)),
        expert_ffn=_expert_ffn(g),
        shared_ffn=_shared_ffn(g),
        sliding_window=window,
        conv_dims=conv_dims,
        conv_kernel=conv,
        sliding=sliding,
        **_recurrent(g, layers),
        tied_embeddings="output.weight" not in g.tensors,
        head_dims=_head_dims(g, head_k, sliding),
        kv_shared=tuple(i >= layers - shared for i in range(layers)) if shared else (),
    )


DELTA_NET_ARCHS = frozenset({"qwen35", "qwen35moe", "qwen3next"})
"""Architectures whose recurrent layers are Gated DeltaNets with qwen35's ssm.* keys (Mamba's files have such keys
too, for another state: not priced here)."""


def _mtp_layers(g: GGUFFile) -> int:
    """The trailing multi-token-prediction layers a Gated DeltaNet file carries (hearth.models.qwen35 skips them)."""
    return int(g.arch_get("nextn_predict_layers", 0) or 0) if g.arch in DELTA_NET_ARCHS else 0


def _recurrent(g: GGUFFile, layers: int) -> dict:
    """ModelShape's recurrent and state_bytes for a Gated DeltaNet file (qwen35's ssm.* keys, as
    hearth.models.qwen35 reads them: recurrent_layers, else every full_attention_interval-th layer attends;
    trailing multi-token-prediction layers are not run); {} for any other."""
    v_heads, k_heads = g.arch_get("ssm.time_step_rank"), g.arch_get("ssm.group_count")
    if g.arch not in DELTA_NET_ARCHS or not v_heads or not k_heads or g.arch_get("ssm.inner_size") is None:
        return {}
    n = layers - _mtp_layers(g)
    stated = g.arch_get("attention.recurrent_layers")
    every = int(g.arch_get("full_attention_interval", 4))
    recurrent = (tuple(bool(r) for r in stated[:n]) if isinstance(stated, list) and len(stated) == layers
                 else tuple((i + 1) % every != 0 for i in range(n)))
    recurrent += (False,) * (layers - n)
    k_dim, inner, kernel = int(_require(g, "ssm.state_size")), int(_require(g, "ssm.inner_size")), \
        int(_require(g, "ssm.conv_kernel"))
    channels = 2 * int(k_heads) * k_dim + inner
    per_layer = 4 * (channels * (kernel - 1) + k_dim * inner)  # conv window + delta state [v_heads, k_dim, v_dim]
    return {"recurrent": recurrent, "state_bytes": per_layer * sum(recurrent)}


def _head_dims(g: GGUFFile, head_k: int, sliding: tuple[bool, ...]) -> tuple[int, ...]:
    """Per layer where the sliding layers have their own (attention.key_length_swa: gemma4); else ()."""
    swa = int(g.arch_get("attention.key_length_swa", 0) or 0)
    return tuple(swa if s else head_k for s in sliding) if swa and sliding else ()


def _sliding(g: GGUFFile, layers: int) -> tuple[bool, ...]:
    """The file's own per-layer pattern when it has one, else the architecture's known rule; an
    unknown architecture counts every layer as global (an over-estimate, never an under-one)."""
    stated = g.arch_get("attention.sliding_window_pattern")
    if isinstance(stated, list) and len(stated) == layers:
        return tuple(bool(s) for s in stated)
    rule = SLIDING_PATTERNS.get(g.arch)
    return rule(layers) if rule else ()


def _shared_ffn(g: GGUFFile) -> int:
    """The always-active MLP beside the routed experts: the file's shared expert, or a dense MLP in the experts'
    layers (gemma4's 26B-A4B: ffn_gate beside ffn_gate_inp)."""
    stated = int(g.arch_get("expert_shared_feed_forward_length", 0) or 0)
    if not stated and "blk.0.ffn_gate_inp.weight" in g.tensors and "blk.0.ffn_gate.weight" in g.tensors:
        return int(g.tensors["blk.0.ffn_gate.weight"].shape[0])  # [ffn, hidden] in torch order
    return stated


def _expert_ffn(g: GGUFFile) -> int:
    stated = g.arch_get("expert_feed_forward_length")
    if stated:
        return int(stated)
    t = g.tensors.get("blk.0.ffn_gate_exps.weight")
    return int(t.shape[1]) if t is not None else 0  # [experts, expert_ffn, hidden] in torch order


def _widest(v) -> int:
    return max(int(x) for x in v) if isinstance(v, list) else int(v or 0)


def _require(g: GGUFFile, key: str):
    v = g.arch_get(key)
    if v is None:
        raise PlanError(f"{g.path}: metadata key {g.arch}.{key} is missing")
    return v
