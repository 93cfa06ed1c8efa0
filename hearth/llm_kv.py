"""The LLM's KV cache as the load sizes it: how many blocks fit (each costing the target's K/V and a draft's
beside it, plus each sequence's staging and recurrent state, plus the state snapshots), and the key its blocks
are reused under, in memory or in the disk tier after a restart."""

from __future__ import annotations

from pathlib import Path

from hearth.config import EngineConfig, ModelConfig, layer_caches, mtp_cache, recurrent_state_bytes
from hearth.kvstore.codecs import cache_block_bytes, cache_staging_bytes, get_codec
from hearth.loader.fingerprint import model_fingerprint
from hearth.memory.kv_cache import pool_blocks


def pool_size(cfg: EngineConfig, mc: ModelConfig, codec, draft, max_model_len: int,
              speculating: bool = False, mtp: bool = False) -> tuple[int, int]:
    """(num_blocks, state snapshots) for cfg's budget. draft: the draft model (module, its ModelConfig) or None;
    speculating: drafts are verified (any method); mtp: the model's MTP head drafts (hearth.runner.mtp_drafter)."""
    block_bytes = cache_block_bytes(codec, layer_caches(mc), cfg.block_size)  # refuses what it cannot hold
    if draft is not None:  # the draft's K/V sits under the same block ids: each block costs both
        block_bytes += cache_block_bytes(get_codec("f16"), layer_caches(draft[1]), cfg.block_size)
    if mtp:  # so does the MTP head's one attention layer (f16, as a draft's)
        block_bytes += cache_block_bytes(get_codec("f16"), [mtp_cache(mc)], cfg.block_size)
    # per sequence beside the blocks: a quantized format's staging, a recurrent model's state slot (and with
    # drafts its copy before a verify step: hearth.layers.delta_log), a recurrent draft's state and its copy
    # (hearth.runner.draft_states)
    staging = (cache_staging_bytes(codec, layer_caches(mc), cfg.block_size)
               + recurrent_state_bytes(mc) * (2 if speculating else 1)
               + (2 * recurrent_state_bytes(draft[1]) if draft is not None else 0))
    # and once: a recurrent model's state snapshots, where its prefix-cache hits start
    snapshots = cfg.state_snapshots if cfg.enable_prefix_caching and any(mc.recurrent_layers) else 0
    num_blocks = pool_blocks(block_bytes, staging, cfg.block_size, cfg.max_num_seqs, max_model_len,
                             cfg.kv_cache_memory_gb, cfg.num_kv_blocks, snapshots * recurrent_state_bytes(mc))
    return num_blocks, snapshots


def cache_key(files: list[Path], codec: str, block_size: int) -> bytes:
    """What makes cached K/V reusable, here or in the disk tier after a restart: the same model
    files' content (see model_fingerprint; every file of a split model), the same KV format and the
    same block size."""
    return f"{'+'.join(model_fingerprint(f) for f in files)}|{codec}|{block_size}".encode()
