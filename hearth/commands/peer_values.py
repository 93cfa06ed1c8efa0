"""Other engines' flags whose value asks for nothing hearth would do otherwise (llama-server's -ngl 99 on a
machine hearth runs on the CPU, vLLM's --tensor-parallel-size 1, its defaults): a pasted command line runs,
and each such flag is one warning line saying what hearth does instead; a value that asks for what hearth
cannot do (-tp 2) stays a one-line error naming the flag. Some map onto a hearth flag (-ctk/-ctv ->
--kv-cache-dtype, --slot-save-path -> --kv-disk-dir). Flags hearth takes under their own names are the
parsers' aliases; flags hearth has no use for at all are hearth.commands.foreign_flags' errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


class PeerFlagError(Exception):
    """A peer flag's value asks for what hearth cannot do: the one-line error (naming the flag)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """What a peer flag becomes: hearth's own arguments in its place, and the warning line (None: silent)."""

    args: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True, slots=True)
class PeerFlag:
    """takes: "none" (a switch), "one" (a value) or a tuple of the words an optional value may be (-fa [on|off]).
    rule(flag, value, taken) -> Taken, or raises PeerFlagError; taken: the command's own flags."""

    takes: str | tuple[str, ...]
    rule: Callable[[str, str | None, set[str]], Taken]


def _ignored(does: str) -> Callable[[str, str | None, set[str]], Taken]:
    """Nothing for hearth to do, whatever the value: say what hearth does instead."""
    return lambda flag, value, taken: Taken(note=f"{_spelled(flag, value)} is {does}; ignored")


def _only(default: str, does: str, number: bool = False) -> Callable[[str, str | None, set[str]], Taken]:
    """The peer's default value is hearth's way (ignored, with a line); any other asks for what hearth cannot do."""
    def rule(flag: str, value: str | None, taken: set[str]) -> Taken:
        same = _number(value) == float(default) if number else (value or "").lower() == default
        if not same:
            raise PeerFlagError(f"{_spelled(flag, value)}: {flag} is {does}")
        return Taken(note=f"{_spelled(flag, value)} is {does}; ignored")
    return rule


def _number(value: str | None) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _spelled(flag: str, value: str | None) -> str:
    return flag if value is None else f"{flag} {value}"


def _gpu_layers(flag: str, value: str | None, taken: set[str]) -> Taken:
    """llama.cpp's -ngl N: hearth runs the whole model on one device; without --device that is the CPU
    (hearth.backends: auto is cpu), as llama-server on a CPU build ignores the offload."""
    if (n := _number(value)) is None:
        raise PeerFlagError(f"{flag} takes a number of layers, not {value!r}")
    where = "the CPU unless --device cuda (the whole model on the GPU)" if n else "the CPU"
    return Taken(note=f"{flag} {value} is llama.cpp's GPU offload: hearth runs a whole model on one device, "
                      f"here {where}; ignored")


def _as(hearth_flag: str, does: str) -> Callable[[str, str | None, set[str]], Taken]:
    """The same thing under hearth's name (where the command has it), said once."""
    def rule(flag: str, value: str | None, taken: set[str]) -> Taken:
        if hearth_flag not in taken:
            raise PeerFlagError(f"{flag} is {does}, which this command has not")
        args = (hearth_flag,) if value is None else (hearth_flag, value)
        return Taken(args, f"{_spelled(flag, value)} is {does}: {' '.join(args)}")
    return rule


def _log_level(level: str, does: str) -> Callable[[str, str | None, set[str]], Taken]:
    """A log switch as serve's --log-level LEVEL (run's own --verbose for -v)."""
    def rule(flag: str, value: str | None, taken: set[str]) -> Taken:
        if level == "debug" and "--verbose" in taken:
            return Taken(("--verbose",))
        if "--log-level" not in taken:
            raise PeerFlagError(f"{flag} is {does}, which this command has not")
        return Taken(("--log-level", level), f"{flag} is {does}: --log-level {level}")
    return rule


_KV_SIDES = {"-ctk": "k", "--cache-type-k": "k", "-ctv": "v", "--cache-type-v": "v"}


def _kv_side(flag: str, value: str | None, taken: set[str]) -> Taken:
    return Taken()  # read by kv_cache_dtype below: K's and V's types become one format


def kv_cache_dtype(types: dict[str, tuple[str, str]], taken: set[str]) -> Taken:
    """llama.cpp's -ctk T / -ctv T (side -> (flag, type)) as hearth's --kv-cache-dtype: hearth keeps K and V
    in one format, so the two must name the same one (a side not given is llama.cpp's default, f16)."""
    from hearth.formats.kv import SERVED_KV, canonical

    k, v = (canonical(types.get(side, ("", "f16"))[1]) for side in ("k", "v"))
    given = " ".join(f"{flag} {t}" for flag, t in types.values())
    if "--kv-cache-dtype" not in taken:
        raise PeerFlagError(f"{given} is llama.cpp's KV cache type: hearth's is serve's --kv-cache-dtype, which this "
                            "command has not")
    if unknown := next((t for t in (k, v) if t not in SERVED_KV), None):
        raise PeerFlagError(f"{given}: hearth has no KV cache type {unknown!r}; --kv-cache-dtype takes "
                            f"{', '.join(SERVED_KV)}")
    if k != v:
        raise PeerFlagError(f"{given}: hearth keeps K and V in one format (llama.cpp's default is f16), so K and V "
                            f"need the same type: --kv-cache-dtype ({', '.join(SERVED_KV)})")
    return Taken(("--kv-cache-dtype", k), f"{given} is llama.cpp's KV cache type: --kv-cache-dtype {k}")


_ON_OFF = ("on", "off", "auto", "1", "0", "true", "false")
_TP = "vLLM's: hearth runs an engine on one device; for more engines, hearth cluster serve --replicas N"

PEER_VALUES: dict[str, PeerFlag] = {
    **dict.fromkeys(["-ngl", "--n-gpu-layers", "--gpu-layers"], PeerFlag("one", _gpu_layers)),
    **dict.fromkeys(["-fa", "--flash-attn"], PeerFlag(_ON_OFF, _ignored(
        "llama.cpp's flash attention: hearth's attention is always computed in blocks with an online softmax"))),
    **dict.fromkeys(["--mlock", "--no-mmap"], PeerFlag("none", _ignored(
        "llama.cpp's: hearth reads the weights its C++ kernels stream into 2 MB pages where the kernel has "
        "transparent huge pages (HEARTH_HUGE_PAGES=0 reads them in place from the GGUF's memory map)"))),
    **dict.fromkeys(["-cb", "--cont-batching"], PeerFlag("none", _ignored(
        "llama.cpp's continuous batching: hearth always batches continuously"))),
    **dict.fromkeys(["-ub", "--ubatch-size"], PeerFlag("one", _ignored(
        "llama.cpp's physical batch: hearth splits a step's tokens itself (serve's --max-num-batched-tokens, -b, is "
        "the step's budget)"))),
    **dict.fromkeys(["-st", "--single-turn"], PeerFlag("none", _ignored(
        "llama-cli's single turn: hearth run answers a PROMPT given on the command line (or piped) and exits"))),
    **dict.fromkeys(["-tb", "--threads-batch"], PeerFlag("one", _ignored(
        "llama.cpp's prompt-processing threads: hearth's --threads (-t) run prefill and decode alike"))),
    "--cache-reuse": PeerFlag("one", _ignored(
        "llama.cpp's KV shifting: hearth reuses a cached prompt prefix in 16-token blocks (on unless "
        "--no-prefix-caching)")),
    "--dtype": PeerFlag("one", _only("auto", "vLLM's: hearth keeps each weight in its GGUF's format and computes in "
                                             "what the CPU tier or GPU runs best; --kv-cache-dtype sets the KV "
                                             "cache's")),
    "--gpu-memory-utilization": PeerFlag("one", _ignored(
        "vLLM's: hearth sizes its KV cache with --kv-cache-memory-gb (several models: --max-memory)")),
    "--cpu-offload-gb": PeerFlag("one", _only("0", "vLLM's: hearth runs a whole model on one device, --device cuda "
                                                   "(or cpu)", number=True)),
    **dict.fromkeys(["--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp"],
                    PeerFlag("one", _only("1", _TP, number=True))),
    **dict.fromkeys(_KV_SIDES, PeerFlag("one", _kv_side)),
    **dict.fromkeys(["-v", "--verbose"], PeerFlag("none", _log_level("debug", "llama-server's verbose log"))),
    "--log-disable": PeerFlag("none", _log_level("error", "llama-server's: fewer log lines")),
    "--slot-save-path": PeerFlag("one", _as("--kv-disk-dir", "llama-server's slot files: hearth's disk tier of the "
                                                             "KV cache, which serves POST /slots/save and restore")),
    "--block-size": PeerFlag("one", _only("16", "vLLM's KV block size: hearth's KV blocks are 16 tokens, the unit its "
                                                "KV formats and prefix hashes share", number=True)),
    **dict.fromkeys(["-q", "--quantization"], PeerFlag("one", _only("gguf", "vLLM's: a GGUF's quantization is its "
                                                                           "own; serve the GGUF file of the "
                                                                           "quantization you want"))),
    "--load-format": PeerFlag("one", _only("gguf", "vLLM's: hearth reads GGUF files only, memory-mapped in place")),
    "--generation-config": PeerFlag("one", _only("vllm", "vLLM's source of default sampling: hearth reads none from "
                                                         "the model (vLLM's 'vllm'); --temp, --top-p, ... or "
                                                         "--override-generation-config set the server's")),
    "--no-warmup": PeerFlag("none", _ignored("llama.cpp's: hearth runs no warm-up pass")),
    "--nowordwrap": PeerFlag("none", _ignored("ollama's: hearth run never wraps words")),
    "-i": PeerFlag("none", _ignored("llama-cli's interactive mode: hearth run without a prompt is interactive")),
    # llama-cli's display flags: -co was read as -c o, a context of "o"
    **dict.fromkeys(["-co", "--color"], PeerFlag(_ON_OFF, _ignored("llama-cli's colors: hearth prints plain text"))),
    "--no-display-prompt": PeerFlag("none", _ignored("llama-cli's: hearth run prints the answer only, never the "
                                                     "prompt")),
    "--simple-io": PeerFlag("none", _ignored("llama-cli's: hearth run reads and writes plain lines")),
    **dict.fromkeys(["-e", "--escape"], PeerFlag("none", _ignored(
        "llama-cli's escapes (\\n in -p): hearth run takes the prompt as typed; a shell's $'...' writes escapes"))),
    **dict.fromkeys(["-b", "--batch-size"], PeerFlag("one", _ignored(
        "llama.cpp's logical batch: hearth sizes a step's tokens itself"))),
}
"""flag -> how it is read; its warning names it and what hearth does instead."""


@dataclass(slots=True)
class Translated:
    argv: list[str]
    notes: list[str] = field(default_factory=list)


def translate(argv: list[str], taken: set[str]) -> Translated:
    """argv with each peer flag (PEER_VALUES, not one of the command's own `taken`) replaced by what hearth does,
    and the warning lines to say; raises PeerFlagError for a value hearth cannot honour."""
    out, notes, kv, i = [], [], {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":  # what follows is positional
            out.extend(argv[i:])
            break
        flag, eq, attached = arg.partition("=")
        peer = PEER_VALUES.get(flag) if flag not in taken else None
        if peer is None:
            out.append(arg)
            i += 1
            continue
        value, i = (attached, i + 1) if eq else _value(peer.takes, argv, i)
        if peer.takes == "one" and value is None:
            raise PeerFlagError(f"{flag} takes a value")
        if flag in _KV_SIDES:
            kv[_KV_SIDES[flag]] = (flag, value)
        done = peer.rule(flag, value, taken)
        out.extend(done.args)
        notes += [done.note] if done.note else []
    if kv:
        from hearth.formats.kv import canonical

        done = kv_cache_dtype(kv, taken)
        own = next((a.partition("=")[2] or (out[j + 1] if j + 1 < len(out) else "") for j, a in enumerate(out)
                    if a.partition("=")[0] == "--kv-cache-dtype"), None)
        if own is not None and canonical(own) not in (done.args[1], "auto" if done.args[1] == "f16" else ""):
            # both given, and apart: which one would win is no answer
            given = " ".join(f"{flag} {t}" for flag, t in kv.values())
            raise PeerFlagError(f"{given} and --kv-cache-dtype {own} differ: give one of them")
        out.extend(done.args)
        notes.append(done.note)
    return Translated(out, notes)


def _value(takes: str | tuple[str, ...], argv: list[str], i: int) -> tuple[str | None, int]:
    """(the value after argv[i], the index past it)."""
    nxt = argv[i + 1] if i + 1 < len(argv) else None
    if takes == "one":
        return nxt, i + 2
    if isinstance(takes, tuple) and nxt is not None and nxt.lower() in takes:
        return nxt, i + 2
    return None, i + 1
