"""Other engines' flags that users of llama.cpp and vLLM type from habit, each with what hearth does
instead: one line naming the flag and hearth's way, where argparse would say only "unrecognized
arguments". Flags hearth takes under their own names (-c/--ctx-size, -md, --draft-max,
--max-model-len, --served-model-name, ...) are its parsers' aliases, not here."""

from __future__ import annotations

_GPU_LAYERS = "llama.cpp's GPU offload: hearth runs a whole model on one device, --device cuda (or cpu)"
_HF = "llama.cpp's Hugging Face download: give hearth the hub file as MODEL, org/repo:file.gguf (HF_ENDPOINT, HF_TOKEN)"
_REASONING = ("llama-server's: hearth reads <think> and harmony reasoning into reasoning_content always; a request's "
              "chat_template_kwargs (enable_thinking) or reasoning_effort asks for less")
_LOG_FILE = "llama-server's: hearth logs to stderr; redirect it (2> FILE)"
_GPU_ONLY = "llama.cpp's GPU placement: hearth runs a whole model on one device, --device cuda (or cpu)"
_GRAMMAR = ("llama.cpp's default grammar: hearth constrains a request's output by its response_format, grammar or "
            "tools; hearth run takes --grammar and -j")

FOREIGN: dict[str, str] = {
    # argparse read these as other flags: -hf as -h (help, exit 0)
    **dict.fromkeys(["-hf", "-hfr", "--hf-repo", "-hff", "--hf-file"], _HF),
    # argparse read llama-server's -n as an abbreviation of -np (its slots)
    **dict.fromkeys(["-n", "--predict", "--n-predict"], "llama-server's default n_predict: hearth's "
                                                         "--max-tokens-limit caps a request's max_tokens and is the "
                                                         "max_tokens of one that asks none"),
    "--keep": "llama.cpp's tokens kept at a context shift: hearth never drops the start of a conversation; an "
              "answer that fills the context ends there, said",
    **dict.fromkeys(["--think", "--hidethinking"], "ollama's: hearth run prints a model's reasoning as it comes; "
                                                   "--chat-template-kwargs '{\"enable_thinking\": false}' asks a "
                                                   "Qwen3 model for none"),
    "--context-shift": "llama.cpp's: hearth never drops the start of a conversation; an answer that fills the context "
                       "ends with finish_reason length (a request's hearth.compaction compacts old turns)",
    "--no-enable-chunked-prefill": "vLLM's: hearth always prefills in chunks; --max-num-batched-tokens sizes them",
    "--props": "llama-server's POST /props: hearth has no property to change there; GET /props reads them",
    "--swap-space": "vLLM's CPU swap: hearth recomputes a preempted request's KV (--kv-disk-dir keeps prefixes on disk)",
    **dict.fromkeys(["-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"], _GPU_LAYERS),
    "--threads-http": "llama-server's: hearth answers HTTP on one event loop; --threads are the model's",
    **dict.fromkeys(["-mmu", "--mmproj-url"], "llama.cpp's download of a projector: hearth reads local files; "
                                                 "download it and pass --mmproj FILE"),
    "--tokenizer": "vLLM's: hearth reads the tokenizer from the GGUF itself",
    "--download-dir": "vLLM's: hearth keeps models in $HEARTH_HOME/models (hearth pull NAME)",
    **dict.fromkeys(["--samplers", "--sampling-seq", "--sampler-seq"], "llama.cpp's sampler order: hearth's is "
                    "llama.cpp's default chain, fixed (penalties, DRY, top-n-sigma, min-p, top-k, typical-p, top-p, "
                    "XTC; temperature first); set a sampler to its off value to leave it out"),
    "--reasoning-format": _REASONING,
    "--reasoning-budget": _REASONING,
    "--log-file": _LOG_FILE,
    "--numa": "llama.cpp's NUMA placement: hearth's --threads (-t) run on the cores the OS gives them",
    **dict.fromkeys(["-dev", "--device-list"], _GPU_ONLY),
    **dict.fromkeys(["--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe", "-ot", "--override-tensor"], _GPU_ONLY),
    "--cache-ram": "llama-server's prompt cache in RAM: hearth reuses cached prefixes within --kv-cache-memory-gb, "
                   "and --kv-disk-dir keeps them on disk",
    "--swa-full": "llama.cpp's full-size SWA cache: hearth keeps a sliding-window layer's whole context in its KV "
                  "blocks, nothing to set",
    **dict.fromkeys(["-kvo", "--kv-offload", "-nkvo", "--no-kv-offload"], "llama.cpp's KV offload: hearth keeps the "
                                                                          "KV cache on the model's device"),
    "--grammar": _GRAMMAR,
    "--grammar-file": _GRAMMAR,
    "--guided-decoding-backend": "vLLM's: hearth constrains output with llguidance always (response_format, grammar, "
                                 "tools)",
    "--chat-template-content-format": "vLLM's: hearth gives a template a message's content as the template reads it "
                                      "(a string, or a list of parts for one that loops over them)",
    "--response-role": "vLLM's: hearth's answers are the assistant's role",
    "--distributed-executor-backend": "vLLM's: hearth runs an engine in one process; for more engines, hearth cluster "
                                      "serve --replicas N (on Ray)",
    "--keepalive": "ollama's: hearth run holds the model while it runs; hearth serve --keep-alive DURATION unloads an "
                   "idle one",
    "--format": "ollama's: hearth run --format json; a server's request asks for JSON by response_format",
}
"""flag -> what hearth does instead."""


def foreign_flag(argv: list[str], taken: set[str] = frozenset()) -> str | None:
    """The one-line error for the first of `argv`'s flags that is another engine's, else None. taken: the command's
    own flags (hearth pull's -q, hearth plan's --block-size are hearth's)."""
    for arg in argv:
        if arg == "--":  # what follows is positional
            return None
        flag = arg.split("=", 1)[0]
        if flag in FOREIGN and flag not in taken:
            return f"{flag} is {FOREIGN[flag]}"
    return None


_MODELS = "ollama's: hearth models lists the catalog and what is downloaded, with each file's path"
FOREIGN_COMMANDS: dict[str, str] = {
    "list": _MODELS,
    "ls": _MODELS,
    "rm": "ollama's: a model is a plain GGUF file under $HEARTH_HOME/models/NAME (hearth models prints its path): "
          "delete that folder",
    "ps": "ollama's: a server's GET /v1/models says which models are loaded (hearth.loaded)",
    "stop": "ollama's: hearth run holds its model only while it runs; a server's keep_alive 0 (or --keep-alive) unloads "
            "one, Ctrl-C stops the server",
    "show": "ollama's: hearth plan MODEL shows a model's architecture, sizes and limits; a server's GET /props its "
            "chat template",
    "chat": "vLLM's: hearth run MODEL chats in the terminal",
    "complete": "vLLM's: hearth run MODEL --raw PROMPT completes the text",
    "collect-env": "vLLM's: hearth doctor prints the versions, CPU tier, GPU, memory and models a bug report needs",
    "perplexity": "llama.cpp's llama-perplexity: hearth eval perplexity MODEL (-f FILE, -c N, --chunks N)",
    **dict.fromkeys(["create", "cp", "push"], "ollama's: hearth runs a GGUF file as it is, no Modelfile or registry: "
                                               "give its path as MODEL (--chat-template, --system, the sampling "
                                               "flags set what a Modelfile would)"),
}
"""Commands that users of ollama, vLLM and llama.cpp type from habit -> what hearth does instead."""
