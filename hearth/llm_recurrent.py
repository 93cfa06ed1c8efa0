"""What the engine does not do yet for a model with recurrent layers (qwen35's Gated DeltaNet), decided once
its config is read: their state is one per sequence (hearth.kvstore.recurrent), not per block, so a block from
the disk tier has no state to start from, and a rejected draft would stay folded into it. Each is turned off with
one log line, as where speculation cannot be lossless (hearth.llm). In-memory prefix-cache hits work through state
snapshots at block boundaries (hearth.engine.state_snapshots)."""

from __future__ import annotations

import logging
from dataclasses import replace

from hearth.config import EngineConfig, ModelConfig

log = logging.getLogger("hearth")


def recurrent(mc: ModelConfig) -> str:
    """"a model with recurrent layers (arch)" for such a model, else ""."""
    return f"a model with recurrent layers ({mc.arch})" if any(mc.recurrent_layers) else ""


def recurrent_engine(cfg: EngineConfig, mc: ModelConfig) -> EngineConfig:
    """cfg as such a model runs it: no KV disk tier (a warning: it was asked for); cfg unchanged for any other
    model."""
    if not (kind := recurrent(mc)):
        return cfg
    if cfg.kv_disk_dir:
        log.warning("hearth: the KV disk tier (--kv-disk-dir) is off for %s: their state is kept per sequence, "
                    "not per block", kind)
        cfg = replace(cfg, kv_disk_dir="")
    return cfg


def no_drafts(mc: ModelConfig) -> str:
    """Why speculative decoding is off for such a model ("" for any other)."""
    kind = recurrent(mc)
    return f"in {kind} every row is folded into their state, so a rejected draft could not be rolled back" if kind \
        else ""
