"""hearth: local-first LLM inference for GGUF models."""

from hearth.openmp import set_wait_policy

set_wait_policy()  # before anything imports torch (libgomp reads it when it loads)

from hearth.sampling_params import SamplingParams  # noqa: E402

__version__ = "0.1.0"  # pyproject.toml reads it from here
_LAZY = {"LLM": "hearth.llm", "TextPrompt": "hearth.llm_prompts", "TokensPrompt": "hearth.llm_prompts",
         "RequestOutput": "hearth.outputs", "CompletionOutput": "hearth.outputs",
         "StructuredOutputsParams": "hearth.sampling_params", "LoRARequest": "hearth.llm_lora"}
"""vLLM's top-level names (`from vllm import LLM, TokensPrompt, ...`) -> the module that holds each here."""
__all__ = ["SamplingParams", *_LAZY]


def __getattr__(name: str):
    # LLM pulls in torch and the model stack; import it only when asked for
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)
