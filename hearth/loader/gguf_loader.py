"""Open a GGUF file in place (memory-mapped through the `gguf` package) with clear errors.

Nothing here copies tensor data: every `GGUFTensor.data` is a view into the file's memmap."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from hearth.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
# Array fields this big are vocabularies; they are read lazily by the tokenizer, not eagerly here.
_LAZY_ARRAY_FIELDS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                      "tokenizer.ggml.merges")


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    """Torch order (outermost first): a weight is (out_features, in_features); GGUF stores it reversed."""
    data: np.ndarray
    """Raw view into the file: typed for F32/F16/..., uint8 [rows, bytes_per_row] for block types."""


class GGUFFile:
    """Metadata and tensors of one GGUF file. `metadata` holds scalars and small arrays as Python
    values; `field_array(key)` reads big arrays (vocabularies) on demand."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        _check_header(self.path)
        try:
            self.reader = GGUFReader(self.path, "r")
        except ValueError as e:  # the gguf package raises ValueError for every structural problem
            raise ModelLoadError(f"{self.path}: not a readable GGUF file ({_short(e)})") from None
        except (OSError, IndexError, KeyError, UnicodeDecodeError) as e:
            raise ModelLoadError(f"{self.path}: corrupt or truncated GGUF file ({_short(e)})") from None
        self.metadata: dict[str, Any] = {}
        for key, f in self.reader.fields.items():
            if key in _LAZY_ARRAY_FIELDS:
                continue
            self.metadata[key] = _field_value(f)
        self.tensors: dict[str, GGUFTensor] = {}
        for t in self.reader.tensors:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            self.tensors[t.name] = GGUFTensor(t.name, t.tensor_type, shape, t.data)
        self.arch: str = str(self.metadata.get("general.architecture", ""))
        if not self.arch:
            raise ModelLoadError(f"{self.path}: GGUF has no general.architecture key")

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_get(self, key: str, default: Any = None) -> Any:
        """An `{arch}.{key}` metadata value, e.g. arch_get("block_count")."""
        return self.metadata.get(f"{self.arch}.{key}", default)

    def field_array(self, key: str) -> list | None:
        f = self.reader.fields.get(key)
        return None if f is None else _field_value(f)

    def tensor(self, name: str) -> GGUFTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelLoadError(f"{self.path}: tensor {name!r} is missing") from None

    @property
    def file_size(self) -> int:
        return self.path.stat().st_size


def _check_header(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelLoadError(f"not a file: {path}")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path}: not a GGUF file (bad magic {magic!r}, expected b'GGUF')")


def _field_value(f) -> Any:
    if len(f.types) == 1 and f.types[0] == GGUFValueType.ARRAY and not f.data:
        return []
    try:
        return f.contents()
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise ModelLoadError(f"metadata field {f.name!r} is unreadable ({_short(e)})") from None


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    m = re.match(r"(\d+) is not a valid GGMLQuantizationType", text)
    if m:
        known = ", ".join(t.name for t in GGMLQuantizationType)
        return f"unknown tensor type id {m.group(1)}; known types: {known}"
    return text.splitlines()[0][:200]
