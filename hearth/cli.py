"""`hearth SUBCOMMAND ...`: each subcommand is a module in hearth.commands with
add_arguments(parser) and main(args) -> int."""

from __future__ import annotations

import argparse
import importlib
import sys

from hearth.errors import HearthError

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("hearth.commands.run", "chat with a model in the terminal, or answer one prompt"),
    "pull": ("hearth.commands.pull", "download a model (catalog name or org/repo:file.gguf) and print its path"),
    "models": ("hearth.commands.models", "list known models and which are downloaded"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hearth", description="Local-first LLM inference for GGUF models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except HearthError as e:
        print(f"hearth: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
