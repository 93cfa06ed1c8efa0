"""A GGUF given as MODEL that is another kind of GGUF llama.cpp writes: a LoRA adapter
(convert_lora_to_gguf.py: general.type "adapter") or a vision projector (--mmproj: general.type "mmproj",
architecture "clip"). Each was a loader's later complaint ("metadata key llama.block_count is missing",
"tokenizer model ''"), which never said what the file is or where it goes."""

from __future__ import annotations

from hearth.errors import ModelLoadError
from hearth.loader.gguf_loader import GGUFFile

NOT_A_MODEL = {
    "adapter": "a LoRA adapter, not a model: give it with --lora FILE, and its base model as MODEL",
    "mmproj": "a vision projector (mmproj), not a model: give it with --mmproj FILE, and its language model as MODEL",
}
"""general.type -> what the file is and where it goes."""


def check_model_file(g: GGUFFile) -> None:
    """Raises naming what `g` is when it is a GGUF of another kind than a model."""
    kind = "mmproj" if g.arch == "clip" else str(g.metadata.get("general.type", "model"))
    if kind in NOT_A_MODEL:
        raise ModelLoadError(f"{g.path}: {NOT_A_MODEL[kind]}")
