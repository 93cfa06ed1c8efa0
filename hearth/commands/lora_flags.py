"""LoRA adapter flags on `hearth serve` and `hearth run`, in llama-server's spelling (--lora FILE,
--lora-scaled FILE SCALE, --lora-init-without-apply; ids in the order given) and vLLM's (--enable-lora,
--lora-modules NAME=FILE: a request selects the adapter by sending NAME as its `model`) ->
EngineConfig.lora. With several models the adapters are the first model's."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hearth.errors import HearthError


class _Append(argparse.Action):
    """Every adapter flag appends (path, scale, name) to one list, so ids follow the command line's order."""

    def __call__(self, parser, namespace, values, option_string=None):
        adapters = list(getattr(namespace, "lora_adapters", None) or [])
        if option_string == "--lora-scaled":
            path, scale = values
            try:
                scale = float(scale)
            except ValueError:
                parser.error(f"--lora-scaled {path} {scale}: SCALE must be a number")
            adapters.append((path, scale, None))
        elif option_string == "--lora-modules":
            bases = dict(getattr(namespace, "lora_bases", None) or {})
            for module in values:
                name, path = _module(module) or (None, None)
                if not name or not path:
                    parser.error(f"--lora-modules takes NAME=FILE or vLLM's JSON {{\"name\": ..., \"path\": ...}}, "
                                 f"not {module!r}")
                adapters.append((path, 1.0, name))
                if base := _base(module):
                    bases[name] = base
            namespace.lora_bases = bases
        else:  # llama-server takes a comma-separated list too (a file whose name has a comma stays whole)
            paths = [values] if "," not in values or Path(values).exists() else values.split(",")
            adapters += [(path, 1.0, None) for path in paths]
        namespace.lora_adapters = adapters


def _base(text: str) -> str | None:
    """vLLM's JSON form's base_model_name: the served model the adapter belongs to (None: not given)."""
    if not text.lstrip().startswith("{"):
        return None
    base = json.loads(text).get("base_model_name")
    return base if isinstance(base, str) and base else None


def lora_bases(args: argparse.Namespace) -> dict[str, str]:
    """--lora-modules NAME -> the base_model_name its JSON form gave."""
    return dict(getattr(args, "lora_bases", None) or {})


def _module(text: str) -> tuple[str, str] | None:
    """(name, path) of one --lora-modules value: NAME=FILE, or vLLM's JSON form {"name": ..., "path": ...}."""
    if text.lstrip().startswith("{"):
        try:
            d = json.loads(text)
        except json.JSONDecodeError:
            return None
        name, path = d.get("name"), d.get("path")
        return (name, path) if isinstance(name, str) and isinstance(path, str) else None
    name, sep, path = text.partition("=")
    return (name, path) if sep else None


def add_lora_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LoRA adapters (llama.cpp's GGUF adapters, convert_lora_to_gguf.py)")
    g.add_argument("--lora", action=_Append, metavar="FILE", dest="lora_adapters",
                   help="apply this adapter at scale 1 (FILE,FILE,...: several); repeat for more (ids 0, 1, ... in the "
                        "order given)")
    g.add_argument("--lora-scaled", action=_Append, nargs=2, metavar=("FILE", "SCALE"), dest="lora_adapters",
                   help="apply this adapter at SCALE (x alpha/rank, as llama.cpp)")
    g.add_argument("--lora-modules", action=_Append, nargs="+", metavar="NAME=FILE", dest="lora_adapters",
                   help="vLLM's: adapters a request selects by sending NAME as its model (at scale 1; the "
                        "server's own model runs without them)")
    g.add_argument("--lora-init-without-apply", action="store_true",
                   help="load the adapters at scale 0 (POST /lora-adapters or a request's lora sets them)")
    g.add_argument("--enable-lora", action="store_true", help="vLLM's switch; adapters need none here")
    # vLLM's caps on the slots it preallocates for adapters: hearth sizes each adapter as it loads, so a command
    # line written for vLLM runs unchanged (they were "unrecognized arguments")
    g.add_argument("--max-loras", type=int, default=None, metavar="N",
                   help="vLLM's most adapters in one batch; hearth has no such cap (any number runs in a step)")
    g.add_argument("--max-lora-rank", type=int, default=None, metavar="R",
                   help="vLLM's largest adapter rank; hearth has no such cap (an adapter of any rank loads)")


def lora_entries(args: argparse.Namespace) -> list[tuple[str, float]]:
    """EngineConfig.lora: (path, scale) per adapter; vLLM's modules and --lora-init-without-apply at 0."""
    off = getattr(args, "lora_init_without_apply", False)
    return [(path, 0.0 if off or name is not None else scale)
            for path, scale, name in getattr(args, "lora_adapters", None) or []]


def lora_names(args: argparse.Namespace) -> dict[str, int]:
    """--lora-modules' NAME -> the adapter's id."""
    names = {}
    for j, (_, _, name) in enumerate(getattr(args, "lora_adapters", None) or []):
        if name is not None:
            if name in names:
                raise HearthError(f"--lora-modules names {name!r} twice")
            names[name] = j
    return names


def lora_files(args: argparse.Namespace) -> dict[str, str]:
    """--lora-modules' NAME -> the adapter's file as given (its /v1/models entry's `root`, as vLLM's)."""
    return {name: path for path, _, name in getattr(args, "lora_adapters", None) or [] if name is not None}
