"""The models `hearth serve` serves: MODEL arguments and/or a `--models` TOML file (hearth.commands.models_file)
-> ModelSpecs (friendly ids, aliases, the file's names, the planner's footprint) and the loader the server's pool
calls (hearth.commands.serve_loader)."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path

from hearth.commands.lora_flags import lora_bases, lora_files, lora_names
from hearth.commands.models_file import ModelEntry, check_kv, read_models_file
from hearth.commands.rope_flags import rope_scaling
from hearth.commands.serve_loader import Loader, served_vision
from hearth.errors import HearthError


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
    check_kv(args.kv_cache_dtype, "--kv-cache-dtype")  # the flag's fault, before a model is blamed for it
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
    mmprojs = [e.mmproj or (getattr(args, "mmproj", "") if i == 0 else "") for i, e in enumerate(given)]
    specs = []
    for e, path, n, f, router, spec, mmproj in zip(given, paths, names, files, routers, speculation, mmprojs):
        fp, facts = _footprint(e, path, args, spec.draft, mmproj)
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
                               math.inf if keep is None else keep, _pinned_why(e, alone, n[0] in routing),
                               lora_count=0 if specs else len(getattr(args, "lora_adapters", None) or []),
                               kv_disk=bool(getattr(args, "kv_disk_dir", ""))))
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
        raise _blamed(e, err, e.model, "model: ") from None


def _blamed(e: ModelEntry, err: HearthError, named: str, field: str = "") -> HearthError:
    """err with the entry it is about named once: a MODEL argument the message already names (`named`: as
    given, or the file it resolved to) is `MODEL: ...`, not `MODEL '/tmp/x.gguf': /tmp/x.gguf: not a GGUF file`."""
    if e.where.startswith("MODEL ") and named in str(err):
        return HearthError(f"MODEL: {err}")
    return HearthError(f"{e.where}: {field}{err}")


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


def _footprint(e: ModelEntry, path: Path, args: argparse.Namespace, draft: Path | None, mmproj: str = ""):
    """(the planner's footprint, the header's facts) of one model's file, read once; the facts with how it takes
    images (FileFacts.vision: its mmproj's header under the server's flags, as its load will read them)."""
    from hearth.api.served import file_facts
    from hearth.llm_vision import vision_config
    from hearth.loader.gguf_loader import GGUFFile
    from hearth.memory.serving import served_footprint
    from hearth.models.registry import embeds_only, model_config

    try:
        g = GGUFFile(path)
        encoder = embeds_only(g.arch)
        facts = file_facts(g, encoder, model_config(g), served_vision(args, vision_config(mmproj, encoder), mmproj))
        return served_footprint(g, e.context or args.max_model_len, e.kv_cache_dtype or args.kv_cache_dtype,
                                args.max_num_seqs, args.kv_cache_memory_gb, args.max_num_batched_tokens,
                                args.num_kv_blocks, None if draft is None else GGUFFile(draft),
                                rope_scaling(args)), facts
    except HearthError as err:
        raise _blamed(e, err, str(path)) from None
