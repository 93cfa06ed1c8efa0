"""The speculative-decoding flags of `hearth serve` and `hearth run` (--speculative-config, -md,
--spec-draft-n-max and llama-server's other spellings) -> one speculative_config, and which
speculation each model of `hearth serve` runs: a --models entry's own `speculative_config` (a table
of vLLM's keys, as --speculative-config takes them; false: none), else the command line's.

A draft model speculates only for a model whose vocabulary it shares (its drafts are token ids the
target scores). With several models the command line's draft applies to the models it fits and the
others are served without speculation, one startup line each saying why (every request to them got a
503 before). A draft an entry names itself, or the command line's with one model, that does not fit
stays one clear error line."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hearth.errors import HearthError

ENTRY_FIELD = "a table of speculative_config keys (as --speculative-config), or false: none for this model"
"""What a models-file entry's speculative_config must be."""


SPEC_TYPES = {"draft-simple": "draft", "draft-mtp": "mtp", "ngram-simple": "ngram", "ngram-mod": "suffix",
              "ngram-cache": "suffix"}
"""llama-server's --spec-type values (common/speculative.cpp) hearth runs, as speculative_config methods: its
draft model (with -md), the model's own MTP head, n-gram prompt lookup; its n-grams kept across requests
(ngram-mod's shared pool, ngram-cache's) as hearth's cross-request suffix cache."""


def entry_config(value, where: str, base: Path) -> dict | bool:
    """A models-file entry's speculative_config, validated as the flag's is (one line naming the entry):
    the record's keys as a dict, or False; a relative draft .gguf path is the models file's."""
    from hearth.spec_decode.config import InvalidSpeculativeConfig, SpeculativeConfig

    if value is False:
        return False
    try:
        spec = SpeculativeConfig.parse(value)
    except InvalidSpeculativeConfig as e:
        raise HearthError(f"{where}: {e}") from None
    model = spec.model
    if model.endswith(".gguf") and not Path(model).expanduser().is_absolute() and (base / model).is_file():
        spec = replace(spec, model=str(base / model))
    return asdict(spec)


class Spelled(argparse.Action):
    """Stores the value and, in `{dest}_flag`, the flag as the user typed it (--draft-max, -md): an
    error names what they wrote, not the long spelling (spelled())."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", option_string)


def spelled(args: argparse.Namespace, dest: str, default: str) -> str:
    """The flag that set `dest` as typed (a Spelled action's); `default` where none did."""
    return getattr(args, f"{dest}_flag", None) or default


def add_speculation_arguments(p: argparse.ArgumentParser) -> None:
    """The flags, one group (serve's and run's alike)."""
    spec = p.add_argument_group("speculative decoding")
    spec.add_argument("--speculative-config", default=None, metavar="JSON",
                      help='vLLM\'s speculative config, e.g. \'{"method": "ngram", "num_speculative_tokens": 4, '
                           '"prompt_lookup_min": 2, "prompt_lookup_max": 5}\', or \'{"method": "suffix"}\' for a '
                           "cache of earlier requests' text (default: off)")
    # llama-server's spellings (common/arg.cpp): --draft-max, --draft and --draft-n set the same n_max;
    # its --draft-min and --draft-p-min have no hearth knob (the cost-aware policy sizes each draft)
    spec.add_argument("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n", dest="spec_draft_n_max", type=int,
                      default=None, metavar="N", action=Spelled,
                      help="llama-server's spellings: up to N draft tokens per step (num_speculative_tokens): the "
                           "draft model's K with -md, else n-gram prompt lookup's")
    spec.add_argument("--spec-type", default=None, choices=sorted(SPEC_TYPES), action=Spelled,
                      help="llama-server's spelling of the method: draft-mtp drafts with the model's own MTP head "
                           "(method mtp), draft-simple with -md's draft model, ngram-simple by prompt lookup, "
                           "ngram-mod and ngram-cache from earlier requests' text (method suffix)")
    spec.add_argument("--model-draft", "-md", default=None, metavar="PATH", action=Spelled,
                      help="llama-server's spelling: speculative decoding with this draft model (a catalog "
                           "name or .gguf; sets method draft and model). With several models, those whose "
                           "vocabulary it does not share are served without it (a --models entry's own "
                           "speculative_config overrides the flags)")


def speculative_config(args: argparse.Namespace) -> dict | None:
    """--speculative-config, with --spec-draft-n-max (or its llama-server spellings) as its
    num_speculative_tokens and --model-draft as method draft with that model (checked here, before the
    model loads: a bad value is one line naming the field). A flag that sets a key the JSON gives
    otherwise is one line naming both (-md used to win over an ngram config without a word)."""
    from hearth.spec_decode.config import SpeculativeConfig, given_keys

    given = None if args.speculative_config is None else given_keys(args.speculative_config)
    spec = SpeculativeConfig.parse(given)
    over = {}
    if args.spec_draft_n_max is not None:
        if args.spec_draft_n_max < 1:
            raise HearthError(f"{k_flag(args)} must be at least 1 (draft tokens per step), got {args.spec_draft_n_max}")
        over["num_speculative_tokens"] = args.spec_draft_n_max
    if getattr(args, "model_draft", None):
        over.update(method="draft", model=args.model_draft)
    if getattr(args, "spec_type", None):
        method = SPEC_TYPES[args.spec_type]
        if over.get("method", method) != method:
            raise HearthError(f"--spec-type {args.spec_type} runs method {method} but "
                              f"{spelled(args, 'model_draft', '--model-draft')} runs method draft: give one of them")
        over["method"] = method
    if not over:
        return None if spec is None else _found(_as_dict(spec), args)
    if spec is not None:
        _flags_agree(spec, given, over, args)
    if over.get("method") == "draft" and "model" not in over and (spec is None or spec.model is None):
        # was 'speculative_config.model is required with method "draft"', a key the user never typed
        raise HearthError(f"--spec-type {args.spec_type} drafts with a draft model: add -md MODEL (a catalog name "
                          "or a .gguf)")
    base = _as_dict(spec) if spec is not None else {"method": "ngram"}
    return _found(_as_dict(SpeculativeConfig.parse({**base, **over})), args)


def _found(config: dict, args: argparse.Namespace) -> dict:
    """config, once its draft model is found as the target is (a catalog name, a .gguf, a hub file): a wrong one
    was `speculative_config.model ...`, a key the user never typed, and `hearth run` said it after the target
    loaded. The error names the flag as typed (-md, --model-draft) or the JSON's key."""
    from hearth.loader.resolve import resolve_model

    if config["method"] != "draft":
        return config
    model = config["model"]
    flag = (spelled(args, "model_draft", "--model-draft") if getattr(args, "model_draft", None)
            else "--speculative-config's model")
    try:
        resolve_model(model)
    except HearthError as e:
        raise HearthError(f"{flag}: {e}" if model in str(e) else f"{flag} {model!r}: {e}") from None
    return config


def _flags_agree(spec, given: dict, over: dict, args: argparse.Namespace) -> None:
    """The keys -md and --spec-draft-n-max set are the config's own where it gives them (the same
    draft model under another name too); each flag named as typed."""
    md = spelled(args, "model_draft", "--model-draft")
    if getattr(args, "spec_type", None) and over["method"] != spec.method:
        raise HearthError(f"--spec-type {args.spec_type} runs method {over['method']!r} but --speculative-config "
                          f"gives method {spec.method!r}: give one of them")
    if "model" in over and spec.method != "draft":
        raise HearthError(f"{md} runs method draft but --speculative-config gives method "
                          f"{spec.method!r}: give one of them")
    if "model" in over and not _same_model(spec.model, over["model"]):
        raise HearthError(f"{md} {over['model']!r} and --speculative-config's model {spec.model!r} "
                          "differ: give one of them")
    k, theirs = over.get("num_speculative_tokens"), given.get("num_speculative_tokens")
    if k is not None and theirs is not None and theirs != k:
        raise HearthError(f"{k_flag(args)} {k} and --speculative-config's num_speculative_tokens "
                          f"{theirs} differ: give one of them")


def _same_model(a: str, b: str) -> bool:
    """a and b name the same file (a catalog name and its path, say), found without a download."""
    from hearth.loader.resolve import resolve_model

    if a == b:
        return True
    try:
        return resolve_model(a, download=False, progress=False) == resolve_model(b, download=False, progress=False)
    except HearthError:
        return False


def _as_dict(spec) -> dict:
    return asdict(spec)


def k_flag(args: argparse.Namespace) -> str:
    """Where the command line's K (num_speculative_tokens) came from, as an error names it (a default K
    is lowered to fit the context, never an error)."""
    if args.spec_draft_n_max is not None:
        return spelled(args, "spec_draft_n_max", "--spec-draft-n-max")
    return "--speculative-config's num_speculative_tokens"


def check_drafts_fit(config: dict | None, context: int, where: str) -> None:
    """K given at or above the context is one line naming where K came from (before the model loads;
    LLM checks too); a default K is lowered to fit when the model loads (SpeculativeConfig.fit_context)."""
    from hearth.spec_decode.config import check_drafts_fit as drafts_fit

    if config is not None and config["num_speculative_tokens"] is not None:
        drafts_fit(config["num_speculative_tokens"], context, where)


@dataclass(frozen=True, slots=True)
class Speculation:
    config: dict | None
    """What the model's LLM gets as speculative_config (None: no speculation)."""
    draft: Path | None = None
    """The draft model's file (method draft): its weights and K/V count in the model's footprint."""


def per_model(given: list, paths: list[Path], ids: list[str], flags: dict | None) -> list[Speculation]:
    """Per entry (ModelEntry, its file, its id) the speculation it runs; flags: the command line's
    config (speculative_config)."""
    files = _Files()
    out = []
    for e, path, name in zip(given, paths, ids):
        own = e.speculative_config
        if own is False or (own is None and flags is None):
            out.append(Speculation(None))
            continue
        config = flags if own is None else own
        draft = files.draft(config, "" if own is None else f"{e.where}: ")
        why = files.misfit(path, draft) if draft is not None and (own is not None or len(given) > 1) else ""
        if why and own is not None:
            raise HearthError(f"{e.where}: speculative_config.model: {why}")
        if why:
            print(f"hearth: {name}: served without speculative decoding: the draft model {config['model']!r}: "
                  f"{why}; give it its own speculative_config in a --models file", file=sys.stderr, flush=True)
            out.append(Speculation(None))
            continue
        out.append(Speculation(config, draft))
    return out


class _Files:
    """Draft files and vocabularies, each resolved or read once."""

    def __init__(self):
        self._paths: dict[str, Path] = {}
        self._tokens: dict[Path, list[str]] = {}

    def draft(self, config: dict, where: str) -> Path | None:
        from hearth.loader.resolve import resolve_model

        if config["method"] != "draft":
            return None
        model = config["model"]
        if model not in self._paths:
            try:
                self._paths[model] = resolve_model(model)
            except HearthError as e:
                raise HearthError(f"{where}speculative_config.model {model!r}: {e}") from None
        return self._paths[model]

    def misfit(self, target: Path, draft: Path) -> str:
        """"" where draft shares target's vocabulary, else how they differ (as hearth.llm says it)."""
        from hearth.loader.vocab import vocab_difference

        differ = vocab_difference(self._read(target), self._read(draft))
        return f"vocabulary differs from the target's {differ}" if differ else ""

    def _read(self, path: Path) -> list[str]:
        from hearth.loader.gguf_loader import GGUFFile
        from hearth.loader.vocab import read_tokens

        if path not in self._tokens:
            self._tokens[path] = read_tokens(GGUFFile(path))
        return self._tokens[path]
