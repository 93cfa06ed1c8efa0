"""`hearth serve --models FILE`: a TOML file of [[models]] entries -> ModelEntry records, each field
checked (hearth.commands.serve_models turns them into the pool's ModelSpecs).

    [[models]]
    name = "coder"                 # the id clients use (default: the catalog name or the file's stem)
    model = "qwen2.5-coder-1.5b"   # catalog name, .gguf path (relative to this file) or org/repo:file.gguf
    aliases = ["gpt-4o-mini"]      # more names for it
    context = 8192                 # default: --max-model-len, else the model's own
    kv_cache_dtype = "q8_0"        # default: --kv-cache-dtype
    threads = 2                    # its engine thread's CPU threads (default: --threads, else all cores;
                                   #   -1: all cores, as llama.cpp's -t -1)
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

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from hearth.api.durations import seconds
from hearth.commands.serve_speculation import ENTRY_FIELD, entry_config
from hearth.commands.threads_flag import LLAMA_DEFAULT
from hearth.errors import HearthError


@dataclass(frozen=True)
class ModelEntry:
    model: str
    name: str = ""
    aliases: tuple[str, ...] = ()
    context: int = 0
    kv_cache_dtype: str = ""
    threads: int = 0
    """Its CPU threads; 0: --threads's; -1 (LLAMA_DEFAULT): every core, as the flag's -1 (serve_loader)."""
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
    "threads": (lambda v: _count(v) or v == LLAMA_DEFAULT, "a whole number of threads (0: --threads's; -1: all cores)"),
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
        data = tomllib.loads(p.read_text(encoding="utf-8-sig"))  # a BOM was "Invalid statement (at line 1, column 1)"
    except OSError as e:
        raise HearthError(f"--models {path}: cannot read it ({e.strerror or e})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise HearthError(f"--models {path}: not valid TOML: {e}") from None
    extra = sorted(set(data) - {"models"})
    if extra:
        raise HearthError(f"{p.name}: unknown table or key {extra[0]!r}: list models as [[models]] entries")
    entries = data.get("models")
    if isinstance(entries, dict):  # [models] or [models.coder]: TOML's one table, not its array of tables
        table = _table(entries)
        named = "" if table == "[models]" else " with its `name`"
        raise HearthError(f"{p.name}: {table} is one table: write each model as an [[models]] entry (double "
                          f"brackets){named}")
    if not isinstance(entries, list) or not entries:
        raise HearthError(f"{p.name}: no models: add [[models]] entries with at least `model = ...`")
    return [_entry(raw, f"{p.name}: models[{i}]", p.parent) for i, raw in enumerate(entries, 1)]


def _table(models: dict) -> str:
    """The table header the user wrote: [models], or [models.NAME] when every key holds a table."""
    if models and all(isinstance(v, dict) for v in models.values()):
        return f"[models.{next(iter(models))}]"
    return "[models]"


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
        check_kv(raw["kv_cache_dtype"], f"{where}: kv_cache_dtype")
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


def check_kv(name: str, where: str) -> None:
    from hearth.kvstore.codecs import get_codec

    try:
        get_codec(name)  # the formats the engine serves (the planner knows more)
    except HearthError as e:
        raise HearthError(f"{where}: {e}") from None
