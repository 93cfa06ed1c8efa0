"""The models `hearth serve` serves: MODEL arguments and/or a `--models` TOML file -> ModelSpecs
(friendly ids, aliases, the file's names, the planner's footprint) and the loader the server's pool calls.

    [[models]]
    name = "coder"                 # the id clients use (default: the catalog name or the file's stem)
    model = "qwen2.5-coder-1.5b"   # catalog name, .gguf path (relative to this file) or org/repo:file.gguf
    aliases = ["gpt-4o-mini"]      # more names for it
    context = 8192                 # default: --max-model-len, else the model's own
    kv_cache_dtype = "q8_0"        # default: --kv-cache-dtype
    threads = 2                    # its engine thread's CPU threads (default: --threads, else all cores)
    pinned = true                  # loaded at start and never unloaded (default: false)
    keep_alive = "10m"             # unloaded once idle this long (default: --keep-alive, else forever)
    router = "small"               # a model of this server that answers its single-turn tool calls when
    router_threshold = 0.5         #   sure (default: --router, --router-threshold, --router-tool-floor);
    router_tool_floor = 0.95       #   a router is pinned
    speculative_config = { model = "qwen2.5-coder-0.5b" }   # its own speculation over the command line's
                                   #   (--speculative-config's keys; false: none); hearth.commands.serve_speculation
    mmproj = "mmproj-coder.gguf"   # its vision projector (llama.cpp's mmproj; relative to this file): it takes
                                   #   images (default: --mmproj's, for the first model only, as --lora's)

A bad entry is one line naming the entry and the field."""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

from hearth.api.durations import seconds
from hearth.commands.lora_flags import lora_bases, lora_files, lora_names
from hearth.commands.rope_flags import rope_scaling
from hearth.commands.serve_speculation import ENTRY_FIELD, entry_config
from hearth.errors import HearthError


@dataclass(frozen=True)
class ModelEntry:
    model: str
    name: str = ""
    aliases: tuple[str, ...] = ()
    context: int = 0
    kv_cache_dtype: str = ""
    threads: int = 0
    pinned: bool = False
    where: str = field(default="", compare=False)
    """How errors name it: `models.toml: models[2] ('coder')`, or `MODEL 'x'`."""
    router: str = ""
    router_threshold: float | None = None
    router_tool_floor: float | None = None
    speculative_config: dict | bool | None = None
    """Its own speculative_config (a dict of the record's keys), False for none, None for the command line's."""
    keep_alive: float | None = None
    """Seconds it stays loaded once idle (inf: forever); None: --keep-alive's."""
    mmproj: str = ""
    """Its vision projector (a llama.cpp mmproj GGUF); "": --mmproj's for the first model, none for the others."""


def _text(v) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _duration(v) -> bool:
    try:
        return not isinstance(v, bool) and isinstance(v, (str, int, float)) and seconds(v) >= 0
    except ValueError:
        return False


def _unit(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1


# field -> (check, what it must be): a models-file entry's fields
FIELDS = {
    "model": (_text, "a catalog name, a .gguf path or org/repo:file.gguf"),
    "name": (_text, "a non-empty string"),
    "aliases": (lambda v: isinstance(v, list) and all(_text(a) for a in v), "a list of non-empty strings"),
    "context": (_count, "a whole number of tokens (0: the model's own)"),
    "kv_cache_dtype": (_text, "a KV-cache format name"),
    "threads": (_count, "a whole number of threads (0: all cores)"),
    "pinned": (lambda v: isinstance(v, bool), "true or false"),
    "router": (_text, "the name of another model this server serves"),
    "router_threshold": (_unit, "a number in [0, 1]"),
    "router_tool_floor": (_unit, "a number in [0, 1] (0: off)"),
    "speculative_config": (lambda v: isinstance(v, dict) or v is False, ENTRY_FIELD),
    "keep_alive": (_duration, 'a duration such as "5m" or "1h30m", a number of seconds, or -1 (forever)'),
    "mmproj": (_text, "the model's vision projector: a llama.cpp mmproj .gguf path"),
}


def read_models_file(path: str) -> list[ModelEntry]:
    p = Path(path).expanduser()
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise HearthError(f"--models {path}: cannot read it ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise HearthError(f"--models {path}: not valid TOML: {e}") from None
    extra = sorted(set(data) - {"models"})
    if extra:
        raise HearthError(f"{p.name}: unknown table or key {extra[0]!r}: list models as [[models]] entries")
    entries = data.get("models")
    if not isinstance(entries, list) or not entries:
        raise HearthError(f"{p.name}: no models: add [[models]] entries with at least `model = ...`")
    return [_entry(raw, f"{p.name}: models[{i}]", p.parent) for i, raw in enumerate(entries, 1)]


def _entry(raw, where: str, base: Path) -> ModelEntry:
    if not isinstance(raw, dict):
        raise HearthError(f"{where}: must be a table ([[models]]), not {type(raw).__name__}")
    if _text(raw.get("name")):
        where += f" ({raw['name']!r})"
    for key, value in raw.items():
        if key not in FIELDS:
            raise HearthError(f"{where}: unknown field {key!r}; fields: {', '.join(FIELDS)}")
        ok, what = FIELDS[key]
        if not ok(value):
            raise HearthError(f"{where}: {key}: must be {what}, got {value!r}")
    if "model" not in raw:
        raise HearthError(f"{where}: model: is required ({FIELDS['model'][1]})")
    model = raw["model"]
    if model.endswith(".gguf") and not Path(model).expanduser().is_absolute() and (base / model).is_file():
        model = str(base / model)  # relative paths are the file's, not the working directory's
    if "kv_cache_dtype" in raw:
        _check_kv(raw["kv_cache_dtype"], f"{where}: kv_cache_dtype")
    spec = entry_config(raw["speculative_config"], where, base) if "speculative_config" in raw else None
    mmproj = _mmproj(raw["mmproj"], f"{where}: mmproj", base) if "mmproj" in raw else ""
    return ModelEntry(model, raw.get("name", ""), tuple(raw.get("aliases", ())), raw.get("context", 0),
                      raw.get("kv_cache_dtype", ""), raw.get("threads", 0), raw.get("pinned", False), where,
                      raw.get("router", ""), raw.get("router_threshold"), raw.get("router_tool_floor"), spec,
                      seconds(raw["keep_alive"]) if "keep_alive" in raw else None, mmproj)


def _mmproj(path: str, where: str, base: Path) -> str:
    """An entry's mmproj, relative to the models file, read now (a wrong one is one line at start, not at the
    model's first request)."""
    from hearth.media.config import read_vision_config

    p = Path(path).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise HearthError(f"{where}: {path}: no such file")
    try:
        read_vision_config(p)
    except HearthError as e:
        raise HearthError(f"{where}: {e}") from None
    return str(p)


def _check_kv(name: str, where: str) -> None:
    from hearth.kvstore.codecs import get_codec

    try:
        get_codec(name)  # the formats the engine serves (the planner knows more)
    except HearthError as e:
        raise HearthError(f"{where}: {e}") from None


def model_args(args: argparse.Namespace) -> list[str]:
    """-m/--model's (llama-server's and vLLM's spelling: the first, the default model), then the MODEL arguments."""
    return [*getattr(args, "model_flag", []), *args.model]


def entries(args: argparse.Namespace) -> list[ModelEntry]:
    """MODEL arguments, then the models file's entries; the defaults' model alone when neither."""
    given = [ModelEntry(m, where=f"MODEL {m!r}") for m in model_args(args)]
    if args.models:
        given += read_models_file(args.models)
    if not given:
        from hearth.config import DEFAULT_MODEL

        given = [ModelEntry(DEFAULT_MODEL, where=f"MODEL {DEFAULT_MODEL!r}")]
    if args.served_model_name:
        _check_names_are_not_models(args)
        if len(given) > 1:
            raise HearthError("--served-model-name names one model; with several, give each its name in a "
                              "--models file")
        first = given[0]
        given = [replace(first, name=args.served_model_name[0], aliases=tuple(args.served_model_name[1:]))]
    return given


def _check_names_are_not_models(args: argparse.Namespace) -> None:
    """--served-model-name takes every word up to the next flag, as vLLM's: with no MODEL left, a name that is a
    model (a .gguf, a catalog name, a hub reference) was the MODEL meant, written after it; say so rather than
    serve the default model under that name."""
    from hearth.loader.catalog import CATALOG

    if model_args(args) or args.models:
        return
    for name in args.served_model_name:
        if name.endswith(".gguf") or name in CATALOG or "/" in name:
            raise HearthError(f"--served-model-name {name}: that is a model, not a name; --served-model-name takes "
                              "every word up to the next flag (as vLLM's): give MODEL before it")


def model_names(entry: ModelEntry, path: Path) -> list[str]:
    """The id (its name, else the catalog name, else the file's stem: never a path: clients reject
    it, and it would show the user's directories in every response), then its aliases: what
    /v1/models lists (vLLM lists each --served-model-name; llama-server its one alias)."""
    from hearth.loader.catalog import CATALOG
    from hearth.loader.gguf_loader import SPLIT_NAME

    # a split model's first file is the model: its stem without gguf-split's -00001-of-0000N (still taken)
    stem = SPLIT_NAME.sub("", path.name) if SPLIT_NAME.search(path.name) else path.stem
    primary = entry.name or (entry.model if entry.model in CATALOG else stem)
    return list(dict.fromkeys([primary, *entry.aliases]))


def file_names(entry: ModelEntry, path: Path, names: list[str]) -> list[str]:
    """The old forms (MODEL as given, the file's stem and name), still taken in `model` but never
    listed (a picker would show each as another model); those among names left out."""
    return [n for n in dict.fromkeys([entry.model, path.stem, path.name]) if n not in names]


def unique_names(named: list[list[str]], entries_: list[ModelEntry]) -> None:
    """Ids and given aliases must be unique across models, else one line naming both (a file name two
    models share is no error: the pool answers it with a 400 naming them)."""
    owner: dict[str, str] = {}
    for names, e in zip(named, entries_):
        for n in names:
            if n in owner:
                how = " (a --models file's `name`)" if e.where.startswith("MODEL ") else ""
                raise HearthError(f"{e.where}: name {n!r} is already that of {owner[n]}; give each model its own "
                                  f"name{how}")
            owner[n] = e.where


def build_pool(args: argparse.Namespace):
    """The server's ModelPool: specs with friendly ids and the planner's footprints and keep-alives, the budget,
    the loader. One model is pinned (unless a keep-alive is given) and unbudgeted unless --max-memory is given
    (as before: it just loads)."""
    from hearth.api.model_pool import GiB, ModelPool
    from hearth.api.model_spec import ModelSpec
    from hearth.commands.serve import router_threshold, router_tool_floor
    from hearth.commands.serve_router import router_configs, with_router
    from hearth.commands.serve_speculation import check_drafts_fit, k_flag, per_model, speculative_config
    from hearth.engine.pairs import not_a_reranker
    from hearth.memory.serving import default_budget

    if args.max_memory < 0:
        raise HearthError(f"--max-memory must be a positive number of GiB, not {args.max_memory}")
    _check_kv(args.kv_cache_dtype, "--kv-cache-dtype")  # the flag's fault, before a model is blamed for it
    given = with_router(entries(args), getattr(args, "router", None))
    paths = [_resolve(e) for e in given]
    names = [model_names(e, p) for e, p in zip(given, paths)]
    unique_names(names, given)
    if names:  # vLLM's --lora-modules: the first model's names, listed as models of their own (ModelSpec.adapters)
        taken = {n: e.where for e, ns in zip(given, names) for n in ns}
        for n in lora_names(args):  # one that is a model's name would take that model's requests over
            if n in taken:
                raise HearthError(f"--lora-modules {n}=...: {n!r} is already the name of {taken[n]}; give the "
                                  "adapter its own name")
        for n, base in lora_bases(args).items():  # vLLM's parent: hearth applies the adapters to the first model
            if base not in names[0] + [given[0].model, paths[0].name, paths[0].stem]:
                raise HearthError(f"--lora-modules {n}: base_model_name {base!r} is not the first model "
                                  f"({names[0][0]!r}), the one hearth applies --lora-modules adapters to")
        names[0] += list(lora_names(args))
    files = [file_names(e, p, n) for e, p, n in zip(given, paths, names)]
    routers = router_configs(given, [n + f for n, f in zip(names, files)], getattr(args, "router", None),
                             router_threshold(args), router_tool_floor(args))
    routing = {r.model for r in routers if r is not None}
    speculation = per_model(given, paths, [n[0] for n in names], speculative_config(args))
    several = len(given) > 1
    flag_keep = getattr(args, "keep_alive", None)  # run-batch has none
    specs = []
    for e, path, n, f, router, spec in zip(given, paths, names, files, routers, speculation):
        fp, facts = _footprint(e, path, args, spec.draft)
        if getattr(args, "reranking", False) and not reranks(facts):
            kind = "an embedding model" if facts.embeds_only else "a text generation model"
            raise HearthError(f"--reranking: {not_a_reranker(e.where, kind)}; or drop --reranking")
        check_pooling(getattr(args, "pooling", None), facts, e.where)
        own = e.speculative_config is not None  # K from the entry's own config, else from the flags
        check_drafts_fit(spec.config, fp.context, f"{e.where}: speculative_config.num_speculative_tokens" if own
                         else k_flag(args))
        keep = e.keep_alive if e.keep_alive is not None else flag_keep
        # one model is pinned as before, unless a keep-alive asks it to go when idle
        alone = not several and keep is None
        specs.append(ModelSpec(n, fp.total, e.pinned or alone or n[0] in routing, fp.context, router, fp.kv,
                               f, facts, lora_files(args) if not specs else {},
                               math.inf if keep is None else keep, _pinned_why(e, alone, n[0] in routing)))
    mmprojs = [e.mmproj or (getattr(args, "mmproj", "") if i == 0 else "") for i, e in enumerate(given)]
    if several and any(mmprojs):  # --mmproj is the first model's alone: say who reads images
        readers = ", ".join(n[0] for n, m in zip(names, mmprojs) if m)
        print(f"hearth: images: {readers} (--mmproj is the first model's; a --models entry's `mmproj` gives "
              "another its own); the others read text only", file=sys.stderr, flush=True)
    budget = int(args.max_memory * GiB) if args.max_memory else (default_budget() if several else 0)
    loader = Loader(args, {n[0]: (e, p, s.config) for e, p, n, s in zip(given, paths, names, speculation)},
                    {n[0]: m for n, m in zip(names, mmprojs)})
    return ModelPool(specs, loader, budget)


def _pinned_why(e: ModelEntry, alone: bool, routes: bool) -> str:
    """Why a model is pinned, as a refused `ollama stop` says it ("" where it is not)."""
    if e.pinned:
        return f"{e.where} is pinned (pinned = true), so it stays loaded"
    if routes:
        return "it is --router's model, which stays loaded"
    if alone:
        return ("it is this server's only model, which stays loaded unless `hearth serve` is given --keep-alive "
                "(then it unloads when idle that long, or when asked)")
    return ""


def _resolve(e: ModelEntry) -> Path:
    from hearth.loader.resolve import resolve_model

    try:
        return resolve_model(e.model)
    except HearthError as err:
        if e.where.startswith("MODEL ") and repr(e.model) in str(err):  # it names the argument already
            raise HearthError(f"MODEL: {err}") from None
        raise HearthError(f"{e.where}: model: {err}") from None


def check_pooling(pooling: str | None, facts, where: str) -> None:
    """--pooling fits every model served: cls pools an encoder's first token (a decoder's first has read nothing
    else); a reranker scores pairs with its classification head, which no pooling replaces."""
    from hearth.engine.pairs import a_reranker

    if pooling == "none":  # llama-server's per-token rows (its /embedding's); every hearth embedding is pooled
        raise HearthError("--pooling none: hearth has no per-token embeddings (llama-server's /embedding rows with "
                          "--pooling none); pool them mean, cls (an encoder's first token) or last")
    if pooling is not None and reranks(facts):
        raise HearthError(f"--pooling {pooling}: {a_reranker(where)}; serve it without --pooling")
    if pooling == "cls" and not facts.embeds_only:
        raise HearthError(f"--pooling cls: {where} is a decoder, whose first token has read nothing else: pool it "
                          "mean or last")


def reranks(facts) -> bool:
    """A reranker: its config's pooling (hearth.models.registry.model_config, which refuses a decoder's
    pooling_type 4), not its header's number alone."""
    return facts.pooling == "rank"


def _footprint(e: ModelEntry, path: Path, args: argparse.Namespace, draft: Path | None):
    """(the planner's footprint, the header's facts) of one model's file, read once."""
    from hearth.api.served import file_facts
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.serving import served_footprint
    from hearth.models.registry import embeds_only, model_config

    try:
        g = GGUFFile(path)
        return served_footprint(g, e.context or args.max_model_len, e.kv_cache_dtype or args.kv_cache_dtype,
                                args.max_num_seqs, args.kv_cache_memory_gb, args.max_num_batched_tokens,
                                args.num_kv_blocks, None if draft is None else GGUFFile(draft),
                                rope_scaling(args)), file_facts(g, embeds_only(g.arch), model_config(g).pooling)
    except HearthError as err:
        raise HearthError(f"{e.where}: {err}") from None


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
        self.default_threads = args.threads or torch.get_num_threads()

    def __call__(self, spec):
        from functools import partial

        import torch

        from hearth.api.media_fetch import FetchPolicy
        from hearth.api.media_parts import MAX_IMAGES, Vision
        from hearth.api.served import ServedModel
        from hearth.commands.serve import engine_args
        from hearth.engine.async_engine import AsyncEngine
        from hearth.llm import LLM
        from hearth.llm_vision import reads_images

        a = self.args
        (entry, path, speculation), mmproj = self.by_id[spec.name], self.mmproj.get(spec.name, "")
        threads = entry.threads or self.default_threads
        llm = LLM(str(path), **{**engine_args(a), "max_model_len": entry.context or a.max_model_len,
                                "kv_cache_dtype": entry.kv_cache_dtype or a.kv_cache_dtype, "threads": threads,
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
        vision = None
        if llm.vision_config is not None:  # its prepares counted for /metrics, as the runner counts its encodes
            from hearth.media.images import prepare_image

            prepare = llm.vision_stats.preparing(partial(prepare_image, cfg=llm.vision_config))
            vision = Vision(llm.vision_config, prepare=prepare, path=llm.config.mmproj, fetch_policy=FetchPolicy(
                tuple(getattr(a, "allowed_media_domains", None) or ()), bool(getattr(a, "allow_private_media_urls", False))),
                max_images=MAX_IMAGES if getattr(a, "limit_mm_per_prompt", None) is None else a.limit_mm_per_prompt)
        served = ServedModel.from_llm(llm, spec.names, engine, spec.file_names,
                                      lora_names(a) if spec.name == self.first else None, vision=vision)
        served.vision_stats = llm.vision_stats
        return served


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
