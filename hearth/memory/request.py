"""One call from what a user typed to a Plan: `plan_for("smollm2-135m", device="this", ctx=4096)`.
Used by `hearth plan` and by anything else that wants the ceilings (the benchmark's % of roofline)."""

from __future__ import annotations

from hearth.loader.context import context_to_run
from hearth.memory import PlanError
from hearth.memory.devices import THIS, get_device
from hearth.memory.kv_formats import served_kv_format
from hearth.memory.model_input import model_input
from hearth.memory.overhead import DEFAULT_BATCH_TOKENS
from hearth.memory.planner import Plan, PlanRequest, check_request, plan

DEFAULT_BLOCK = 16  # EngineConfig.block_size


def build_request(model: str, device: str = THIS, ctx: int | None = None, concurrency: int = 1,
                  kv_cache_dtype: str = "auto", block_size: int | None = None,
                  batch_tokens: int = DEFAULT_BATCH_TOKENS, memory_gib: float | None = None,
                  remeasure: bool = False, progress: bool = False, fit_ctx: bool = False,
                  ctx_named: str = "") -> PlanRequest:
    """Checks the cheap things first (names, numbers) so bad input never waits on a measurement.
    fit_ctx: serve's and run's rule (hearth.loader.context): 0 is the model's own context, one past it
    is the model's with their notice; else both are errors. ctx_named: how an error names a ctx the user
    gave as other flags (hearth.memory.planner.check_request)."""
    fmt = served_kv_format(kv_cache_dtype)
    if block_size is not None and block_size <= 0:  # before the format's default: 0 was planned as 16, unsaid
        raise PlanError(f"--block-size must be positive, got {block_size}")
    block = fmt.block_size(block_size, DEFAULT_BLOCK)
    m = model_input(model, progress=progress)
    if ctx is None:
        ctx = m.shape.context_length
    elif fit_ctx and ctx < 0:
        raise PlanError(f"--ctx must be a number of tokens (0: the model's own), got {ctx}")
    elif fit_ctx:
        ctx = context_to_run(ctx, m.shape.context_length)
    check_request(m.shape, ctx, concurrency, batch_tokens, ctx_named)
    dev = get_device(device, memory_gib, refresh=remeasure)
    return PlanRequest(m.shape, m.tensors, m.weights_source, dev, ctx, concurrency, fmt, block, batch_tokens)


def plan_for(model: str, **options) -> Plan:
    """As `hearth plan` asks: a ctx of 0 or past the model's is the model's, as serve and run run it."""
    return plan(build_request(model, fit_ctx=True, **options))
