"""`LLM`: the offline Python entry point (vLLM's `LLM` shape) over the engine."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from hearth import llm_draft, llm_lora, llm_mtp, llm_vision
from hearth.llm_args import engine_config
from hearth.llm_chat import ChatCalls, template_of
from hearth.llm_engine import EngineBuilding
from hearth.llm_load import check_settings, layer_progress, use_threads
from hearth.llm_pooling import PoolingCalls
from hearth.llm_prompts import PromptType, one_each, prompt_ids, prompt_list, prompt_media, truncated
from hearth.llm_recurrent import recurrent_engine
from hearth.llm_requests import prompts_bar, run_requests
from hearth.llm_tokenizer import ChatTokenizer
from hearth.llm_turns import EngineTurns, LLMClosedError  # noqa: F401 (LLMClosedError: public, raised after close())
from hearth.backends import select as select_backend
from hearth.config import DEFAULT_MODEL, parse_rope_scaling
from hearth.errors import HearthError
from hearth.kvstore.codecs import get_codec
from hearth.loader.context import context_to_run
from hearth.loader.gguf_kind import check_model_file
from hearth.loader.resolve import resolve_model
from hearth.loader.sampling_defaults import file_sampling
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.tokenizer import Tokenizer
from hearth.memory.gguf_shape import run_context
from hearth.models.registry import embeds_only as encoder_arch, load_model, model_class
from hearth.openmp import one_thread
from hearth.outputs import RequestOutput
from hearth.sampling_params import SamplingParams
from hearth.spec_decode.config import SpeculativeConfig

log = logging.getLogger("hearth")


class LLM(ChatCalls, PoolingCalls, EngineBuilding):
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
        with one_thread():  # repacking is hundreds of small ops: threads only add stalls
            self.model, self.model_config = load_model(self.gguf, self.backend, layer_progress(progress),
                                                       parse_rope_scaling(cfg.rope_scaling), cfg.rope_freq_base)
        self.lora = llm_lora.attach(self.model, self.gguf, adapters, cfg.lora)  # before the fused paths are asked
        self.config = recurrent_engine(cfg, self.model_config)  # qwen35: no disk tier
        self.speculation_off = ""  # why speculation asked for does not run ("": it runs, or none was asked)
        self.disk = self.snapshots = None
        if self.embeds_only:
            self._encoder_engine(spec)
        else:
            self._decoder_engine(spec, draft_gguf, codec)
        self.chat_template = template_of(self, self.config.chat_template or self.tokenizer.chat_template)
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
        params = one_each(sampling_params, len(prompts), "sampling params")
        loras = one_each(lora_request, len(prompts), "LoRA requests")
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
