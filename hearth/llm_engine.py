"""LLM's engine over its loaded model: a decoder's (whether speculation runs, the draft, the KV cache and its
disk tier, the runner, scheduler and EngineCore) or an encoder's (EncoderCore)."""

from __future__ import annotations

import logging
import weakref
from dataclasses import replace

from hearth import llm_draft, llm_mtp, llm_vision
from hearth.backends.cpu import uncovered_heads
from hearth.engine.encoder_core import EncoderCore, embedding_only
from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.errors import HearthError
from hearth.kernels import native
from hearth.kvstore.disk import DiskKVStore
from hearth.kvstore.snapshot import SnapshotStore
from hearth.llm_kv import cache_key, pool_size
from hearth.llm_recurrent import chains_only
from hearth.loader.context import context_in_cache, context_to_run
from hearth.runner.drafter import DraftModel
from hearth.runner.encoder_runner import EncoderRunner
from hearth.runner.model_runner import ModelRunner
from hearth.sample.grammar import GrammarCompiler
from hearth.spec_decode.policy import SpeculativeDecoder

log = logging.getLogger("hearth")


class EngineBuilding:
    """LLM's engine, built once its model is loaded (a mixin of LLM.__init__: it sets runner, engine,
    max_model_len, disk and snapshots, and speculation_off where speculation cannot run)."""

    def _decoder_engine(self, spec, draft_gguf, codec) -> None:
        """A decoder's engine: paged KV cache (with its disk tier), scheduler, runner and, where speculation
        runs, its drafter."""
        mc = self.model_config
        if self.reranker and spec is not None:  # it computes one token past each pair: nothing to draft
            raise HearthError(f"{embedding_only(mc.arch, reranker=True)}: drop --speculative-config")
        spec, draft_gguf, regimes = self._lossless(spec, draft_gguf, codec)
        spec = chains_only(spec, mc)  # a recurrent model verifies chains: a line where trees were asked for
        draft_gguf = llm_draft.draft_weights(spec, draft_gguf, self.backend)
        draft = llm_draft.draft_model(draft_gguf, self.backend) if draft_gguf is not None else None
        spec, num_blocks, snapshots, context = self._sized_cache(spec, draft, codec)
        cfg = self.config
        self.runner = ModelRunner(self.model, mc, num_blocks, cfg.block_size, codec, cfg.seed,
                                  GrammarCompiler(self.tokenizer, mc.vocab_size), cfg.max_num_seqs,
                                  state_snapshots=snapshots)
        self.runner.forced_drafts = cfg.grammar_drafts and regimes is not None
        llm_vision.attach(self, self.vision_config, self.backend)
        if cfg.kv_disk_dir:
            self._disk_tier(cfg)
        kv = KVCacheManager(num_blocks, cfg.block_size, cache_key(self.gguf.parts, codec.name, cfg.block_size),
                            cfg.enable_prefix_caching, self.disk,
                            seals_full_blocks=codec.quantized, lora=self.lora,
                            state_slots=cfg.max_num_seqs if any(mc.recurrent_layers) else 0,
                            state_snapshots=snapshots)
        if self.disk is not None:
            self.snapshots = SnapshotStore(cfg.kv_disk_dir, kv.cache_key, self.disk)
        if spec is not None and draft is not None:
            self._draft_drafter(spec, draft, draft_gguf, num_blocks, codec)
        if (mtp := llm_mtp.mtp_drafter(spec, self.model, self.gguf, mc, num_blocks, cfg.block_size,
                                       cfg.max_num_batched_tokens)) is not None:
            self.runner.drafter = mtp
        scheduler = Scheduler(kv, cfg.max_num_seqs, cfg.max_num_batched_tokens, regimes or (),
                              self.runner.verify_rows)
        policy = None if spec is None else SpeculativeDecoder(
            spec, llm_draft.step_cost(spec, self.runner.row_passes) if spec.cost_aware else None, self.tokenizer)
        self.engine = EngineCore(scheduler, self.runner, self.tokenizer, self.max_model_len, mc.vocab_size, policy,
                                 # a context the cache caps is not raised by --max-model-len: no such hint
                                 model_context=mc.context_length if self.max_model_len == context else
                                 self.max_model_len, max_logprobs=cfg.max_logprobs, lora=self.lora,
                                 reranker=self.reranker)

    def _sized_cache(self, spec, draft, codec) -> tuple:
        """(spec, num_blocks, snapshots, the context asked): the KV pool sized, max_model_len cut to what one
        sequence's blocks can hold, the model's and K's context fit to it."""
        cfg, mc = self.config, self.model_config
        self.max_model_len = context = context_to_run(cfg.max_model_len, mc.context_length)
        self.config = cfg = replace(cfg, block_size=codec.block_size(cfg.block_size))  # KVarN: its tile
        codec.check(cfg.block_size, mc.head_dim)  # q8_0 on a head_dim under 32: no block fits, 0 bytes
        num_blocks, snapshots = pool_size(cfg, mc, codec, draft, self.max_model_len, speculating=spec is not None,
                                          mtp=spec is not None and spec.method == "mtp")
        # one sequence may hold every block: a longer context would never be admitted
        self.max_model_len = context_in_cache(self.max_model_len, num_blocks * cfg.block_size)
        self.model.fit_context(self.max_model_len)
        if spec is not None:  # K set: a default one lowered to fit this context
            spec = spec.fit_context(self.max_model_len)
        return spec, num_blocks, snapshots, context

    def _lossless(self, spec, draft_gguf, codec) -> tuple:
        """(spec, draft_gguf, the row regimes): speculation off, with a warning and speculation_off saying why,
        where a verify row would not be computed bit for bit as a decode row. Decided before the draft loads:
        where speculation is off, its weights are never read nor re-encoded."""
        # with an adapter on, a verify step's rows are not yet held to a decode row's bits (its prefill chunks
        # run op by op, its decode steps the fused LoRA stack: hearth.backends.cpu_lora)
        # a recurrent layer's state is rolled back to the accepted drafts (hearth.layers.delta_log)
        regimes = None if self.lora else self.backend.row_regimes(self.model, codec.quantized)
        if spec is not None and regimes is None:
            self.speculation_off = (f"{self._unfused(codec)} a verify row is not computed bit for bit as a decode "
                                    "row, so drafts would not be lossless"
                                    + (" (the draft model is not loaded)" if draft_gguf is not None else ""))
            log.warning("speculative decoding is off: %s", self.speculation_off)
            spec = draft_gguf = None
        return spec, draft_gguf, regimes

    def _unfused(self, codec) -> str:
        """Why the steps' rows are not all computed alike here (row_regimes found none), the first that holds."""
        if self.lora:
            return "with LoRA adapters on, the layers' steps are not all fused alike, where"
        if self.model_config.num_experts:
            return "in a MoE model (its experts' matmuls depend on how many rows chose them)"
        if codec.quantized and self.backend.row_regimes(self.model, False) is not None:
            return (f"over a {self.config.kv_cache_dtype} KV cache on this CPU tier (its kernels attend over bf16/f16 "
                    "caches only)")
        if self.backend.name != "cpu" or not native.available():
            return "without the native kernels"
        heads = uncovered_heads(self.model)
        if heads and self.backend.linear_row_regimes(self.model, codec.quantized) is not None:
            return (f"with head_dim {heads[0][2]}, which the native attention does not take (torch's sums a row by "
                    "the step's rows),")
        return ("where a layer's matrices are not of a block type the native kernels run (F32, F16 and BF16 run "
                "torch's matmul: a quantized GGUF such as Q8_0 speculates),")

    def _disk_tier(self, cfg) -> None:
        """The KV disk tier (--kv-disk-dir) under the prefix cache."""
        if not cfg.enable_prefix_caching:
            raise HearthError("the KV disk tier (--kv-disk-dir) needs prefix caching: drop --no-prefix-caching")
        if cfg.kv_disk_space_mb <= 0:
            raise HearthError(f"--kv-disk-space-mb must be positive, not {cfg.kv_disk_space_mb}")
        self.disk = DiskKVStore(cfg.kv_disk_dir, cfg.kv_disk_space_mb << 20, self.runner.block_format,
                                owner=cfg.kv_disk_owner)
        weakref.finalize(self, self.disk.close)  # at the latest at exit: queued writes land

    def _draft_drafter(self, spec, draft, draft_gguf, num_blocks: int, codec) -> None:
        """The runner's drafter for a draft model (method draft): its K/V in the target's block layout."""
        cfg = self.config
        self.runner.drafter = DraftModel(*draft, num_blocks, cfg.block_size, cfg.max_num_batched_tokens,
                                         llm_draft.draft_vocab(spec, draft_gguf, draft[1], self.backend,
                                                               self.tokenizer.special_ids, self.tokenizer.eog_ids),
                                         cfg.max_num_seqs)
        if spec.tree_budget and not codec.quantized:  # a quantized cache verifies chains (Scheduler.set_drafts)
            self.runner.drafter.tree_depth = spec.num_speculative_tokens

    def _encoder_engine(self, spec) -> None:
        """An encoder's engine: whole inputs batched into one forward each, no KV cache nor scheduler
        (hearth.engine.encoder_core), under the same max_num_seqs / max_num_batched_tokens limits."""
        cfg, mc = self.config, self.model_config
        if spec is not None:
            raise HearthError(f"{embedding_only(mc.arch, self.reranker)}: drop --speculative-config")
        self.max_model_len = context_to_run(cfg.max_model_len, mc.context_length)
        self.runner = EncoderRunner(self.model, cfg.max_num_seqs, cfg.max_num_batched_tokens)
        self.engine = EncoderCore(self.runner, self.tokenizer, mc.arch, self.max_model_len, mc.vocab_size,
                                  cfg.max_num_seqs, mc.context_length, reranker=self.reranker)
