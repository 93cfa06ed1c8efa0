"""What the engine does differently for a model with recurrent layers (qwen35's Gated DeltaNet), decided once its
config is read: their state is one per sequence (hearth.kvstore.recurrent), not per block, so a block from the disk
tier has no state to start from (the tier is off, with one log line), and a verify step's drafts are a chain (a
tree's branches would each need their own state: its top-1 chain is verified, with one log line). In-memory
prefix-cache hits work through state snapshots at block boundaries (hearth.engine.state_snapshots); a rejected
draft's rows are taken out of the state by replaying the accepted ones (hearth.layers.delta_log)."""

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
        log.warning("the KV disk tier (--kv-disk-dir) is off for %s: their state is kept per sequence, "
                    "not per block", kind)
        cfg = replace(cfg, kv_disk_dir="")
    return cfg


def chains_only(spec, mc: ModelConfig):
    """spec (a SpeculativeConfig, or None) as such a model runs it: chains (tree_budget 0: a tree's nodes share no
    state, and the n-gram proposer and the draft model then draft the top-1 chain of the same depth); a warning
    where a tree was asked for. Degraded rather than refused: the same --speculative-config serves every model."""
    if spec is None or not spec.tree_budget or not (kind := recurrent(mc)):
        return spec
    log.warning("speculative_config.tree_budget is ignored for %s: its drafts are verified as chains (the "
                "recurrent state follows one path)", kind)
    return replace(spec, tree_budget=0)

