"""The loader `hearth serve`'s model pool calls (hearth.api.model_pool): one model's LLM with its
--models entry's settings over the command line's, and its AsyncEngine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hearth.commands.lora_flags import lora_names
from hearth.commands.models_file import ModelEntry
from hearth.commands.threads_flag import LLAMA_DEFAULT


class Loader:
    """What the pool calls (in a worker thread) to load one model: an LLM with its entry's settings
    over the server's (and its speculation: hearth.commands.serve_speculation), its grammar vocabulary
    prepared, an AsyncEngine whose thread uses its threads."""

    def __init__(self, args: argparse.Namespace, by_id: dict[str, tuple[ModelEntry, Path, dict | None]],
                 mmproj: dict[str, str] | None = None):
        """mmproj: each model's vision projector ("" or absent: none)."""
        import torch

        self.args, self.by_id, self.mmproj = args, by_id, mmproj or {}
        self.first = next(iter(by_id), None)  # the model --lora's adapters are for
        self.all_cores = torch.get_num_threads()  # torch's default, before any load sets it
        self.default_threads = args.threads or self.all_cores

    def threads(self, entry: ModelEntry) -> int:
        """Its entry's threads: its own, else --threads's, else every core (-1: every core, as llama.cpp's)."""
        return {0: self.default_threads, LLAMA_DEFAULT: self.all_cores}.get(entry.threads, entry.threads)

    def __call__(self, spec):
        from functools import partial

        import torch

        from hearth.api.served import ServedModel
        from hearth.commands.serve import engine_args
        from hearth.engine.async_engine import AsyncEngine
        from hearth.llm import LLM
        from hearth.llm_load import use_threads
        from hearth.llm_vision import reads_images

        a = self.args
        (entry, path, speculation), mmproj = self.by_id[spec.name], self.mmproj.get(spec.name, "")
        threads = self.threads(entry)
        # set here for the load (LLM's threads=0 keeps them): a warning names the entry's field, not a --threads
        # the user did not type
        use_threads(threads, f"{entry.where}: threads =" if entry.threads > 0 else "--threads")
        llm = LLM(str(path),
                  **{**engine_args(a), "max_model_len": entry.context or a.max_model_len,
                     "kv_cache_dtype": entry.kv_cache_dtype or a.kv_cache_dtype, "threads": 0,
                     "speculative_config": speculation,
                     "lora": engine_args(a)["lora"] if spec.name == self.first else [],
                     "mmproj": mmproj})
        if getattr(a, "pooling", None):  # llama-server's --pooling, over the GGUF's (check_pooling took it)
            llm.model_config.pooling = a.pooling
        if not llm.embeds_only:  # an encoder samples nothing: no grammar vocabulary
            llm.runner.grammar.prepare_in_background()
        if line := _speculation(llm, llm.config.speculative_config):
            print(f"hearth: {spec.name}: {line}", file=sys.stderr, flush=True)
        if llm.vision_config is not None:
            print(f"hearth: {spec.name} {reads_images(llm.vision_config, mmproj)}", file=sys.stderr, flush=True)
        # torch's CPU threads are the OpenMP setting of the thread that runs the model: set on its engine thread
        engine = AsyncEngine(llm.engine, max_queued=a.max_queued, thread_init=partial(torch.set_num_threads, threads))
        prepare = None
        if llm.vision_config is not None:  # its prepares counted for /metrics, as the runner counts its encodes
            from hearth.media.images import prepare_image

            prepare = llm.vision_stats.preparing(partial(prepare_image, cfg=llm.vision_config))
        vision = served_vision(a, llm.vision_config, llm.config.mmproj, prepare)
        served = ServedModel.from_llm(llm, spec.names, engine, spec.file_names,
                                      lora_names(a) if spec.name == self.first else None, vision=vision)
        served.vision_stats = llm.vision_stats
        return served


def served_vision(args: argparse.Namespace, cfg, mmproj: str, prepare=None):
    """A model's hearth.api.media_parts.Vision under the server's image flags (where its http(s) images may come
    from, how many one request holds), cfg its mmproj's VisionConfig (None: it reads text only, and so None). The
    pool's spec holds one from the mmproj's header (hearth.commands.serve_models: a request's messages are read
    against it before the load), the loaded model one with its counted preparer: the same flags read once, here."""
    from hearth.api.media_fetch import FetchPolicy
    from hearth.api.media_parts import MAX_IMAGES, Vision

    if cfg is None:
        return None
    limit = getattr(args, "limit_mm_per_prompt", None)  # run-batch has none
    policy = FetchPolicy(tuple(getattr(args, "allowed_media_domains", None) or ()),
                         bool(getattr(args, "allow_private_media_urls", False)))
    return Vision(cfg, prepare=prepare, path=mmproj, fetch_policy=policy,
                  max_images=MAX_IMAGES if limit is None else limit)


def _speculation(llm, asked: dict | None) -> str:
    """What speculation runs, as a startup line: the method, K, the draft's file where the config names
    it otherwise (a config that names a model and no method used to run ngram without a word); "": none
    runs. Where the LLM turned it off it has said why in its own warning, right after this model's
    "loading" line (this line said it a second time)."""
    spec = llm.engine.spec
    if spec is None:
        return ""
    c = spec.config
    if c.method != "draft":
        return f"speculative decoding: {c.summary}"
    from pathlib import Path

    from hearth.loader.resolve import resolve_model

    path = resolve_model(c.model)  # a catalog or hub name: the file it stands for; a path: named once
    same = path == Path(c.model).expanduser().absolute()
    return f"speculative decoding: {c.summary}" + ("" if same else f" ({path})")
