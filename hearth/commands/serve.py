"""`hearth serve [MODEL ...] [--models FILE]`: OpenAI-, Anthropic- and Ollama-compatible HTTP server with a
chat page at `/`, in the manner of `vllm serve` and `llama-server`; several models are loaded on
their first request and unloaded least-recently-used under --max-memory (llama-swap's way)."""

from __future__ import annotations

import argparse
import errno
import os
import socket
import signal
import sys
from collections.abc import Callable

import uvicorn

from hearth.api.durations import seconds
from hearth.config import DEFAULT_MODEL, DEVICES, MAX_LOGPROBS, STATE_SNAPSHOTS, EngineConfig
from hearth.commands.human_ints import gib_of_bytes, token_count
from hearth.commands.logs import configure_logging
from hearth.commands.listen_flags import add_listen_flags, api_keys, scheme, uvicorn_options
from hearth.commands.lora_flags import add_lora_arguments, lora_entries
from hearth.commands.models_file import FIELDS
from hearth.commands.vision_flags import add_vision_arguments
from hearth.commands.peer_flags import add_peer_arguments
from hearth.commands.sampling_flags import add_sampling_arguments, sampling_defaults
from hearth.commands.rope_flags import add_rope_arguments, rope_freq_base, rope_scaling
from hearth.commands.template_flags import add_template_arguments, chat_template, chat_template_kwargs
from hearth.commands.threads_flag import THREADS_HELP, thread_count
from hearth.commands.serve_speculation import add_speculation_arguments, speculative_config
from hearth.errors import HearthError
from hearth.formats.kv import SERVED_KV


def keep_alive(text: str) -> float:
    """--keep-alive's seconds, as Ollama reads OLLAMA_KEEP_ALIVE (hearth.api.durations)."""
    try:
        return seconds(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a duration such as 5m, 1h30m, 300 (seconds) or -1 (forever), "
                                         f"not {text!r}") from None


def _names(text: str) -> list[str]:
    """llama-server's --alias A,B: its comma-separated names."""
    return [n.strip() for n in text.split(",") if n.strip()]


def add_arguments(p: argparse.ArgumentParser, listen: bool = True) -> None:
    """listen: the flags of a server that listens on a port (`hearth run-batch` takes the others)."""
    from hearth.tool_guard.declined import NAME_FLOOR
    from hearth.tool_guard.routing import DEFAULT_THRESHOLD, TOOL_FLOOR

    p.add_argument("model", nargs="*", default=[],
                   help=f"catalog name, path to a .gguf file, or org/repo:file.gguf; several: the first loads at "
                        f"start, the others on their first request (default: {DEFAULT_MODEL})")
    # llama-server's -m and vLLM's --model: without them argparse read `-m FILE` as -md FILE, a draft model
    p.add_argument("-m", "--model", dest="model_flag", action="append", default=[], metavar="MODEL",
                   help="MODEL as llama-server's -m and vLLM's --model spell it (after any MODEL given)")
    p.add_argument("--models", default=None, metavar="FILE",
                   help=f"a TOML file of [[models]] entries ({', '.join(FIELDS)}), served beside any MODEL given")
    p.add_argument("--max-memory", type=float, default=0, metavar="GIB",
                   help="GiB all loaded models may hold together; the least recently used is unloaded to make "
                        "room (default with several models: `hearth plan`'s usable memory less the runtime)")
    p.add_argument("--embedding", "--embeddings", action="store_true",
                   help="llama-server's embeddings-only server: the embedding and rerank routes answer, the generating "
                        "ones (chat, completions, responses, messages, /api/chat, /api/generate, infill) are a 501 "
                        "naming this flag; without it every model embeds too (/v1/embeddings)")
    p.add_argument("--reranking", "--rerank", action="store_true",
                   help="llama-server's flag: a reranker GGUF (pooling_type 4) serves /v1/rerank and /v1/score without "
                        "it; with it, a model given that is no reranker is refused at start")
    net = p.add_argument_group("server")
    if listen:
        _add_listen_arguments(net)
    net.add_argument("--served-model-name", action="extend", nargs="+", default=None, metavar="NAME",
                     help="name clients use in `model`; more names (NAME NAME ..., as vLLM's, or the flag repeated) "
                          "are aliases (default: the catalog name or the file's stem; MODEL as given and the file's "
                          "name are aliases)")
    net.add_argument("-a", "--alias", dest="served_model_name", action="extend", type=_names, metavar="NAME[,NAME]",
                     help="--served-model-name in llama-server's spelling (comma-separated names)")
    net.add_argument("--max-n", type=int, default=16, help="largest `n` a request may ask for (default: %(default)s)")
    net.add_argument("--max-tokens-limit", type=int, default=0,
                     help="largest max_tokens a request may ask for, and the max_tokens of one that asks none "
                          "(default: the context length)")
    net.add_argument("--max-body-mb", type=float, default=32, help="largest request body in MiB (default: %(default)s: "
                     "a 20 MiB image as a data URL fits)")
    net.add_argument("--tool-guard", default="guard", metavar="MODE",
                     help="tool calls: guard (call grammar, validation, retries), grammar (the grammar only) or "
                          "off (parse only); a request may pick its own with hearth.tool_guard (default: %(default)s)")
    net.add_argument("--tool-guard-retries", type=int, default=3, metavar="N",
                     help="retries the guard may spend on a request whose calls fail (default: %(default)s)")
    net.add_argument("--tool-guard-decline-below", type=float, default=None, metavar="P",
                     help="the guard declines a lazily triggered call whose name's first token the model gave a raw "
                          f"probability below P (the grammar chose the tool); 0: never (default: {NAME_FLOOR})")
    net.add_argument("--tool-guard-parallel-hint", action="store_true",
                     help="mode guard: add a sentence to the system message asking for one call per thing asked, in "
                          "the model's call tags (won BFCL parallel items on Qwen2.5-Coder-1.5B, lost irrelevance on "
                          "the 0.5B; a request may pick with hearth.tool_guard_parallel_hint) (default: off)")
    net.add_argument("--router", default=None, metavar="MODEL",
                     help="a small model (catalog name, .gguf or the name of a served model) that answers single-turn "
                          "tool calls first (free to answer in text, which hands over at its first word; forced "
                          "when the client requires a call); its call stands when its confidence reaches "
                          "--router-threshold, else the main model answers; pinned (default: none)")
    net.add_argument("--router-threshold", type=float, default=None, metavar="P",
                     help="lowest token probability in the small model's call, its opener included, for it to "
                          f"stand, in [0, 1] (default: {DEFAULT_THRESHOLD})")
    net.add_argument("--router-tool-floor", type=float, default=None, metavar="P",
                     help="with several tools offered, the small model's call is stopped at its tool's name and "
                          "the main model answers when the tokens that chose that tool read below P, in [0, 1]; "
                          f"0: off (default: {TOOL_FLOOR}; 0.95 is the measured value, docs/eval-tools.md)")
    net.add_argument("--log-level", "--uvicorn-log-level", default="info",
                     choices=["critical", "error", "warning", "info", "debug"],
                     help="least severe log line printed, uvicorn's and hearth's own; --uvicorn-log-level: vLLM's "
                          "spelling (default: %(default)s)")
    net.add_argument("--enable-auto-tool-choice", action="store_true",
                     help="vLLM's switch; hearth parses tool calls always, in the format the model writes")
    eng = p.add_argument_group("engine")
    eng.add_argument("--max-model-len", "--ctx", "-c", "--ctx-size", type=token_count, default=0, metavar="N",
                     help="context length in tokens, or vLLM's 32k (32,000), 32K (32,768), auto (the model's own); "
                          "-c/--ctx-size: llama-server's spelling (default: the model's own)")
    eng.add_argument("--device", default="auto", choices=DEVICES,
                     help="what runs the model: cpu (this CPU's C++ kernels), torch (the reference), cuda (default: %(default)s)")
    eng.add_argument("--max-num-seqs", "-np", "--parallel", type=int, default=16,
                     help="most sequences in one step; -np/--parallel: llama-server's spelling, its slots "
                          "(default: %(default)s)")
    eng.add_argument("--max-num-batched-tokens", "-b", "--batch-size", type=int, default=2048,
                     help="token budget of one engine step; -b/--batch-size: llama-server's spelling, its logical "
                          "batch (default: %(default)s)")
    eng.add_argument("--pooling", default=None, choices=["mean", "cls", "last", "rank", "none"], action=_Pooling,
                     help="llama-server's: how an embedding pools a prompt's final hidden states, over the GGUF's "
                          "pooling_type (cls: an encoder's first token; rank: --reranking; default: the GGUF's, "
                          "else last)")
    eng.add_argument("--num-kv-blocks", type=int, default=0, help="KV-cache blocks (default: sized from the rest)")
    eng.add_argument("--kv-cache-memory-gb", type=float, default=2.0,
                     help="upper bound on KV-cache memory in GiB (default: %(default)s)")
    # vLLM's spelling in bytes; beside it, argparse no longer reads `--kv-cache-memory N` as N GiB
    eng.add_argument("--kv-cache-memory-bytes", dest="kv_cache_memory_gb", type=gib_of_bytes, metavar="BYTES",
                     help="--kv-cache-memory-gb in bytes, vLLM's spelling (4294967296, 4G)")
    eng.add_argument("--kv-cache-dtype", default="auto",
                     help=f"KV-cache format: auto (f16), {', '.join(SERVED_KV)} (default: %(default)s)")
    eng.add_argument("--kv-disk-dir", default="", metavar="DIR",
                     help="keep full prefix blocks of the KV cache in DIR across restarts, and enable "
                          "POST /slots/save and /slots/restore (default: off)")
    eng.add_argument("--kv-disk-space-mb", type=int, default=4096, metavar="MB",
                     help="most MiB the disk tier may take in DIR (default: %(default)s)")
    eng.add_argument("--no-prefix-caching", "--no-enable-prefix-caching", action="store_true",
                     help="do not reuse the KV of repeated prefixes (--no-enable-prefix-caching: vLLM's spelling)")
    eng.add_argument("--enable-prefix-caching", dest="no_prefix_caching", action="store_false",
                     help="vLLM's switch: prefix caching is on unless --no-prefix-caching")
    eng.add_argument("--state-snapshots", "--ctx-checkpoints", type=int, default=STATE_SNAPSHOTS, metavar="N",
                     help="a model with recurrent layers (qwen35): states kept at block boundaries, where "
                          "prefix-cache hits start, for all sequences together (LRU; each running one holds up to "
                          "3; --ctx-checkpoints: llama.cpp's name, which counts them per slot; default: %(default)s)")
    eng.add_argument("--no-grammar-drafts", action="store_true",
                     help="under a grammar (structured output, tool calls), decode the tokens it forces one "
                          "step each instead of verifying them as drafts in one step")
    eng.add_argument("--threads", "-t", type=thread_count, default=0,
                     help=f"CPU threads per model; {THREADS_HELP}; a --models entry's `threads` overrides it "
                          "(default: 0)")
    eng.add_argument("--seed", type=int, default=0,
                     help="seed of the engine's sampler at start, as vLLM's: requests that give no `seed` draw from "
                          "it in turn (so a restart repeats the same sequence of answers, not one answer per prompt; "
                          "a request's own `seed` gives that) (default: %(default)s)")
    eng.add_argument("--max-logprobs", type=int, default=MAX_LOGPROBS, metavar="N",
                     help="most top logprobs a request may ask per token (logprobs, top_logprobs, prompt_logprobs); "
                          "-1: no cap, and a request's -1 asks for the whole vocabulary, as vLLM's (default: %(default)s)")
    add_rope_arguments(p)
    add_template_arguments(p)
    add_speculation_arguments(p)
    add_lora_arguments(p)
    add_vision_arguments(p)
    add_sampling_arguments(p)
    add_peer_arguments(p)


class _Pooling(argparse.Action):
    """llama-server's --pooling rank is its --reranking (the reranker's head scores, no pooling is chosen)."""

    def __call__(self, parser, namespace, value, option_string=None):
        if value == "rank":
            namespace.reranking = True
        else:
            setattr(namespace, self.dest, value)


def _add_listen_arguments(net) -> None:
    net.add_argument("--max-queued", type=int, default=256,
                     help="requests that may wait beyond --max-num-seqs before new ones get 429 (default: %(default)s)")
    net.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    net.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    net.add_argument("--api-key", default=os.environ.get("HEARTH_API_KEY") or None,  # an empty variable: unset
                     help="require this key (Bearer or x-api-key) on every route but /health and /; several: "
                          "K1,K2, as llama-server's; an empty one is refused, not an open server (default: $HEARTH_API_KEY "
                          "unless empty, else none)")
    net.add_argument("--cors-origins", "--allowed-origins", default="", metavar="ORIGINS",
                     help="comma-separated origins allowed by CORS besides this machine's (http(s)://localhost, 127.0.0.1, "
                          "0.0.0.0, [::1] on any port, and app://, file://, tauri://, vscode-webview:// pages, as "
                          "Ollama's default), e.g. https://chat.example or '*' (default: only those)")
    net.add_argument("--allowed-hosts", default="", metavar="HOSTS",
                     help="comma-separated host names requests may be sent to besides localhost and the loopback "
                          "addresses while --host is a loopback address (a name re-pointed at 127.0.0.1 by a web page, "
                          "DNS rebinding, is refused with a 403, as Ollama's), e.g. llm.home.arpa, '*.home.arpa' for the "
                          "names under it or '*' for any; with "
                          "--host 0.0.0.0 or a LAN address no Host is checked (default: only those)")
    net.add_argument("--keep-alive", type=keep_alive, default=None, metavar="DURATION",
                     help="unload a model once idle this long (what Ollama's OLLAMA_KEEP_ALIVE sets, not read "
                          "from it: 5m, 1h30m, 300 seconds, -1 forever); its next request loads it again. A request's keep_alive sets its model's own; "
                          "pinned models stay (default: forever, as llama-swap's ttl: a model goes only when another "
                          "needs its room under --max-memory)")
    net.add_argument("--slots", action=argparse.BooleanOptionalAction, default=True,
                     help="llama-server's: GET /slots lists the running requests as its slots; --no-slots: a 501 "
                          "(default: on)")
    net.add_argument("--no-webui", dest="webui", action="store_false",
                     help="no chat page at / (llama-server's): an API-only server")
    net.add_argument("--webui", dest="webui", action="store_true", default=True, help=argparse.SUPPRESS)
    add_listen_flags(net)


def main(args: argparse.Namespace) -> int:
    from hearth.api.app import create_app
    from hearth.commands.serve_models import build_pool

    configure_logging(args.log_level)  # before the load, whose notes are hearth's log lines
    config = server_config(args, listen=True)  # a bad --tool-guard fails before any model loads
    uvicorn_options(args)  # so does half an --ssl-* pair
    EngineConfig(**engine_args(args))  # so does a bad engine flag (checked again for each model)
    pool = build_pool(args)  # reads the files' headers, no weights
    check_port(args.host, args.port)  # and a port in use is one line, not uvicorn's log after the load
    pool.preload()
    return run_server(create_app(pool, config), args, pool.ids_text())


def engine_args(args: argparse.Namespace) -> dict:
    """LLM's keyword arguments from the engine options (a --models entry overrides some; `hearth
    cluster serve` passes them to each replica)."""
    return dict(max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                max_num_batched_tokens=args.max_num_batched_tokens, num_kv_blocks=args.num_kv_blocks,
                kv_cache_memory_gb=args.kv_cache_memory_gb, kv_cache_dtype=args.kv_cache_dtype,
                enable_prefix_caching=not args.no_prefix_caching, state_snapshots=args.state_snapshots,
                grammar_drafts=not args.no_grammar_drafts,
                threads=args.threads, seed=args.seed, max_logprobs=args.max_logprobs,
                kv_disk_dir=args.kv_disk_dir, kv_disk_space_mb=args.kv_disk_space_mb,
                speculative_config=speculative_config(args), device=args.device, rope_scaling=rope_scaling(args),
                rope_freq_base=rope_freq_base(args),
                chat_template=chat_template(args), chat_template_kwargs=chat_template_kwargs(args),
                lora=lora_entries(args), mmproj=args.mmproj)


_SERVER_LOWEST = {"port": (0, 65535), "max_n": (1, None), "max_queued": (0, None), "max_tokens_limit": (0, None),
                  "max_body_mb": (1e-6, None), "timeout": (0, None)}
"""Server flags -> the range each takes (None: no upper bound); checked before any model loads."""


def check_server_flags(args: argparse.Namespace) -> None:
    for name, (lo, hi) in _SERVER_LOWEST.items():
        value = getattr(args, name, None)
        if value is not None and not (value >= lo and (hi is None or value <= hi)):
            span = f"in [{lo}, {hi}]" if hi is not None else ("0 or more" if lo == 0 else "positive" if lo < 1 else f"at least {lo}")
            raise HearthError(f"--{name.replace('_', '-')} must be {span}, not {value}")


def check_port(host: str, port: int) -> None:
    """Bind host:port as uvicorn will (SO_REUSEADDR, every address the host resolves to) and let go,
    so a port in use is one line before the model loads, not uvicorn's log after it."""
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise HearthError(f"--host {host}: {e.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio's create_server: v6 only, v4 binds on its own
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise HearthError(f"port {port} on {host} is already in use") from None
                raise HearthError(f"cannot listen on port {port} on {host}: {e.strerror}") from None


def server_config(args: argparse.Namespace, listen: bool = False):
    """The app's options from the flags. listen: the app will be served on --host (`hearth serve`, the cluster's front
    end), so a loopback --host turns the Host check on (hearth.api.hosts); an app driven in-process has none."""
    from hearth import __version__
    from hearth.api.app import ServerConfig

    check_server_flags(args)
    origins = getattr(args, "cors_origins", "")
    keys = [k.strip() for k in (getattr(args, "api_key", None) or "").split(",") if k.strip()]  # llama-server's K1,K2
    if getattr(args, "api_key", None) is not None and not keys:  # `--api-key "$KEY"` with KEY unset: an open server
        raise HearthError(f"--api-key {args.api_key!r} names no key, and the server would be "
                          "open to anyone who reaches it: give a key, or leave --api-key out for an open server")
    return ServerConfig(api_key=keys[0] if keys else None, api_keys=keys[1:] + api_keys(args),
                        cors_origins=[o.strip() for o in origins.split(',') if o.strip()],
                        listen_host=args.host if listen else None,
                        allowed_hosts=[h.strip() for h in getattr(args, "allowed_hosts", "").split(",") if h.strip()],
                        max_body_bytes=int(args.max_body_mb * 2**20), max_n=args.max_n,
                        max_tokens=args.max_tokens_limit, sampling_defaults=sampling_defaults(args),
                        tool_guard=tool_guard(args),
                        router_threshold=router_threshold(args), router_tool_floor=router_tool_floor(args),
                        build_info=f"hearth {__version__}", webui=getattr(args, "webui", True),
                        timeout_s=getattr(args, "timeout", 0), openapi=not getattr(args, "disable_fastapi_docs", False),
                        embeddings_only=args.embedding, slots_endpoint=getattr(args, "slots", True))


def tool_guard(args: argparse.Namespace):
    """--tool-guard, --tool-guard-retries, --tool-guard-decline-below and --tool-guard-parallel-hint as one
    GuardConfig."""
    from hearth.tool_guard import GuardConfig

    below = getattr(args, "tool_guard_decline_below", None)
    extra = {} if below is None else {"decline_below": below}
    if getattr(args, "tool_guard_parallel_hint", False):
        extra["parallel_hint"] = True
    return GuardConfig(getattr(args, "tool_guard", "guard"), getattr(args, "tool_guard_retries", 3), **extra)


def router_threshold(args: argparse.Namespace) -> float:
    """--router-threshold, checked before any model loads (one line when outside [0, 1])."""
    from hearth.tool_guard.routing import DEFAULT_THRESHOLD, check_threshold

    given = getattr(args, "router_threshold", None)
    return DEFAULT_THRESHOLD if given is None else check_threshold(given)


def router_tool_floor(args: argparse.Namespace) -> float:
    """--router-tool-floor, checked like --router-threshold."""
    from hearth.tool_guard.routing import TOOL_FLOOR, check_threshold

    given = getattr(args, "router_tool_floor", None)
    return TOOL_FLOOR if given is None else check_threshold(given, "--router-tool-floor")


def run_server(app, args: argparse.Namespace, names: str) -> int:
    """Serve until interrupted; the URL is announced once the socket listens. names: what is served, as text."""
    options = uvicorn_options(args)

    def ready(port: int) -> str:  # the bound port: --port 0 is one the OS picks
        url = f"{scheme(args)}://{_url_host(args.host)}:{port}{args.root_path}"
        page = f"chat page {url}/, " if app.state.webui else ""
        return f"hearth: serving {names} at {url} ({page}API {url}/v1)"

    server = _Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                    timeout_graceful_shutdown=5, **options), ready, app.state.models.end_streams)
    server.run()  # a Ctrl-C is raised again once uvicorn has stopped: KeyboardInterrupt, exit 130 (hearth.cli)
    if server.interrupted:  # ... unless a handler installed since (Ray's, in a cluster's driver) took it
        return 130
    return 0 if server.started else 1


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class _Server(uvicorn.Server):
    """uvicorn's server, announcing the URL once the socket listens; on Ctrl-C (SIGTERM) it ends the
    answers in flight first, each with an error event, as llama-server and vLLM exit promptly:
    uvicorn alone waits timeout_graceful_shutdown for them, then cancels them with a traceback."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[int], str], end_streams: Callable[[], None]):
        super().__init__(config)
        self.ready, self.end_streams = ready, end_streams
        self.interrupted = False

    def handle_exit(self, sig, frame) -> None:
        self.interrupted |= sig == signal.SIGINT
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets=None) -> None:
        self.end_streams()
        await super().shutdown(sockets)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self.ready(self.bound_port()), file=sys.stderr, flush=True)

    def bound_port(self) -> int:
        """The port the listening socket has (--port 0: the OS's pick), else the one asked for."""
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                if isinstance(address := sock.getsockname(), tuple):
                    return address[1]
        return self.config.port
