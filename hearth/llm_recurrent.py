"""What the engine does not do yet for a model with recurrent layers (qwen35's Gated DeltaNet), decided once
its config is read: their state is one per sequence (hearth.kvstore.recurrent), not per block, so a prefix-cache
hit has no state to start from (prefix caching is turned off, with a log line) and a rejected draft would stay
folded into it; the disk tier and speculative decoding are refused with one line each."""

from __future__ import annotations

import logging
from dataclasses import replace

from hearth.config import EngineConfig, ModelConfig
from hearth.errors import HearthError

log = logging.getLogger("hearth")


def recurrent_engine(cfg: EngineConfig, mc: ModelConfig, speculative: bool) -> EngineConfig:
    """cfg as such a model runs it (prefix caching off), or a HearthError naming the flag it cannot take;
    cfg unchanged for any other model."""
    if not any(mc.recurrent_layers):
        return cfg
    kind = f"a model with recurrent layers ({mc.arch})"
    if cfg.kv_disk_dir:
        raise HearthError(f"--kv-disk-dir: not yet for {kind}: their state is kept per sequence, not per block; "
                          "drop --kv-disk-dir")
    if speculative:
        raise HearthError(f"--speculative-config: not yet for {kind}: a rejected draft would stay in their state; "
                          "drop --speculative-config")
    if cfg.enable_prefix_caching:
        log.info("hearth: prefix caching is off for %s: their state is kept per sequence, not per block", kind)
        cfg = replace(cfg, enable_prefix_caching=False)
    return cfg
