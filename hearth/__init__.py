"""hearth: local-first LLM inference for GGUF models."""

from hearth.openmp import set_wait_policy

set_wait_policy()  # before anything imports torch (libgomp reads it when it loads)

from hearth.sampling_params import SamplingParams  # noqa: E402

__version__ = "0.1.0"  # pyproject.toml reads it from here
__all__ = ["LLM", "SamplingParams"]


def __getattr__(name: str):
    # LLM pulls in torch and the model stack; import it only when asked for
    if name == "LLM":
        from hearth.llm import LLM

        return LLM
    raise AttributeError(name)
