"""Plain configuration records shared by every layer of hearth.

Field docstrings (the string right under each field) double as CLI help."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hearth.errors import HearthError, wrong_number_field


@dataclass(frozen=True, slots=True)
class YarnScaling:
    """YaRN rope scaling (llama.cpp's yarn_* parameters, transformers' rope_type "yarn"): each rotated pair's
    frequency a blend of itself and itself / factor, by a ramp between the pairs that turn beta_fast and
    beta_slow times over the original context; cos and sin scaled by 0.1 ln(factor) + 1."""

    factor: float
    original_context: int = 0
    """The context it was trained at (0: the file's rope.scaling.original_context_length, else its context)."""
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    ext_factor: float = 1.0
    """llama.cpp's yarn_ext_factor: the ramp's weight (0: every pair interpolated, as linear scaling)."""
    attn_factor: float = 1.0
    """llama.cpp's yarn_attn_factor: one more scale of cos and sin."""
    log_multiplier: float = 0.0
    """llama.cpp's yarn_log_multiplier (transformers' mscale_all_dim): the attention factor becomes
    mscale(factor, 1) / mscale(factor, it) (0: mscale(factor))."""
    truncate: bool = True
    """The ramp's ends rounded out to whole pairs (ggml's rope_yarn_corr_dims; transformers' truncate); False for
    gpt-oss, whose reference rope does not round them (its config.json: truncate false; vLLM and SGLang follow)."""


@dataclass(frozen=True, slots=True)
class LinearScaling:
    """Linear rope scaling (llama.cpp's --rope-scaling linear, transformers' rope_type "linear"): every
    position divided by factor, so the context stretches factor times at the cost of resolution."""

    factor: float
    original_context: int = 0
    """The context it was trained at (0: the file's), which the stretched context is factor times."""


@dataclass(frozen=True, slots=True)
class NoScaling:
    """No rope scaling, even where the file has some (llama-server's --rope-scaling none, transformers' rope_type
    "default"): llama.cpp's freq_scale 1 and no YaRN ramp; per-pair factors the file holds as tensors (Llama 3.1's
    rope_freqs, LongRoPE's) stay, as llama.cpp applies them whatever the scaling type."""

    factor: float = 1.0
    original_context: int = 0


@dataclass(frozen=True, slots=True)
class FileScaling:
    """The file's own kind of rope scaling at another factor (llama-server's --rope-scale F or --rope-freq-scale
    1/F without --rope-scaling): YaRN, with the file's ramp and attention settings, where the file's rope is YaRN;
    else linear (llama.cpp reads a file that names no rope.scaling.type as linear)."""

    factor: float
    original_context: int = 0


DEFAULT_POOLING = "last"
"""How a decoder's embeddings pool where its GGUF names no pooling type (vLLM's default for one)."""


@dataclass(slots=True)
class ModelConfig:
    """Hyper-parameters of one transformer, read from GGUF metadata by the model's registry entry."""

    arch: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    context_length: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_dim: int = 0
    """Rotated dims per head (0 = all of head_dim)."""
    rope_local_theta: float = 0.0
    """Rope base for sliding-window layers when it differs (gemma3: 10000): theirs, unscaled; 0 = same as rope_theta."""
    rope_swa_theta: float = 0.0
    """Rope base of the sliding-window layers when --rope-freq-base moved the others' (llama.cpp's
    rope_freq_base_train_swa: the file's); unlike rope_local_theta, the model's factors stay; 0 = rope_theta."""
    rope_scaling_factor: float = 1.0
    """Linear rope scaling (positions are divided by it), on every layer but gemma3's local ones."""
    rope_swa_scale: float = 0.0
    """Linear rope scaling of the sliding-window layers when --rope-scaling replaced the others' (llama.cpp's
    rope_freq_scale_train_swa: the file's; phi3's window on every layer is no swa there); 0 = rope_scaling_factor."""
    rope_original_context: int = 0
    """The context the model was trained at before its rope scaling (0: none given): LongRoPE's long
    factors apply past it."""
    rope_attn_factor: float = 1.0
    """LongRoPE's scale of cos and sin (llama.cpp's attn_factor)."""
    rope_yarn: YarnScaling | None = None
    """YaRN scaling of the global layers' rope (rope.scaling.type yarn, or the engine's rope_scaling)."""
    sliding_window: int = 0
    """Window of sliding-window layers (0 = none)."""
    sliding_window_pattern: tuple[bool, ...] = ()
    """Per layer: True where the layer uses the sliding window."""
    rope_layers: tuple[bool, ...] = ()
    """Per layer: False where the layer has no rope (NoPE: smollm3's every 4th); empty: every layer rotates."""
    rope_sections: tuple[int, ...] = ()
    """M-RoPE (qwen2vl, qwen3vl): how many rotated pairs follow each position component (t, h, w), in order;
    empty: one position per token. A token whose components are equal (text) rotates as ordinary rope there."""
    rope_layout: str = "runs"
    """Which pairs the sections name (hearth.layers.rotary.MROPE_LAYOUTS): runs (Qwen2-VL: t's pairs first, then
    h's, then w's), interleaved (Qwen3-VL: t, h, w in turn)."""
    deepstack_layers: int = 0
    """Qwen3-VL's deepstack: an image row carries this many more parts of the LM's width, part i added to the
    hidden state at that row after layer i - 1 (llama.cpp's `{arch}.n_deepstack_layers`)."""
    attn_scale: float = 0.0
    """Softmax scale; 0 means 1/sqrt(head_dim)."""
    attn_temperature_scale: float = 0.0
    """Llama 4-style temperature (mistral3's attention.temperature_scale, beta): queries times 1 + beta ln(1 +
    floor(pos / attn_temperature_floor)) (hearth.layers.attn_temperature); 0: none."""
    attn_temperature_floor: int = 0
    """Its floor scale: the file's original context (llama.cpp's n_ctx_orig_yarn, not the engine's)."""
    embedding_scale: float = 1.0
    """The embeddings are multiplied by it (granite; gemma's sqrt(hidden) is ArchSpec.embed_scale)."""
    logit_scale: float = 1.0
    """The logits are divided by it (granite's logit_scale)."""
    final_logit_softcap: float = 0.0
    attn_logit_softcap: float = 0.0
    tie_word_embeddings: bool = False
    num_experts: int = 0
    """Routed experts per MoE layer (0: a dense MLP)."""
    experts_used: int = 0
    """Experts each token runs (top-k of the router's softmax)."""
    expert_ffn: int = 0
    """Each expert's SwiGLU width."""
    expert_weights_norm: bool = False
    """The top-k router weights are renormalized to sum to 1 (Qwen3-MoE's norm_topk_prob)."""
    pooling: str = DEFAULT_POOLING
    """How /v1/embeddings pools a prompt's final hidden states: the GGUF's `{arch}.pooling_type` (mean,
    last), else "last" (a decoder's last token has read the whole prompt: vLLM's default for one)."""
    conv_layers: tuple[bool, ...] = ()
    """Per layer: True where the layer is a gated short convolution, not attention (lfm2); empty: none is."""
    conv_kernel: int = 0
    """The short convolution's width in tokens (lfm2's shortconv.l_cache, 3)."""
    head_dim_swa: int = 0
    """Head dim of the sliding-window layers where it differs from the global ones' head_dim (gemma4: 256 vs 512;
    llama.cpp's attention.key_length_swa); 0 = head_dim."""
    rope_dim_swa: int = 0
    """Rotated dims of the sliding-window layers where they differ (llama.cpp's rope.dimension_count_swa);
    0 = rope_dim."""
    layer_kv_heads: tuple[int, ...] = ()
    """Per layer: its KV heads, where they differ by layer (gemma4 31B's global layers); empty: num_kv_heads."""
    per_layer_input: int = 0
    """Width of gemma4's per-layer embeddings (PLE: hidden_size_per_layer_input, llama.cpp's
    embedding_length_per_layer_input); 0: none."""
    kv_shared_layers: int = 0
    """The last this many layers compute no K/V: each attends over the cache of the last earlier layer of its kind
    (sliding or global), transformers' num_kv_shared_layers (gemma4's E2B/E4B; llama.cpp's n_layer_kv_from_start)."""
    recurrent_layers: tuple[bool, ...] = ()
    """Per layer: True where the layer is a Gated DeltaNet (qwen35), whose state is a per-sequence slot's
    (RecurrentShape), not the paged cache's; empty: none is."""
    recurrent: RecurrentShape | None = None
    """The recurrent layers' dimensions (qwen35's ssm.* keys)."""


@dataclass(frozen=True, slots=True)
class RecurrentShape:
    """A Gated DeltaNet layer's dimensions (llama.cpp's qwen35 ssm.* keys): a causal conv of conv_kernel taps over
    the q | k | v channels, then the delta rule over a state of [v_heads, k_dim, v_dim] per sequence."""

    k_heads: int
    """ssm.group_count: q and k heads (each serves v_heads / k_heads value heads)."""
    v_heads: int
    """ssm.time_step_rank."""
    k_dim: int
    """ssm.state_size."""
    v_dim: int
    """ssm.inner_size / v_heads."""
    conv_kernel: int

    @property
    def conv_channels(self) -> int:
        """q | k | v: 2 k_heads k_dim + v_heads v_dim."""
        return 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim

    def conv_shape(self, slots: int) -> tuple[int, int, int]:
        """[slots, channels, kernel - 1]: each sequence's last kernel - 1 conv inputs, oldest first."""
        return (slots, self.conv_channels, self.conv_kernel - 1)

    def delta_shape(self, slots: int) -> tuple[int, int, int, int]:
        """[slots, v_heads, k_dim, v_dim]: each sequence's delta-rule state."""
        return (slots, self.v_heads, self.k_dim, self.v_dim)

    @property
    def slot_values(self) -> int:
        """f32 values one sequence's state holds in one layer."""
        return self.conv_channels * (self.conv_kernel - 1) + self.v_heads * self.k_dim * self.v_dim


def recurrent_state_bytes(cfg: ModelConfig) -> int:
    """Bytes of one sequence's state slot over every recurrent layer (f32), 0 for a model without them."""
    if cfg.recurrent is None:
        return 0
    return 4 * cfg.recurrent.slot_values * sum(cfg.recurrent_layers)


@dataclass(frozen=True, slots=True)
class LayerCache:
    """What one layer keeps per token in the paged cache, under the block ids every layer shares: `parts`
    tensors of [heads, dim] values. Its tensor: [parts, num_blocks, block_size, heads, dim], the block axis
    second in every layer (so whole blocks move, save and load alike)."""

    parts: int
    """2: an attention layer's K and V; 1: a short-conv layer's input (B * x); 0: nothing of its own (a recurrent
    layer's state is a per-sequence slot's: RecurrentShape; a KV-shared layer reads its source's)."""
    heads: int
    dim: int
    source: int = -1
    """A KV-shared layer (ModelConfig.kv_shared_layers): the layer whose cache it attends over; -1: its own."""

    def shape(self, num_blocks: int, block_size: int) -> tuple[int, ...]:
        return (self.parts, num_blocks, block_size, self.heads, self.dim)

    @property
    def values(self) -> int:
        """Values one token holds in this layer."""
        return self.parts * self.heads * self.dim


def layer_caches(cfg: ModelConfig) -> tuple[LayerCache, ...]:
    """Each layer's LayerCache: K/V of [kv_heads, head_dim] (its own: layer_kv_heads, head_dim_swa), a conv
    layer's [1, hidden] (its input, read back conv_kernel - 1 tokens like past keys), a KV-shared layer's
    nothing (it reads its source's), or a recurrent layer's nothing (its state is a slot's)."""
    def one(i: int) -> LayerCache:
        if cfg.recurrent_layers and cfg.recurrent_layers[i]:
            return LayerCache(0, 1, 1)
        if cfg.conv_layers and cfg.conv_layers[i]:
            return LayerCache(1, 1, cfg.hidden_size)
        own = LayerCache(2, layer_kv_heads(cfg, i), layer_head_dim(cfg, i))
        source = kv_source(cfg, i)
        return own if source == i else LayerCache(0, own.heads, own.dim, source)
    return tuple(one(i) for i in range(cfg.num_layers))


def mtp_cache(cfg: ModelConfig) -> LayerCache:
    """The MTP head's attention layer's K/V (hearth.runner.mtp_drafter): a trunk attention layer's shape."""
    return LayerCache(2, cfg.num_kv_heads, cfg.head_dim)


def is_sliding(cfg: ModelConfig, i: int) -> bool:
    return bool(cfg.sliding_window_pattern) and cfg.sliding_window_pattern[i]


def layer_head_dim(cfg: ModelConfig, i: int) -> int:
    return cfg.head_dim_swa if cfg.head_dim_swa and is_sliding(cfg, i) else cfg.head_dim


def layer_kv_heads(cfg: ModelConfig, i: int) -> int:
    return cfg.layer_kv_heads[i] if cfg.layer_kv_heads else cfg.num_kv_heads


def kv_source(cfg: ModelConfig, i: int) -> int:
    """The layer whose K/V layer i attends over: itself, or for one of the last kv_shared_layers the last
    layer before them of its kind (transformers' Gemma4TextConfig.kv_sharing_modes; llama.cpp's reuse callback,
    n_layer_kv_from_start - 1 or - 2, picks the same layers in every released file: the last unshared layer
    global, the one before it sliding)."""
    first = cfg.num_layers - cfg.kv_shared_layers
    if i < first:
        return i
    kind = is_sliding(cfg, i)
    return next(j for j in range(first - 1, -1, -1) if is_sliding(cfg, j) == kind)


DEFAULT_MODEL = "smollm2-135m"


DEVICES = ("auto", "cpu", "cuda", "torch")
"""EngineConfig.device: auto (cpu until the CUDA backend has run on a real GPU), cpu (the C++ kernels of
this CPU's tier), cuda (Triton kernels), torch (torch's kernels: the reference)."""


MAX_LOGPROBS = 20
"""vLLM's default max_logprobs (OpenAI's chat top_logprobs allows 0..20)."""


THREADS_ZERO = "0: torch's default, one per physical core (or $OMP_NUM_THREADS when set)"
"""What --threads 0 means: hearth leaves torch's thread count as torch chose it at start."""

STATE_SNAPSHOTS = 8
"""EngineConfig.state_snapshots' default (as llama.cpp's server keeps a few context checkpoints a slot)."""


@dataclass(slots=True)
class EngineConfig:
    """How the engine runs a model: memory, batching and threads."""

    model: str = DEFAULT_MODEL
    """Catalog name, path to a .gguf file, or a hub reference org/repo:file.gguf."""
    max_model_len: int = 0
    """Longest sequence (prompt + output) in tokens; 0 = the model's own context length; either is
    lowered (one warning line) to what the KV cache holds for one sequence."""
    block_size: int = 16
    """Tokens per KV-cache block."""
    num_kv_blocks: int = 0
    """KV blocks of context to allocate (a quantized format adds max_num_seqs sequences' f16 staging on top);
    0 = enough for max_num_seqs full-length sequences, within kv_cache_memory_gb less that staging."""
    kv_cache_memory_gb: float = 2.0
    """Upper bound on KV-cache memory when num_kv_blocks is 0."""
    max_num_seqs: int = 16
    """Most sequences in one step."""
    max_num_batched_tokens: int = 2048
    """Token budget of one engine step (prefill chunks and decodes together)."""
    enable_prefix_caching: bool = True
    """Reuse the K/V of full blocks whose prompt prefix was seen before."""
    state_snapshots: int = STATE_SNAPSHOTS
    """A model with recurrent layers (qwen35): copies of a sequence's state kept at block boundaries, where a
    prefix-cache hit may start (LRU; each one sequence's state, out of kv_cache_memory_gb); 0 = no hits."""
    kv_disk_dir: str = ""
    """Directory of the KV disk tier (full prefix blocks kept across restarts, and saved
    conversations); empty = no disk tier."""
    kv_disk_space_mb: int = 4096
    """Most MiB the disk tier's block files may take; the least valuable are evicted past it."""
    kv_disk_owner: str = ""
    """This engine's name in a disk tier shared with other engines (a cluster's replicas): it writes
    and evicts only its own folder and reads the others'; empty = not shared."""
    kv_cache_dtype: str = "auto"
    """Storage format of the KV cache: auto (f16), f16, bf16, fp8_e4m3, q8_0, q4_0, kvarn_k4v2, kvarn_k4v4."""
    threads: int = 0
    """CPU threads for torch and the C++ kernels; 0 = torch's default (THREADS_ZERO)."""
    device: str = "auto"
    """One of DEVICES: the backend the model runs on (hearth.backends)."""
    seed: int = 0
    """The engine sampler's seed at start: requests that give none draw from it in turn."""
    max_logprobs: int = MAX_LOGPROBS
    """Most top logprobs a request may ask per token, generated (logprobs, top_logprobs) or prompt
    (prompt_logprobs), as vLLM's --max-logprobs; -1 = no cap (up to the whole vocabulary). Each costs
    a vocabulary-wide top k per token."""
    grammar_drafts: bool = True
    """Under a grammar (structured output, tool calls), draft the tokens it forces next (a tool's
    name once begun, `", "arguments": {`) and verify them in one step instead of one step each;
    lossless, so on only where verify rows are computed as decode rows (the native kernels)."""
    speculative_config: dict | str | None = None
    """Speculative decoding, vLLM's keys as a dict or JSON: {"method": "ngram" | "suffix" | "draft",
    "num_speculative_tokens": K, "prompt_lookup_min": N, "prompt_lookup_max": M,
    "disable_by_batch_size": B, "model": draft model (method draft), "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob" (method suffix)}; None = off."""
    rope_scaling: dict | None = None
    """Rope scaling over the file's, as llama-server's --rope-scaling yarn|linear|none --rope-scale F --yarn-orig-ctx N:
    {"rope_type": "yarn" | "linear", "factor": F, "original_max_position_embeddings": N, and yarn's "beta_fast",
    "beta_slow"} (transformers' keys; N defaults to the file's original context); {"rope_type": "none"} (or
    "default"): none, whatever the file's; {"factor": F} without a rope_type: the file's kind at F (--rope-scale
    alone: FileScaling); None = the file's."""
    rope_freq_base: float = 0.0
    """Rope base frequency (theta) of the global layers in place of the file's rope.freq_base (llama-server's
    --rope-freq-base, vLLM's rope_theta); sliding-window layers keep the file's, as llama.cpp's; 0 = the file's."""
    chat_template: str | None = None
    """A Jinja chat template in place of the GGUF's (vLLM's --chat-template); None = the file's."""
    chat_template_kwargs: dict = field(default_factory=dict)
    """Template variables every chat renders with (llama-server's --chat-template-kwargs, e.g.
    {"enable_thinking": false}); a request's own chat_template_kwargs win."""
    lora: list = field(default_factory=list)
    """LoRA adapters (llama.cpp's GGUF adapters) as [(path, scale), ...], llama-server's --lora FILE
    (scale 1) / --lora-scaled FILE SCALE: adapter j is id j (GET/POST /lora-adapters, a request's `lora`)."""
    mmproj: str = ""
    """A llama.cpp mmproj GGUF, the model's vision tower and projector (llama-server's --mmproj): chat
    messages may then hold images; "" = text only."""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """A value no engine can run is one line naming its flag (--threads -1 hung the server: the
        engine thread died setting it; --max-num-seqs 0 scheduled nothing, ever)."""
        if not isinstance(self.model, (str, os.PathLike)):  # LLM(None) was "expected str, bytes or os.PathLike"
            raise HearthError(f"model must be a catalog name, a .gguf path or org/repo:file.gguf, not {self.model!r}")
        if (wrong := wrong_number_field(self)) is not None:
            raise HearthError(f"{_FLAGS.get(wrong[0], wrong[0])} {wrong[1]}")
        parse_rope_scaling(self.rope_scaling)
        for name, (lowest, why) in _LOWEST.items():
            value = getattr(self, name)
            if not value >= lowest:
                flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
                raise HearthError(f"{flag} must be {why}, not {value}")


_LOWEST = {
    "max_model_len": (0, "a number of tokens (0: the model's own)"),
    "block_size": (1, "at least 1"),
    "num_kv_blocks": (0, "a number of blocks (0: sized from the rest)"),
    "kv_cache_memory_gb": (1e-9, "a positive number of GB"),
    "max_num_seqs": (1, "at least 1"),
    "state_snapshots": (0, "a number of snapshots (0: none)"),
    "max_num_batched_tokens": (1, "at least 1"),
    "threads": (0, "a number of threads (0: torch's default)"),
    "max_logprobs": (-1, "a number of logprobs per token (-1: no cap)"),
    "rope_freq_base": (0, "a positive base frequency (0: the file's)"),
}
"""EngineConfig's numeric fields -> (the smallest value each may take, what the value must be)."""
_FLAGS = {"max_model_len": "--ctx / --max-model-len"}


_FACTOR = ("factor", "--rope-scale", lambda v: v >= 1, "a factor of at least 1")
_ORIGINAL = ("original_context", "--yarn-orig-ctx", lambda v: v >= 0 and v == int(v), "a number of tokens (0: the file's)")
_SCALINGS = {
    "yarn": (YarnScaling, {
        "factor": _FACTOR,
        "original_max_position_embeddings": _ORIGINAL,
        "beta_fast": ("beta_fast", "--yarn-beta-fast", lambda v: v > 0, "a positive number"),
        "beta_slow": ("beta_slow", "--yarn-beta-slow", lambda v: v > 0, "a positive number"),
    }),
    "linear": (LinearScaling, {"factor": _FACTOR, "original_max_position_embeddings": _ORIGINAL}),
    "none": (NoScaling, {}),
    None: (FileScaling, {"factor": _FACTOR}),
}
"""rope_type -> (its record, rope_scaling's keys -> (the record's field, the flag that sets it, its test,
what the value must be)); None: no rope_type given (the file's kind)."""
ROPE_KEYS = {kind: frozenset(keys) for kind, (_, keys) in _SCALINGS.items()}
"""rope_type -> the rope_scaling keys it takes."""
_ROPE_ALIASES = {"default": "none"}
"""transformers' rope_type names -> llama-server's."""
RopeScaling = YarnScaling | LinearScaling | NoScaling | FileScaling


def parse_rope_scaling(d: dict | None) -> RopeScaling | None:
    """EngineConfig.rope_scaling -> its record (None: none asked); a bad value is one line naming its flag."""
    if d is None:
        return None
    kind = d.get("rope_type", d.get("type"))
    kind = _ROPE_ALIASES.get(kind, kind)
    if kind not in _SCALINGS:
        *most, last = [k for k in _SCALINGS if k]
        raise HearthError(f"--rope-scaling must be {', '.join(most)} or {last}, not {kind}")
    record, keys = _SCALINGS[kind]
    unknown = sorted(set(d) - set(keys) - {"rope_type", "type"})
    named = f"--rope-scaling {kind}" if kind else "--rope-scale without --rope-scaling"
    if unknown:
        raise HearthError(f"{named} takes {', '.join(keys) or 'no other setting'}, not {', '.join(unknown)}")
    if "factor" in keys and "factor" not in d:
        raise HearthError(f"{named} needs --rope-scale (the factor the context is stretched by)")
    values = {}
    for key, (name, flag, ok, why) in keys.items():
        if key in d:
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok(v):
                raise HearthError(f"{flag} must be {why}, not {v}")
            values[name] = int(v) if name == "original_context" else float(v)
    return record(**values)


def stretched_context(y: RopeScaling, context: int, original: int = 0) -> tuple[int, int]:
    """(the context a model runs at under rope scaling y, the original it stretches): factor x the original
    (y's, else the file's `original`, else its `context`), or the file's context where that is larger."""
    original = y.original_context or original or context
    return max(context, int(y.factor * original)), original
