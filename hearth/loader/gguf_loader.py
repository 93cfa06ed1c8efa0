"""Open a GGUF file in place with clear errors.

The header is parsed here in one pass over the memory map (gguf-py's GGUFReader builds an object per
vocabulary entry: seconds and hundreds of MB for a 262k vocabulary). Tensor types and sizes still
come from the `gguf` package's tables. Nothing copies tensor data: every `GGUFTensor.data` is a view
into the file's memmap. A file's first bytes alone (`GGUFFile(path, size=...)`, a catalog model's
first wheel parts for `hearth plan`) give its metadata and tensor table, without data."""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from hearth.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# Array fields this big are vocabularies: kept out of `metadata`, read with field_array().
_BIG_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
               "tokenizer.ggml.merges")
_SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2", GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "<u1", GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}
# tensor types whose data is exposed typed (like gguf-py); every block type is raw uint8 rows
_TYPED = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16,
          GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8,
          GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
          GGMLQuantizationType.I64: np.int64}


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    """Torch order (outermost first): a weight is (out_features, in_features); GGUF stores it reversed."""
    data: np.ndarray | None
    """Raw view into the file: typed for F32/F16/..., uint8 [rows, bytes_per_row] for block types;
    None when only the file's first bytes were opened (GGUFFile's `size`)."""


class TruncatedHeader(ModelLoadError):
    """The header runs past the bytes there are: a truncated file, or a prefix too short to hold it."""


class _Cursor:
    """Little-endian reads from the memmap; running past the end is a truncated file."""

    def __init__(self, buf: np.ndarray, path: Path):
        self.buf, self.mv, self.pos, self.path = buf, memoryview(buf), 0, path

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise TruncatedHeader(f"{self.path}: truncated GGUF file (header ends at byte {len(self.buf)})")

    def scalar(self, fmt: str):
        size = struct.calcsize(fmt)
        self._need(size)
        (value,) = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        self._need(n)
        s = bytes(self.mv[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def array(self, dtype: str, count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        self._need(size)
        out = self.buf[self.pos : self.pos + size].view(dtype)
        self.pos += size
        return out

    def value(self, vtype: int) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            etype, count = self.scalar("<I"), self.scalar("<Q")
            if etype == GGUFValueType.STRING:
                return [self.string() for _ in range(count)]
            if etype == GGUFValueType.ARRAY:
                return [self.value(GGUFValueType.ARRAY) for _ in range(count)]
            return self.array(_dtype(etype, self.path), count)
        value = self.array(_dtype(vtype, self.path), 1)[0].item()
        return bool(value) if vtype == GGUFValueType.BOOL else value


def _dtype(vtype: int, path: Path) -> str:
    try:
        return _SCALARS[vtype]
    except KeyError:
        raise ModelLoadError(f"{path}: corrupt GGUF metadata (unknown value type {vtype})") from None


class GGUFFile:
    """Metadata and tensors of one GGUF file. `metadata` holds scalars and small arrays as Python
    values; `field_array(key)` gives the big vocabulary arrays."""

    def __init__(self, path: str | os.PathLike, size: int | None = None):
        """size: the whole file's bytes when `path` holds only its first ones (they must hold the
        header): tensors are checked against it and come without data. A file that says it is the
        first of several (`split.count`, llama.cpp's gguf-split: NAME-00001-of-0000N.gguf) brings the
        tensors of the others, found beside it."""
        self.path, self._size = Path(path), size
        self.metadata, self._arrays = {}, {}
        self.tensors: dict[str, GGUFTensor] = {}
        self.parts: list[Path] = [self.path]
        self.version = self._read(self.path, size, first=True)
        count = int(self.metadata.get("split.count", 1))
        if count > 1 and size is None:
            for part in split_parts(self.path, count, int(self.metadata.get("split.no", 0))):
                self._read(part, None, first=False)
                self.parts.append(part)
        self.arch: str = str(self.metadata.get("general.architecture", ""))
        if not self.arch:
            raise ModelLoadError(f"{self.path}: GGUF has no general.architecture key")

    def _read(self, path: Path, size: int | None, first: bool) -> int:
        """One file's header: its metadata (the first file's is the model's), its tensors over its own
        map. Returns the GGUF version."""
        check_header(path)
        buf = np.memmap(path, dtype=np.uint8, mode="r")
        cur = _Cursor(buf, path)
        cur.pos = 4
        version = cur.scalar("<I")
        if version not in (2, 3):
            raise ModelLoadError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
        n_tensors, n_kv = cur.scalar("<Q"), cur.scalar("<Q")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            value = cur.value(cur.scalar("<I"))
            if isinstance(value, np.ndarray) and key not in _BIG_ARRAYS:
                value = value.tolist()
            if first:
                (self._arrays if key in _BIG_ARRAYS else self.metadata)[key] = value
            metadata[key] = value
        infos = [self._tensor_info(cur, path) for _ in range(n_tensors)]
        align = int(metadata.get("general.alignment", self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)))
        if align <= 0 or align & (align - 1):
            raise ModelLoadError(f"{path}: invalid general.alignment {align}")
        data_start = -(-cur.pos // align) * align
        file_bytes = path.stat().st_size if size is None else size
        for name, dims, qtype, offset in infos:
            if name in self.tensors:
                raise ModelLoadError(f"{path}: tensor {name!r} is in more than one of the model's files")
            self.tensors[name] = _tensor(path, buf if size is None else None, file_bytes, name, dims, qtype,
                                         data_start + offset)
        return version

    def _tensor_info(self, cur: _Cursor, path: Path) -> tuple[str, list[int], GGMLQuantizationType, int]:
        name = cur.string()
        n_dims = cur.scalar("<I")
        if n_dims > 8:
            raise ModelLoadError(f"{path}: corrupt tensor info for {name!r} ({n_dims} dimensions)")
        dims = [int(d) for d in cur.array("<u8", n_dims)]
        type_id = cur.scalar("<I")
        try:
            qtype = GGMLQuantizationType(type_id)
        except ValueError:
            known = ", ".join(t.name for t in GGMLQuantizationType)
            raise ModelLoadError(f"{path}: tensor {name!r} has unknown type id {type_id}; "
                                 f"known types: {known}") from None
        return name, dims, qtype, cur.scalar("<Q")

    @property
    def file_size(self) -> int:
        """The model's bytes: every part's (the first's as given when only its header is here)."""
        return (self._size if self._size is not None else self.path.stat().st_size) + \
            sum(p.stat().st_size for p in self.parts[1:])

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_get(self, key: str, default: Any = None) -> Any:
        """An `{arch}.{key}` metadata value, e.g. arch_get("block_count")."""
        return self.metadata.get(f"{self.arch}.{key}", default)

    def field_array(self, key: str) -> list | np.ndarray | None:
        """A metadata array by key, the vocabulary arrays included (numeric arrays as numpy)."""
        if key in self._arrays:
            return self._arrays[key]
        return self.metadata.get(key)

    def tensor(self, name: str) -> GGUFTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelLoadError(f"{self.path}: tensor {name!r} is missing") from None



def _tensor(path: Path, buf: np.ndarray | None, file_bytes: int, name: str, dims: list[int],
            qtype: GGMLQuantizationType, start: int) -> GGUFTensor:
    """A tensor of the file at `path` (its map `buf`; None: only its header is here, no data)."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    n_elems = int(np.prod(dims)) if dims else 1
    if dims and dims[0] % block:
        raise ModelLoadError(f"{path}: tensor {name!r} row of {dims[0]} is not a whole number "
                             f"of {qtype.name} blocks")
    n_bytes = n_elems // block * type_size
    if start + n_bytes > file_bytes:
        raise ModelLoadError(f"{path}: truncated GGUF file: tensor {name!r} needs bytes up to "
                             f"{start + n_bytes} but the file has {file_bytes}")
    shape = tuple(reversed(dims))
    if buf is None:
        return GGUFTensor(name, qtype, shape, None)
    raw = buf[start : start + n_bytes]
    if qtype in _TYPED:
        data = raw.view(_TYPED[qtype]).reshape(shape)
    else:
        data = raw.reshape(*shape[:-1], shape[-1] // block * type_size)
    return GGUFTensor(name, qtype, shape, data)


SPLIT_NAME = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
"""llama.cpp's gguf-split names (llama_split_path): NAME-00001-of-00003.gguf, ..."""


def split_parts(first: Path, count: int, no: int) -> list[Path]:
    """The other files of a model split in `count` (gguf-split's, or a converter's --split-max-*), beside
    the first; a part other than the first, or a part missing, is one clear error."""
    m = SPLIT_NAME.search(first.name)
    if no == 0 and (m is None or int(m.group(1)) != 1 or int(m.group(2)) != count):
        # the first file renamed: "give the first" named the file given, and the others are found by name
        raise ModelLoadError(f"{first}: the first file of a model split in {count}, renamed: the others are found "
                             f"by its name, which must be NAME-00001-of-{count:05d}.gguf as gguf-split wrote it")
    if no != 0:
        raise ModelLoadError(f"{first}: file {no + 1} of a model split in {count}: give the first, "
                             f"NAME-00001-of-{count:05d}.gguf, which finds the others beside it")
    prefix = first.name[:m.start()]
    parts = [first.with_name(f"{prefix}-{i:05d}-of-{count:05d}.gguf") for i in range(2, count + 1)]
    if missing := [p.name for p in parts if not p.exists()]:
        raise ModelLoadError(f"{first}: the model is split in {count} files; missing beside it: {', '.join(missing)}")
    return parts


def head_tensor(g: GGUFFile) -> GGUFTensor:
    """The lm-head matrix [vocab, hidden]: its own `output.weight`, or the tied token embedding."""
    return g.tensors.get("output.weight") or g.tensor("token_embd.weight")


def expert_views(t: GGUFTensor) -> list[GGUFTensor]:
    """A stacked expert tensor [n_expert, out, in] (`blk.N.ffn_*_exps.weight`) as one 2-D tensor per
    expert: each expert's matrix is a contiguous run of rows in the file (the outermost dimension), so
    its view is a slice of the memmap, named `<name>#<expert>`."""
    if len(t.shape) != 3:
        raise ModelLoadError(f"tensor {t.name!r} of shape {t.shape} is not [experts, out, in]")
    return [GGUFTensor(f"{t.name}#{e}", t.qtype, t.shape[1:], None if t.data is None else t.data[e])
            for e in range(t.shape[0])]


def check_header(path: Path) -> None:
    """A file that is there and begins as a GGUF (its magic), else one line saying which it is not."""
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelLoadError(f"not a file: {path}")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path}: not a GGUF file (bad magic {magic!r}, expected b'GGUF')")
