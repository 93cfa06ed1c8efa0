"""`hearth SUBCOMMAND ...`: each subcommand is a module in hearth.commands with
add_arguments(parser) and main(args) -> int."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import platform
import select
import sys
from importlib import metadata

from hearth.errors import HearthError

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("hearth.commands.serve", "serve a model over OpenAI-, Anthropic- and Ollama-compatible HTTP, with a chat page"),
    "cluster": ("hearth.commands.cluster", "serve a model from N engine replicas on Ray behind one API (the cluster extra: Ray)"),
    "run": ("hearth.commands.run", "chat with a model in the terminal, or answer one prompt (a base model completes the text)"),
    "run-batch": ("hearth.commands.run_batch", "answer an OpenAI batch file (JSONL) in process, as vllm run-batch"),
    "pull": ("hearth.commands.pull", "download a model (catalog name or org/repo:file.gguf) and print its path"),
    "models": ("hearth.commands.models", "list known models and which are downloaded"),
    "plan": ("hearth.commands.plan", "will a model fit, how long a context, how many users, how fast at best"),
    "bench": ("hearth.commands.bench", "measure latency, throughput vs the decode ceiling and greedy agreement"),
    "doctor": ("hearth.commands.doctor", "which CPU tier runs and why, memory bandwidth, models on disk: for bug reports"),
    "eval": ("hearth.commands.eval", "perplexity over a text (llama-perplexity's method), with any KV cache format; BFCL tool calling"),
}
# command -> its subcommands (subcommand -> (module, one-line help)): each parses with its own parser,
# so `hearth eval tools --help` lists tools' options only (as `ollama` and `git` subcommands do)
SUBCOMMANDS: dict[str, dict[str, tuple[str, str]]] = {
    "cluster": {
        "serve": ("hearth.commands.cluster", "start N engine replicas on Ray and one HTTP front end over them"),
    },
    "eval": {
        "perplexity": ("hearth.commands.eval", "perplexity over a text (llama-perplexity's method), with any KV "
                                               "cache format"),
        "tools": ("hearth.commands.eval_tools", "BFCL v4 tool calling through a hearth server (or one at --url); "
                                                "--compare, --sweep over saved runs"),
    },
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return ("usage: hearth COMMAND [ARGS]\n       hearth -V | --version\n\nLocal-first LLM inference for GGUF models."
            "\n\ncommands:\n" + "\n".join(lines))


def version() -> str:
    """One line, as `vllm --version` and `ollama --version` print: this hearth's version and the
    installed torch's (from its metadata: importing torch takes seconds)."""
    from hearth import __version__

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "not installed"
    return f"hearth {__version__} (torch {torch}, python {platform.python_version()})"


class _Parser(argparse.ArgumentParser):
    """No abbreviated options: the peers' own short flags read as other hearth flags (llama-server's -n as -np,
    its slots; llama-cli's -s SEED as -sys, the system prompt; --temp is spelled out where it is meant).
    A short option's attached value (-c4096, -t4) still parses."""

    def _get_option_tuples(self, option_string):
        return [t for t in super()._get_option_tuples(option_string) if len(t[1]) == 2]

    def error(self, message: str):
        """One line, as every other CLI error here: argparse printed the whole usage first (30 lines for
        run, 60 for serve) above the line that said what was wrong. A mistyped flag names its closest one."""
        print(f"{self.prog}: error: {message}{_closest_flag(message, self._option_string_actions)} "
              f"({self.prog} --help lists the options)", file=sys.stderr)
        raise SystemExit(2)


def _closest_flag(message: str, flags) -> str:
    """"; did you mean --temp?" for argparse's "unrecognized arguments: --tmep 0.5", else ""."""
    if not message.startswith("unrecognized arguments: "):
        return ""
    first = message.removeprefix("unrecognized arguments: ").split()[0].split("=", 1)[0]
    # a typo only: --tmep is --temp's (0.833), --top_k --top-k's; --min-keep is not --min-p's (0.824)
    close = difflib.get_close_matches(first, [f for f in flags if f.startswith("--")], n=1, cutoff=0.83)
    return f"; did you mean {close[0]}?" if first.startswith("--") and close else ""


def command_parser(name: str, sub: str | None = None) -> argparse.ArgumentParser:
    """The parser of `hearth NAME` (or of `hearth NAME SUB`, a command with subcommands)."""
    module, help_text = SUBCOMMANDS[name][sub] if sub is not None else COMMANDS[name]
    parser = _Parser(prog=f"hearth {name}" + (f" {sub}" if sub else ""), description=help_text)
    importlib.import_module(module).add_arguments(parser)
    return parser


def _sub_usage(name: str) -> str:
    subs = SUBCOMMANDS[name]
    width = max(map(len, subs))
    lines = [f"  {sub:<{width}}  {help_text}" for sub, (_, help_text) in subs.items()]
    return (f"usage: hearth {name} {{{','.join(subs)}}} [ARGS]\n\n{COMMANDS[name][1]}\n\n{name} commands "
            f"(hearth {name} COMMAND --help for its options):\n" + "\n".join(lines))


def _split(name: str, rest: list[str]) -> tuple[str | None, list[str]] | int:
    """(the subcommand, its arguments) for a command with subcommands; an exit code where usage was printed."""
    if name not in SUBCOMMANDS:
        return None, rest
    if not rest:
        print(_sub_usage(name), file=sys.stderr)
        return 2
    if rest[0] in ("-h", "--help"):  # exits as argparse's --help does
        print(_sub_usage(name))
        raise SystemExit(0)
    if rest[0] not in SUBCOMMANDS[name]:
        later = next((a for a in rest if a in SUBCOMMANDS[name]), None)
        if rest[0].startswith("-") and later is not None:  # `hearth eval --limit 2 tools`, as git takes no such order
            moved = " ".join([later, *(a for a in rest if a is not later)])
            print(f"hearth: error: options go after the {name} command: hearth {name} {moved}", file=sys.stderr)
        else:
            print(f"hearth: error: unknown {name} command {rest[0]!r}; {name} commands: "
                  f"{', '.join(SUBCOMMANDS[name])}", file=sys.stderr)
        return 2
    return rest[0], rest[1:]


def main(argv: list[str] | None = None) -> int:
    """Run a command. A reader that closed stdout early (`hearth --help | head -1`) ends it quietly,
    as Python's docs advise for SIGPIPE: stdout goes to devnull so the exit's flush raises no more.
    Any other broken pipe (a socket or pipe a command wrote to) is one error line, as the others."""
    try:
        try:
            return _run(argv)
        finally:  # what is still buffered fails here, inside the try (argparse's --help exits through it too)
            sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C while a command's modules import (seconds: torch) was a traceback
        return 130
    except BrokenPipeError as e:
        if not _stdout_closed():
            print(f"hearth: error: {e} (a connection or pipe hearth wrote to was closed)", file=sys.stderr)
            return 1
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


def _stdout_closed() -> bool:
    """Is stdout a pipe or socket whose reader has gone? poll flags POLLERR on such a write end
    (Linux, macOS, BSDs). No poll (Windows), or a stdout with no descriptor (a caller's capture): no."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "-v", "--version", "version"):  # `version`, `-v`, `help`: ollama's spellings
        print(version())
        return 0
    if argv[0] == "help":
        return main([*argv[1:2], "--help"] if argv[1:] else ["--help"])
    name = argv[0]
    if name not in COMMANDS:
        from hearth.commands.foreign_flags import FOREIGN_COMMANDS

        close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.75)  # serv, server, rnu
        hint = (f" ({FOREIGN_COMMANDS[name]})" if name in FOREIGN_COMMANDS
                else f" (did you mean {close[0]}?)" if close else "")
        print(f"hearth: error: unknown command {name!r}{hint}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    split = _split(name, argv[1:])
    if isinstance(split, int):
        return split
    sub, rest = split
    from hearth.commands.foreign_flags import foreign_flag
    from hearth.commands.peer_values import PeerFlagError, translate

    # one parser per command, parsed intermixed so options may sit between positionals
    parser = command_parser(name, sub)
    taken = set(parser._option_string_actions)
    options = rest[:rest.index("--")] if "--" in rest else rest
    if "--version" in options and "--version" not in taken:  # `llama-server --version`, `vllm serve --version`
        print(version())
        return 0
    try:  # a pasted llama-server line: -ngl 99, -fa on, -tp 1 ... run, each said in one line
        translated = translate(rest, taken)
    except PeerFlagError as e:
        print(f"hearth: error: {e}", file=sys.stderr)
        return 2
    if (why := foreign_flag(translated.argv, taken)) is not None:  # llama.cpp's -sm, ...
        print(f"hearth: error: {why}", file=sys.stderr)
        return 2
    for note in translated.notes:
        print(f"hearth: warning: {note}", file=sys.stderr)
    rest = translated.argv
    args = parser.parse_intermixed_args(rest)
    module = SUBCOMMANDS[name][sub][0] if sub is not None else COMMANDS[name][0]
    from hearth.commands.logs import configure_logging
    from hearth.loader.store import check_home

    configure_logging("warning", terminal=True)  # hearth's log warnings as its other lines; serve sets its own
    try:
        check_home()  # every command keeps models or caches there: an unusable one is one line, before a build
        return int(importlib.import_module(module).main(args) or 0)
    except HearthError as e:
        print(f"hearth: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
