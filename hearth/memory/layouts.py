"""How an engine holds each weight once loaded, which is what counts against memory.

`file`: the GGUF blocks as they are (GGUF-native kernels: llama.cpp, and hearth's GPU paths).
`hearth-cpu`: hearth's CPU kernels (hearth.kernels.native) read their block types in place from the
memory map, so each weight costs its file bytes (F16 is expanded to bf16: the same 16 bits); a type the
selected tier's kernels lack (hearth.formats.weights native_at: IQ4_NL, IQ4_XS, MXFP4 at amx) is held as
its torch path holds it (below).
`hearth-cpu-torch`: hearth's torch fallback where those kernels cannot run: the torch tier, forced
or the only one the CPU runs (cpu_layout; each type's torch_path in
hearth.formats.weights, which hearth.layers.linear builds; a test builds each one and compares):
  int4 x1   Q4_0, Q4_1, Q4_K: torch's int4pack layout, 4 bits a value + a bf16 scale and zero per
            32 values = 5 bits a value; rows padded to a multiple of 64
  int4 x2   Q5_0, Q5_1, Q5_K, Q8_0, IQ4_NL, IQ4_XS (codebook values as 8-bit codes), MXFP4 (5-bit codes): two such planes,
            10 bits a value
  int8      Q6_K: requantized to int8 codes, 8 bits a value + a bf16 scale per row; an output head of a
            two-plane type too where ATen runs below AVX-512 (hearth.formats.weights.HEAD_INT4_MAX_PLANES)
  bf16      F16, Q2_K, Q3_K: expanded to 16 bits a value; BF16 is used in place (16 bits)
  f32       F32 used in place from the memory map (32 bits)
On the CPU the token embedding is read row by row from the file (only looked-up rows become
resident); a head tied to it is held like any other weight."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from gguf import GGMLQuantizationType as Q

from hearth.formats.weights import WEIGHT_FORMATS
from hearth.kernels import tiers
from hearth.memory.shape import ModelShape
from hearth.memory.weights import WeightTensor, role

ROW_BLOCK = 64  # int4pack packs rows in blocks of 64


@dataclass(frozen=True, slots=True)
class Held:
    bits: float
    """Bits a value as held in memory."""
    row_block: int = 1
    row_bytes: int = 0
    """Bytes a row holds besides its values (int8's bf16 scale)."""


INT4X1, INT4X2 = Held(4 + 32 / 32, ROW_BLOCK), Held(2 * (4 + 32 / 32), ROW_BLOCK)
TORCH_HELD = {"f32": Held(32), "bf16": Held(16), "int4x1": INT4X1, "int4x2": INT4X2, "int8": Held(8, row_bytes=2)}
"""hearth.formats.weights.TORCH_PATHS -> how each holds a weight."""


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    held: dict[Q, Held]
    """Types the engine re-lays out; any other type is held as the file stores it."""
    embedding_resident: bool
    """Whether an untied embedding table is resident (GPU) or read from the file on demand (CPU)."""
    about: str
    head_held: dict[Q, Held] | None = None
    """How the output head is held where it differs from `held` (None: as `held`)."""


def _relaid(f) -> bool:
    """A block type the selected tier's kernels lack (IQ4 and MXFP4 at amx, untested there): held as its torch path holds it.
    The dense types (F32, F16, BF16: one value a block) cost their file bits there anyway."""
    return f.block_size > 1 and not f.native_at(tiers.selected().name)


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout("file", {}, True, "GGUF blocks as stored (GGUF-native kernels)"),
    Layout("hearth-cpu", {q: TORCH_HELD[f.torch_path] for q, f in WEIGHT_FORMATS.items() if _relaid(f)}, False,
           "hearth's CPU kernels: their block types read in place from the file, the others (IQ4 and MXFP4 "
           "at the amx tier) on their torch path; embedding rows read from the file",
           {q: TORCH_HELD[f.torch_head_path(torch.backends.cpu.get_cpu_capability())]
            for q, f in WEIGHT_FORMATS.items() if _relaid(f)}),
    Layout("hearth-cpu-torch", {q: TORCH_HELD[f.torch_path] for q, f in WEIGHT_FORMATS.items()}, False,
           "hearth's torch fallback: 4/5-bit and Q8_0 as int4 planes (5 bits a value each), "
           "Q6_K as int8 rows, 2/3-bit k-quants and F16 as bf16; embedding rows read from the file",
           {q: TORCH_HELD[f.torch_head_path(torch.backends.cpu.get_cpu_capability())]
            for q, f in WEIGHT_FORMATS.items()}),
)}


def cpu_layout(name: str) -> str:
    """`name`, except that hearth-cpu is how this process's CPU tier holds weights: at the torch tier
    the torch paths re-lay them out (hearth-cpu-torch). A native tier whose library fails to build
    also falls back to torch (one warning line, hearth.kernels.native): not foreseen here, since the
    planner builds nothing."""
    return "hearth-cpu-torch" if name == "hearth-cpu" and not tiers.selected().native else name


def held_bytes(t: WeightTensor, layout: Layout, head: bool = False) -> int:
    """Bytes of one weight as `layout` holds it (head: the output head)."""
    held = (layout.head_held if head and layout.head_held is not None else layout.held).get(t.qtype)
    if held is None:
        return t.n_bytes
    rows = math.prod(t.shape[:-1]) if len(t.shape) > 1 else 1
    padded = -(-rows // held.row_block) * held.row_block
    return int(padded * t.shape[-1] * held.bits / 8) + padded * held.row_bytes


def resident_weight_bytes(tensors: list[WeightTensor], shape: ModelShape, layout: Layout) -> int:
    return sum(held_bytes(t, layout, role(t, shape) == "head") for t in tensors
               if layout.embedding_resident or role(t, shape) != "embedding")
