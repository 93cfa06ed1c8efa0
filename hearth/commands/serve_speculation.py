"""Which speculation each model of `hearth serve` runs: a --models entry's own `speculative_config`
(a table of vLLM's keys, as --speculative-config takes them; false: none), else the command line's
(--speculative-config, -md, --spec-draft-n-max).

A draft model speculates only for a model whose vocabulary it shares (its drafts are token ids the
target scores). With several models the command line's draft applies to the models it fits and the
others are served without speculation, one startup line each saying why (every request to them got a
503 before). A draft an entry names itself, or the command line's with one model, that does not fit
stays one clear error line."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hearth.errors import HearthError

ENTRY_FIELD = "a table of speculative_config keys (as --speculative-config), or false: none for this model"
"""What a models-file entry's speculative_config must be."""


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


@dataclass(frozen=True, slots=True)
class Speculation:
    config: dict | None
    """What the model's LLM gets as speculative_config (None: no speculation)."""
    draft: Path | None = None
    """The draft model's file (method draft): its weights and K/V count in the model's footprint."""


def per_model(given: list, paths: list[Path], ids: list[str], flags: dict | None) -> list[Speculation]:
    """Per entry (ModelEntry, its file, its id) the speculation it runs; flags: the command line's
    config (hearth.commands.serve.speculative_config)."""
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
