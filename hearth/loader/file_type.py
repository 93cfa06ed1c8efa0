"""A GGUF's quantization as llama.cpp and Ollama name it (Q4_K_M, Q4_1, ...), from its header alone: what
`hearth models` lists and Ollama's quantization_level says."""

from __future__ import annotations

from collections import Counter

from gguf import constants as gguf_constants


def quantization(gguf) -> str:
    """general.file_type's name; without one, the type most of its weight matrices have; "": not known."""
    return _file_type(gguf.metadata.get("general.file_type")) or _commonest_matrix_type(gguf)


def _file_type(value) -> str:
    """general.file_type as llama.cpp and Ollama name it (15: Q4_K_M; its matrices are Q4_K, Q6_K and Q5_0 or
    Q8_0 by layer, so the commonest type misnames it); "" where absent or unknown."""
    try:
        name = gguf_constants.LlamaFileType(int(value)).name
    except (TypeError, ValueError):
        return ""
    return "" if name == "GUESSED" else name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _commonest_matrix_type(gguf) -> str:
    """The type that holds the most weights of its 2-D tensors ("": none)."""
    types = Counter()
    for t in gguf.tensors.values():
        if len(t.shape) == 2:
            types[t.qtype.name] += t.shape[0] * t.shape[1]
    return types.most_common(1)[0][0] if types else ""
