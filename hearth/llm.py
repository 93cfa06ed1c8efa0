"""`LLM`: the offline Python entry point (vLLM's `LLM` shape) over the engine."""

from __future__ import annotations

import itertools
import logging
import time
import weakref
from collections.abc import Callable
from dataclasses import replace

import torch

from hearth import llm_draft, llm_lora, llm_mtp, llm_vision
from hearth.llm_args import engine_config
from hearth.llm_chat import ChatCalls
from hearth.llm_load import check_settings, layer_progress, use_threads
from hearth.llm_kv import cache_key, pool_size
from hearth.llm_pooling import PoolingCalls
from hearth.llm_prompts import PromptType, prompt_ids, prompt_list, prompt_media, truncated
from hearth.llm_recurrent import chains_only, recurrent_engine
from hearth.llm_requests import prompts_bar, run_requests
from hearth.llm_tokenizer import ChatTokenizer
from hearth.llm_turns import EngineTurns, LLMClosedError  # noqa: F401 (LLMClosedError: public, raised after close())
from hearth.api.chat_template import ChatTemplate
from hearth.backends import select as select_backend
from hearth.backends.cpu import uncovered_heads
from hearth.kernels import native
from hearth.config import DEFAULT_MODEL, parse_rope_scaling
from hearth.engine.encoder_core import EncoderCore, embedding_only
from hearth.engine.engine_core import EngineCore
from hearth.engine.kv_cache_manager import KVCacheManager
from hearth.engine.scheduler import Scheduler
from hearth.errors import HearthError
from hearth.kvstore.codecs import get_codec
from hearth.kvstore.disk import DiskKVStore
from hearth.kvstore.snapshot import SnapshotStore
from hearth.loader.context import context_in_cache, context_to_run
from hearth.loader.gguf_kind import check_model_file
from hearth.loader.resolve import resolve_model
from hearth.loader.sampling_defaults import file_sampling
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.tokenizer import Tokenizer
from hearth.memory.gguf_shape import run_context
from hearth.models.registry import embeds_only as encoder_arch, load_model, model_class
from hearth.outputs import RequestOutput
from hearth.runner.encoder_runner import EncoderRunner
from hearth.runner.model_runner import ModelRunner
from hearth.sample.grammar import GrammarCompiler
from hearth.sampling_params import SamplingParams
from hearth.runner.drafter import DraftModel
from hearth.spec_decode.config import SpeculativeConfig
from hearth.spec_decode.policy import SpeculativeDecoder

log = logging.getLogger("hearth")


class LLM(ChatCalls, PoolingCalls):
    """A model loaded for offline generation (vLLM's `LLM`): `generate(prompts, SamplingParams)`,
    `chat(messages, ...)` (with `tools`, `tool_choice` and `tool_guard`: "guard" | "grammar" | "off"),
    `stream(prompt)`, then `close()`; an embedding GGUF's `embed(prompts)`, a reranker's `score(query,
    documents)`. Calls from several threads run one at a time.

    Engine arguments (hearth.config.EngineConfig, whose field docstrings say more):
      model: catalog name, .gguf path or hub reference org/repo:file.gguf
      max_model_len: longest prompt + output in tokens (0: the model's own context)
      max_num_seqs: most sequences per step; max_num_batched_tokens: tokens per step
      kv_cache_dtype: auto | f16 | bf16 | fp8_e4m3 | q8_0 | q4_0 | kvarn_k4v2 | kvarn_k4v4
      kv_cache_memory_gb, num_kv_blocks, block_size: the KV cache's size
      enable_prefix_caching: reuse the K/V of a seen prompt prefix; kv_disk_dir: keep it on disk
      state_snapshots: a recurrent model's (qwen35) states kept at block boundaries, where prefix hits start
      speculative_config: vLLM's dict (or JSON), e.g. {"method": "ngram", "num_speculative_tokens": 4}
      rope_scaling: {"rope_type": "yarn" | "linear", "factor": 4, "original_max_position_embeddings": 32768} over the file's
        ({"rope_type": "none"}: none; {"factor": 4}: the file's kind); rope_freq_base: theta over the file's (0: its)
      max_logprobs: most top logprobs per token a request may ask (-1: no cap)
      threads: CPU threads (0: torch's default); device: auto | cpu | cuda | torch; seed: default seed
    progress: a loading bar on a terminal."""

    def __init__(self, model: str = DEFAULT_MODEL, *, progress: bool = True, **engine_args):
        self.config = cfg = engine_config(model, engine_args)  # vLLM's names taken, an unknown one refused
        spec = SpeculativeConfig.parse(cfg.speculative_config)  # bad input fails before the load
        if spec is not None:
            spec.check_step_budget(cfg.max_num_batched_tokens)
        self.backend = select_backend(cfg.device)  # chosen once: the target and the draft run on it
        codec = get_codec(cfg.kv_cache_dtype)
        check_settings(cfg, self.backend, codec)
        use_threads(cfg.threads)
        t0 = time.perf_counter()
        self.path = resolve_model(model)
        self.gguf = GGUFFile(self.path)
        check_model_file(self.gguf)  # an adapter or projector given as MODEL: said as what it is
        model_class(self.gguf.arch)  # an architecture hearth has not, said before its tokenizer is read
        self.tokenizer = Tokenizer.from_gguf(self.gguf)
        if spec is not None:  # K past the context fails before the weights load (again once the cache is sized)
            spec.check_context(context_to_run(cfg.max_model_len, run_context(self.gguf, cfg.rope_scaling), quiet=True))
        draft_gguf = llm_draft.draft_gguf(spec, self.tokenizer)  # a draft with another vocabulary fails here
        llm_mtp.check_mtp(spec, self.gguf)  # so does method mtp on a file without an MTP head
        if cfg.lora and encoder_arch(self.gguf.arch):
            raise HearthError(f"--lora: {self.gguf.arch} is an embedding model; LoRA adapters apply to decoder models")
        adapters = llm_lora.read_adapters(cfg.lora)  # a file that is no adapter fails before the weights load
        self.vision_config = llm_vision.vision_config(cfg.mmproj, encoder_arch(self.gguf.arch))  # so does an mmproj
        self.vision_stats = None  # its prepares and encodes, with an mmproj (llm_vision.attach)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # repacking is hundreds of small ops: threads only add stalls
        try:
            self.model, self.model_config = load_model(self.gguf, self.backend, layer_progress(progress),
                                                       parse_rope_scaling(cfg.rope_scaling), cfg.rope_freq_base)
        finally:
            torch.set_num_threads(threads)
        self.lora = llm_lora.attach(self.model, self.gguf, adapters, cfg.lora)  # before the fused paths are asked
        mc = self.model_config
        self.config = cfg = recurrent_engine(cfg, mc)  # qwen35: no disk tier
        if self.embeds_only:
            self._encoder_engine(spec, t0)
            return
        if self.reranker and spec is not None:  # it computes one token past each pair: nothing to draft
            raise HearthError(f"{embedding_only(mc.arch, reranker=True)}: drop --speculative-config")
        # decided before the draft loads: where speculation is off, its weights are never read nor re-encoded
        # with an adapter on, a verify step's rows are not yet held to a decode row's bits (its prefill chunks
        # run op by op, its decode steps the fused LoRA stack: hearth.backends.cpu_lora)
        # a recurrent layer's state is rolled back to the accepted drafts (hearth.layers.delta_log)
        regimes = None if self.lora else self.backend.row_regimes(self.model, codec.quantized)
        self.speculation_off = ""  # why speculation asked for does not run ("": it runs, or none was asked)
        if spec is not None and regimes is None:
            why = ("with LoRA adapters on, the layers' steps are not all fused alike, where" if self.lora else
                   "in a MoE model (its experts' matmuls depend on how many rows chose them)" if mc.num_experts
                   else f"over a {cfg.kv_cache_dtype} KV cache on this CPU tier (its kernels attend over bf16/f16 "
                   "caches only)" if codec.quantized and self.backend.row_regimes(self.model, False) is not None
                   else "without the native kernels" if self.backend.name != "cpu" or not native.available()
                   else f"with head_dim {heads[0][2]}, which the native attention does not take (torch's sums a row by "
                   "the step's rows)," if (heads := uncovered_heads(self.model))
                   and self.backend.linear_row_regimes(self.model, codec.quantized) is not None
                   else "where a layer's matrices are not of a block type the native kernels run (F32, F16 and "
                   "BF16 run torch's matmul: a quantized GGUF such as Q8_0 speculates),")
            self.speculation_off = (f"{why} a verify row is not computed bit for bit as a decode row, so drafts "
                                    "would not be lossless"
                                    + (" (the draft model is not loaded)" if draft_gguf is not None else ""))
            log.warning("speculative decoding is off: %s", self.speculation_off)
            spec = draft_gguf = None
        spec = chains_only(spec, mc)  # a recurrent model verifies chains: a line where trees were asked for
        draft_gguf = llm_draft.draft_weights(spec, draft_gguf, self.backend)
        draft = llm_draft.draft_model(draft_gguf, self.backend) if draft_gguf is not None else None
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
        self.runner = ModelRunner(self.model, mc, num_blocks, cfg.block_size, codec, cfg.seed,
                                  GrammarCompiler(self.tokenizer, mc.vocab_size), cfg.max_num_seqs,
                                  state_snapshots=snapshots)
        self.runner.forced_drafts = cfg.grammar_drafts and regimes is not None
        llm_vision.attach(self, self.vision_config, self.backend)
        self.disk = self.snapshots = None
        if cfg.kv_disk_dir:
            if not cfg.enable_prefix_caching:
                raise HearthError("the KV disk tier (--kv-disk-dir) needs prefix caching: drop --no-prefix-caching")
            if cfg.kv_disk_space_mb <= 0:
                raise HearthError(f"--kv-disk-space-mb must be positive, not {cfg.kv_disk_space_mb}")
            self.disk = DiskKVStore(cfg.kv_disk_dir, cfg.kv_disk_space_mb << 20, self.runner.block_format,
                                    owner=cfg.kv_disk_owner)
            weakref.finalize(self, self.disk.close)  # at the latest at exit: queued writes land
        kv = KVCacheManager(num_blocks, cfg.block_size, cache_key(self.gguf.parts, codec.name, cfg.block_size),
                            cfg.enable_prefix_caching, self.disk,
                            seals_full_blocks=codec.quantized, lora=self.lora,
                            state_slots=cfg.max_num_seqs if any(mc.recurrent_layers) else 0,
                            state_snapshots=snapshots)
        if self.disk is not None:
            self.snapshots = SnapshotStore(cfg.kv_disk_dir, kv.cache_key, self.disk)
        if spec is not None and draft is not None:
            self.runner.drafter = DraftModel(*draft, num_blocks, cfg.block_size, cfg.max_num_batched_tokens,
                                             llm_draft.draft_vocab(spec, draft_gguf, draft[1], self.backend,
                                                                   self.tokenizer.special_ids, self.tokenizer.eog_ids),
                                             cfg.max_num_seqs)
            if spec.tree_budget and not codec.quantized:  # a quantized cache verifies chains (Scheduler.set_drafts)
                self.runner.drafter.tree_depth = spec.num_speculative_tokens
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
        self.chat_template = ChatTemplate(cfg.chat_template or self.tokenizer.chat_template, self.tokenizer.bos_token,
                                          self.tokenizer.eos_token, self.gguf.arch, cfg.chat_template_kwargs)
        self._ready(t0)

    def _encoder_engine(self, spec, t0: float) -> None:
        """An encoder's engine: whole inputs batched into one forward each, no KV cache nor scheduler
        (hearth.engine.encoder_core), under the same max_num_seqs / max_num_batched_tokens limits."""
        cfg, mc = self.config, self.model_config
        if spec is not None:
            raise HearthError(f"{embedding_only(mc.arch, self.reranker)}: drop --speculative-config")
        self.speculation_off = ""
        self.max_model_len = context_to_run(cfg.max_model_len, mc.context_length)
        self.runner = EncoderRunner(self.model, cfg.max_num_seqs, cfg.max_num_batched_tokens)
        self.disk = self.snapshots = None
        self.engine = EncoderCore(self.runner, self.tokenizer, mc.arch, self.max_model_len, mc.vocab_size,
                                  cfg.max_num_seqs, mc.context_length, reranker=self.reranker)
        self.chat_template = ChatTemplate(cfg.chat_template or self.tokenizer.chat_template, self.tokenizer.bos_token,
                                          self.tokenizer.eos_token, self.gguf.arch, cfg.chat_template_kwargs)
        self._ready(t0)

    def _ready(self, t0: float) -> None:
        self.load_time = time.perf_counter() - t0
        self._turns = EngineTurns()  # one call steps the engine at a time, none after close()
        self._request_ids = itertools.count()  # across calls: ids never collide in the engine

    def get_tokenizer(self) -> ChatTokenizer:
        """The model's tokenizer as vLLM's llm.get_tokenizer() is used (hearth.llm_tokenizer): encode(text),
        decode(ids), apply_chat_template(messages, ...), eos_token_id; read from the GGUF."""
        return ChatTokenizer(self)

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's: SamplingParams with the model's own defaults (the GGUF's general.sampling.* keys, its
        generation_config's), else SamplingParams()'s."""
        return SamplingParams(**file_sampling(self.gguf))

    def generate(self, prompts: PromptType | list[PromptType],
                 sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
                 use_tqdm: bool | Callable = True, lora_request=None) -> list[RequestOutput]:
        """Run prompts to completion together; one RequestOutput per prompt, in order. prompts: one
        prompt or a list of them, each a str, {'prompt': str} or {'prompt_token_ids': [int, ...]}; a dict
        may add 'media': [hearth.media.inputs.MediaInput, ...], image rows in the prompt (a model with a
        vision encoder). use_tqdm (vLLM's): a bar of finished prompts on a terminal (or a tqdm-like class to
        make it); lora_request: a hearth.llm_lora.LoRARequest (vLLM's) naming an adapter the LLM loaded, or
        a list of them, one per prompt (None: the LLM's scales)."""
        prompts = prompt_list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(params)} sampling params for {len(prompts)} prompts")
        loras = lora_request if isinstance(lora_request, list) else [lora_request] * len(prompts)
        if len(loras) != len(prompts):
            raise ValueError(f"{len(loras)} LoRA requests for {len(prompts)} prompts")
        params = [p if r is None else replace(p, lora=llm_lora.request_lora(self.lora, r))
                  for p, r in zip(params, loras)]
        encoded = [prompt_ids(self.tokenizer, prompt, f"prompts[{i}]") for i, prompt in enumerate(prompts)]
        media = [prompt_media(prompt) for prompt in prompts]
        encoded = [truncated(e, p.truncate_prompt_tokens, self.max_model_len, bool(m))
                   for e, p, m in zip(encoded, params, media)]
        # validate every request before queueing any; queue the checked params (bad_words' ids on; an encoder's: None)
        params = [(self.engine.check_request(ids, p, m) if m else self.engine.check_request(ids, p)) or p
                  for (_, ids), p, m in zip(encoded, params, media)]
        with self._turns.driving("generate"), prompts_bar(use_tqdm, len(prompts)) as bar:
            return run_requests(self.engine, self._request_ids, encoded, params, media, bar)

    def close(self) -> None:
        """Finish the disk tier's queued writes (they are lost if the process exits first), after any
        call in progress; later calls that would run the engine raise LLMClosedError."""
        with self._turns.driving("close", closing=True):
            if not self._turns.closed:
                self._turns.closed = True
                try:
                    while self.engine.has_unfinished():  # saves a failed step gave back: no request is left
                        self.engine.step()
                except Exception as e:  # the caller saw this error from its call already: say it, close anyway
                    log.warning("KV disk saves given back by a failed step were lost: %s", e)
                finally:
                    self.engine.close()

    def stream(self, prompt: PromptType, sampling_params: SamplingParams | None = None):
        """Yield EngineOutput deltas of one request as they are generated. The engine is this
        stream's (other threads' calls wait) until it ends or is closed."""
        _, ids = prompt_ids(self.tokenizer, prompt, "prompt")
        media = prompt_media(prompt)
        with self._turns.driving("stream"):
            rid = self.engine.add_request(ids, sampling_params or SamplingParams(),
                                          request_id=str(next(self._request_ids)), media=media)
            try:
                while self.engine.has_unfinished():
                    for out in self.engine.step():
                        if out.request_id == rid:
                            if out.error is not None:
                                raise out.error
                            yield out
                            if out.finished:
                                return
            finally:
                self.engine.abort(rid)  # a consumer that stops early frees the request's blocks
