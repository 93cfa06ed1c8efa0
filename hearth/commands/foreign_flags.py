"""Other engines' flags that users of llama.cpp and vLLM type from habit, each with what hearth does
instead: one line naming the flag and hearth's way, where argparse would say only "unrecognized
arguments". Flags hearth takes under their own names (-c/--ctx-size, -md, --draft-max,
--max-model-len, --served-model-name, ...) are its parsers' aliases, not here."""

from __future__ import annotations

_GPU_LAYERS = "llama.cpp's GPU offload: hearth runs a whole model on one device, --device cuda (or cpu)"
_IN_PLACE = "llama.cpp's: hearth reads the GGUF's weights in place from its memory map, nothing to set"
_FLASH = "llama.cpp's flash attention: hearth's attention is always computed in blocks with an online softmax"
_TP = "vLLM's: hearth runs an engine on one device; for more engines, hearth cluster serve --replicas N"
_HF = "llama.cpp's Hugging Face download: give hearth the hub file as MODEL, org/repo:file.gguf (HF_ENDPOINT, HF_TOKEN)"
_KV = "llama.cpp's KV cache type: hearth keeps K and V in one format, --kv-cache-dtype (f16, bf16, q8_0, q4_0, ...)"
_BATCHING = "llama.cpp's continuous batching: hearth always batches continuously, nothing to set"

FOREIGN: dict[str, str] = {
    "-ngl": _GPU_LAYERS,
    "--n-gpu-layers": _GPU_LAYERS,
    "--gpu-layers": _GPU_LAYERS,
    "-fa": _FLASH,
    "--flash-attn": _FLASH,
    "--mlock": _IN_PLACE,
    "--no-mmap": _IN_PLACE,
    "--gpu-memory-utilization": "vLLM's: hearth sizes its KV cache with --kv-cache-memory-gb (several models: --max-memory)",
    "--tensor-parallel-size": _TP,
    "-tp": _TP,
    # argparse read these as other flags: -hf as -h (help, exit 0), -ctk/-ctv/-cb as -c ("tk"), -tb as -t
    **dict.fromkeys(["-hf", "-hfr", "--hf-repo", "-hff", "--hf-file"], _HF),
    **dict.fromkeys(["-ctk", "--cache-type-k", "-ctv", "--cache-type-v"], _KV),
    **dict.fromkeys(["-cb", "--cont-batching"], _BATCHING),
    **dict.fromkeys(["-tb", "--threads-batch"], "llama.cpp's prompt-processing threads: hearth's --threads (-t) run "
                                                "prefill and decode alike"),
    **dict.fromkeys(["-ub", "--ubatch-size"], "llama.cpp's physical batch: hearth splits a step's tokens itself; "
                                              "--max-num-batched-tokens (-b) is the step's budget"),
    # argparse read llama-server's -n as an abbreviation of -np (its slots)
    **dict.fromkeys(["-n", "--predict", "--n-predict"], "llama-server's default n_predict: hearth's "
                                                         "--max-tokens-limit caps a request's max_tokens and is the "
                                                         "max_tokens of one that asks none"),
    "--dtype": "vLLM's: hearth keeps each weight in its GGUF's format and computes in what the CPU tier or GPU runs "
               "best; --kv-cache-dtype sets the KV cache's",
    **dict.fromkeys(["-q", "--quantization"], "vLLM's: a GGUF's quantization is its own; serve the GGUF file of the "
                                              "quantization you want"),
    "--block-size": "vLLM's: hearth's KV blocks are 16 tokens, the unit its KV formats and prefix hashes share",
    "--context-shift": "llama.cpp's: hearth never drops the start of a conversation; an answer that fills the context "
                       "ends with finish_reason length (a request's hearth.compaction compacts old turns)",
    "--no-enable-chunked-prefill": "vLLM's: hearth always prefills in chunks; --max-num-batched-tokens sizes them",
    "--props": "llama-server's POST /props: hearth has no property to change there; GET /props reads them",
    "--swap-space": "vLLM's CPU swap: hearth recomputes a preempted request's KV (--kv-disk-dir keeps prefixes on disk)",
    "--cpu-offload-gb": _GPU_LAYERS,
    **dict.fromkeys(["-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"], _GPU_LAYERS),
    **dict.fromkeys(["-pp", "--pipeline-parallel-size"], _TP),
    "--threads-http": "llama-server's: hearth answers HTTP on one event loop; --threads are the model's",
    "--cache-reuse": "llama.cpp's KV shifting: hearth reuses a cached prompt prefix in 16-token blocks (on unless "
                     "--no-prefix-caching)",
    **dict.fromkeys(["-mmu", "--mmproj-url"], "llama.cpp's download of a projector: hearth reads local files; "
                                                 "download it and pass --mmproj FILE"),
    "--load-format": "vLLM's: hearth reads GGUF files only, memory-mapped in place",
    "--tokenizer": "vLLM's: hearth reads the tokenizer from the GGUF itself",
    "--download-dir": "vLLM's: hearth keeps models in $HEARTH_HOME/models (hearth pull NAME)",
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
    "show": "ollama's: hearth plan MODEL shows a model's architecture, sizes and limits; a server's GET /props its "
            "chat template",
}
"""Commands that users of ollama type from habit -> what hearth does instead."""
