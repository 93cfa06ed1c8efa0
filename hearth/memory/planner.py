"""plan(request) -> Plan: every number `hearth plan` reports, each with a one-line reason.

The request holds a model (its shape and weight inventory), a device and the workload (context,
concurrency, KV format). Figures come out in the order they are printed; `Plan.to_json()` is the
`--json` object. Memory and limits are what hearth's engine allocates (hearth.memory.kv_cache.engine_pool:
every layer in every block, sliding ones too, plus a quantized format's staging); decode reads
apply sliding windows, as the attention kernels do."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hearth.memory import PlanError
from hearth.memory.budget import SEARCH_LIMIT, Budget
from hearth.memory.devices import KINDS, Device
from hearth.memory.kv_cache import SNAPSHOTS, layer_token_bytes, staging_bytes, token_bytes
from hearth.memory.kv_formats import KVFormat
from hearth.memory.layouts import LAYOUTS, resident_weight_bytes
from hearth.memory.overhead import (LOGIT_COPIES, TOKENIZER_BYTES_PER_ENTRY, activation_values_per_token,
                                   step_tokens)
from hearth.memory.roofline import Roofline
from hearth.memory.shape import ModelShape
from hearth.memory.units import count, flops, nbytes, ops, rate
from hearth.memory.weights import WeightTensor, active_matmul_params, experts_touched, weight_bytes


@dataclass(frozen=True, slots=True)
class PlanRequest:
    shape: ModelShape
    tensors: list[WeightTensor]
    weights_source: str
    """One line on where the weight bytes come from (exact from a file, or a described quant)."""
    device: Device
    ctx: int
    concurrency: int
    kv: KVFormat
    block_size: int
    batch_tokens: int


@dataclass(frozen=True, slots=True)
class Figure:
    value: float | int | bool
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    request: PlanRequest
    figures: dict[str, Figure]

    def __getitem__(self, key: str):
        return self.figures[key].value

    def to_json(self) -> dict:
        r = self.request
        inputs = {"model": r.shape.name, "arch": r.shape.arch, "device": r.device.name, "ctx": r.ctx,
                  "concurrency": r.concurrency, "kv_cache_dtype": r.kv.name, "block_size": r.block_size}
        return {"inputs": inputs, **{k: _plain(f.value) for k, f in self.figures.items()},
                "reasons": {k: f.reason for k, f in self.figures.items()}}


def _plain(v):
    """Whole numbers as ints in JSON (23040, not 23040.0); rates keep their fraction."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def check_request(shape: ModelShape, ctx: int, concurrency: int, batch_tokens: int, ctx_named: str = "") -> None:
    """ctx_named: how errors name the context where the user gave no --ctx (replica planning's request sizes)."""
    if ctx <= 0:
        raise PlanError(f"{ctx_named or '--ctx'} must be a positive number of tokens, got {ctx}")
    if ctx > shape.context_length:
        raise PlanError(f"{ctx_named or f'--ctx {ctx}'} is beyond the model's context length "
                        f"({shape.context_length} tokens)")
    if concurrency <= 0:
        raise PlanError(f"--concurrency must be at least 1, got {concurrency}")
    if concurrency > SEARCH_LIMIT:
        raise PlanError(f"--concurrency {concurrency} is beyond any batch an engine can run")
    if batch_tokens <= 0:
        raise PlanError(f"--batch-tokens must be positive, got {batch_tokens}")


def plan(req: PlanRequest) -> Plan:
    check_request(req.shape, req.ctx, req.concurrency, req.batch_tokens)
    held = resident_weight_bytes(req.tensors, req.shape, LAYOUTS[req.device.layout])
    budget = Budget(req.shape, held, req.device, req.kv, req.block_size, req.batch_tokens)
    roof = Roofline(req.shape, req.tensors, req.device, req.kv, req.block_size, req.batch_tokens)
    figures = {**_memory(req, budget), **_limits(req, budget), **_speed(req, roof)}
    return Plan(req, figures)


def _memory(req: PlanRequest, b: Budget) -> dict[str, Figure]:
    s, d, ctx, c = req.shape, req.device, req.ctx, req.concurrency
    total = b.total(ctx, c)
    layout = LAYOUTS[d.layout]
    return {
        "weight_bytes": Figure(weight_bytes(req.tensors), req.weights_source),
        "resident_weight_bytes": Figure(b.weight_bytes, f"as held in memory: {layout.about}"),
        "kv_bytes_per_token": Figure(token_bytes(s, req.kv, req.block_size), _kv_token_reason(req)),
        "kv_cache_bytes": Figure(b.kv_reserved(ctx, c), _kv_cache_reason(req)),
        "activation_bytes": Figure(b.activations(ctx, c), _activation_reason(req)),
        "runtime_bytes": Figure(d.runtime, _runtime_reason(d)),
        "tokenizer_bytes": Figure(b.tokenizer, f"{s.vocab_size:,} vocabulary entries x ~{TOKENIZER_BYTES_PER_ENTRY} B "
                                               "(measured)" if b.tokenizer else "in host memory, not the device's"),
        "total_bytes": Figure(total, "weights as held + KV cache + activations + runtime + tokenizer"),
        "usable_bytes": Figure(d.usable_bytes, f"{KINDS[d.kind].usable_fraction:.0%} of {nbytes(d.memory_bytes)}: "
                                               f"{KINDS[d.kind].usable_why}"),
        "fits": Figure(total <= d.usable_bytes, _fits_reason(total, d.usable_bytes)),
    }


def _limits(req: PlanRequest, b: Budget) -> dict[str, Figure]:
    s, c = req.shape, req.concurrency
    by_memory = b.max_context(c)
    max_ctx = min(by_memory, s.context_length)
    if by_memory == 0:
        ctx_reason = f"not one token fits beside the weights and runtime with {c} sequence(s)"
    elif by_memory >= s.context_length:
        ctx_reason = (f"capped by the model's context length; memory alone allows "
                      f"{'any' if by_memory >= SEARCH_LIMIT else f'{by_memory:,}'} tokens x {c} sequence(s)")
    else:
        ctx_reason = f"the longest context whose KV for {c} sequence(s) in hearth's pool still fits beside the weights"
    max_conc = b.max_concurrency(req.ctx)
    conc_reason = (f"sequences of {req.ctx:,} tokens whose KV in hearth's pool ({nbytes(b.kv_reserved(req.ctx, 1))} "
                   f"each), logits and activations fit beside the weights" if max_conc
                   else f"not one {req.ctx:,}-token sequence fits")
    return {"max_context": Figure(max_ctx, ctx_reason), "max_concurrency": Figure(max_conc, conc_reason)}


def _speed(req: PlanRequest, r: Roofline) -> dict[str, Figure]:
    ctx, c, d = req.ctx, req.concurrency, req.device
    one = r.decode_step_bytes(ctx, 1)
    single, agg, prefill = r.decode_tok_s(ctx, 1), r.decode_tok_s(ctx, c), r.prefill_tok_s(ctx)
    return {
        "decode_bytes_per_token": Figure(one, f"weights in the file's format {nbytes(r.decode_weight_bytes(1))} "
                                              f"({_weights_read_note(req)}) + KV {nbytes(r.kv_read(ctx))} "
                                              f"at {ctx:,} tokens{_window_read_note(req)}"),
        "decode_tok_s_ceiling": Figure(single, _decode_reason(r, ctx, 1, single)),
        "decode_tok_s_ceiling_aggregate": Figure(agg, _decode_reason(r, ctx, c, agg)),
        "prefill_flops_per_token": Figure(r.prefill_flops(ctx), _prefill_flops_reason(req, r)),
        "prefill_tok_s_ceiling": Figure(prefill, _prefill_reason(r, ctx, prefill)),
        "bandwidth": Figure(d.bandwidth, f"{rate(d.bandwidth)}: {d.source}"),
        "peak_flops": Figure(d.peak_flops, f"{flops(d.peak_flops)}/s dense bf16: {d.source}"),
        **({"int8_ops": Figure(d.int8_ops, f"{ops(d.int8_ops)}/s int8 dot products of the CPU kernels (their "
                                           f"prefills of quantized weights): {d.source}")} if d.int8_ops else {}),
    }


def _kv_token_reason(req: PlanRequest) -> str:
    s, f, bs = req.shape, req.kv, req.block_size
    per_layer = {layer_token_bytes(s, f, bs, i) for i in range(s.num_layers)}
    layer_text = (f"{per_layer.pop():,.2f}".rstrip("0").rstrip(".") + " B a layer" if len(per_layer) == 1
                  else "bytes that vary by layer")
    dims = "/".join(map(str, sorted(set(s.head_dims)))) if s.head_dims else str(s.head_dim_k)
    text = (f"{f.name} ({f.about}): K+V of {max(s.kv_heads)} KV head(s) x {dims} dims = {layer_text} "
            f"x {s.num_layers} layers")
    if recurrent := sum(s.recurrent):
        text += f"; {recurrent} of them recurrent, holding none (their state is a sequence's)"
    if convs := sum(1 for i in range(s.num_layers) if s.conv_dim(i)):
        text += (f"; {convs} of them short convolutions, each holding its input ({max(s.conv_dims):,} values a "
                 f"token, read {s.conv_kernel} back)")
    if shared := sum(s.kv_shared):
        text += f"; the last {shared} keep none (they attend over earlier layers' K/V)"
    if s.num_sliding:  # hearth.llm sizes one block for all layers: the window saves reads, not memory
        text += (f"; blocks hold every layer, the {s.num_sliding} sliding ones too (hearth's pool): "
                 f"their {s.sliding_window:,}-token window cuts reads only")
    return text


def _kv_cache_reason(req: PlanRequest) -> str:
    blocks = math.ceil(req.ctx / req.block_size)
    every = "every layer, sliding ones too" if req.shape.num_sliding else "every layer"
    text = f"{req.concurrency} sequence(s) x {blocks:,} blocks of {req.block_size} tokens in {every} (hearth's pool)"
    stage = staging_bytes(req.shape, req.kv, req.block_size)
    if stage:
        text += f" + per sequence {req.kv.staging_blocks} f16 staging block(s) ({nbytes(stage)})"
    if state := req.shape.state_bytes:
        text += f" + per sequence the {sum(req.shape.recurrent)} recurrent layers' state ({nbytes(state)}, f32)"
        text += f" + {SNAPSHOTS} snapshots of such a state ({nbytes(SNAPSHOTS * state)}: where prefix-cache hits start)"
    return text


def _activation_reason(req: PlanRequest) -> str:
    s, d = req.shape, req.device
    tokens = step_tokens(req.ctx, req.concurrency, req.batch_tokens)
    return (f"{tokens:,} tokens a step x {activation_values_per_token(s):,} live values x {d.act_bytes} B + "
            f"{req.concurrency} x {s.vocab_size:,} logits x {4 * LOGIT_COPIES} B")


def _runtime_reason(d: Device) -> str:
    if d.runtime_bytes is not None:
        return f"measured: a fresh hearth process before loading a model ({d.kind})"
    return f"estimate: {KINDS[d.kind].runtime_why}"


def _fits_reason(total: float, usable: float) -> str:
    if total <= usable:
        return f"needs {nbytes(total)} of {nbytes(usable)} usable ({total / usable:.0%})"
    return f"needs {nbytes(total)} but only {nbytes(usable)} is usable ({nbytes(total - usable)} short)"


def _weights_read_note(req: PlanRequest) -> str:
    s = req.shape
    parts = ["every dense tensor"]
    if s.is_moe:
        parts.append(f"{s.active_experts} of {s.num_experts} experts ({experts_touched(s, 1):.1%})")
    parts.append("the whole tied embedding as head" if s.tied_embeddings else "one embedding row")
    return ", ".join(parts)


def _window_read_note(req: PlanRequest) -> str:
    s = req.shape
    if not s.num_sliding or req.ctx <= s.sliding_window:
        return ""
    return f" ({s.num_sliding} sliding layers read only their last {s.sliding_window:,}: the kernels skip older keys)"


def _decode_reason(r: Roofline, ctx: int, c: int, value: float) -> str:
    who = "one sequence" if c == 1 else f"{c} sequences together"
    if value < r.decode_memory_bound(ctx, c):
        return f"{who}: compute-bound, {flops(r.device.peak_flops)}/s / {flops(r.decode_flops(ctx))} per token"
    share = "" if c == 1 else f" (one weight read serves {c} tokens)"
    if c > 1 and r.shape.is_moe:
        share = f" (one weight read serves {c} tokens; they route to ~{experts_touched(r.shape, c):.0%} of experts)"
    return (f"{who}: memory-bound, {c} x {rate(r.device.bandwidth)} / "
            f"{nbytes(r.decode_step_bytes(ctx, c))} read per step{share}")


def _prefill_flops_reason(req: PlanRequest, r: Roofline) -> str:
    params = active_matmul_params(req.tensors, req.shape, False)
    return (f"2 x {count(params)} active weights + attention over the {req.ctx:,}-token prompt "
            f"({flops(r.prefill_flops(req.ctx) - 2 * params)})")


def _prefill_reason(r: Roofline, ctx: int, value: float) -> str:
    if value < r.prefill_compute_bound(ctx):
        return (f"memory-bound: each step of {min(r.batch_tokens, ctx):,} prompt tokens reads all weights once "
                f"at {rate(r.device.bandwidth)}")
    peak, what = r.prefill_peak
    per_s = ops(peak) if what.startswith("int8") else flops(peak)
    return f"compute-bound: {per_s}/s of {what} / {flops(r.prefill_flops(ctx))} per token"
