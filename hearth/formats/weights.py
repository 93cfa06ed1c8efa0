"""The GGUF weight types hearth reads: one record each.

A new type is one record here plus its kernels: its torch decoder (hearth.layers.quant registers one
per record, checked by a test), and, when `native`, its C++ reader (csrc/blocks.h's enum and the
dispatch in csrc/gguf_kernels.cpp, checked by tests/formats against these records)."""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

QK_K = 256  # super-block size of the k-quants

TORCH_PATHS = ("f32", "bf16", "int4x1", "int4x2", "int8")
"""How hearth.layers.linear's torch fallback holds a weight: f32 or bf16 dense, torch's int4pack in one
or two 4-bit planes (hearth.kernels.qmatmul), or int8 codes with one scale per row (requantized:
torch's int8 kernel reads half of bf16's bytes); hearth.memory.layouts prices each."""
INT4_PLANES = {"int4x1": 1, "int4x2": 2}
HEAD_INT4_MAX_PLANES = {"AVX512": 2}
"""ATen CPU capability (torch.backends.cpu.get_cpu_capability()) -> the most int4 planes an output head
takes on torch's int4pack kernel; a head of more (Q5_*, Q8_0: two) is held as int8 rows instead (1 where
not listed). With AVX2 that kernel is compute-bound (~8 G weights/s a core, the int8 kernel's ~15), so
two planes cost twice one: SmolLM2's Q8_0 head as int8 rows took its decode step to 0.89-0.93x the CPU
time. Heads only: int8 rows for every Q5_0/Q8_0 weight (Qwen2.5-Coder-0.5B step 0.66x) took that model's
KL past llama.cpp's (1.7x); with AVX-512 two planes are the faster (docs/performance.md, 2026-12-05,
seventh session)."""


@dataclass(frozen=True, slots=True)
class WeightFormat:
    qtype: Q
    block_size: int
    """Weights per block."""
    type_size: int
    """Bytes per block."""
    torch_path: str
    """One of TORCH_PATHS: what the torch fallback repacks it to at load."""
    group_size: int = 0
    """Weights sharing one (scale, offset); 0 for plain float types, which have no affine form."""
    q_bits: int = 0
    """Bits of an unsigned code (w = scale * q + offset); 0 for plain float types."""
    zero_code: int | None = None
    """Symmetric formats: offset == -zero_code * scale, and gguf-py computes scale * (q - zero_code)."""
    f16_at: tuple[int, ...] = ()
    """Byte offsets of the f16 scales (d, dmin) inside a block."""
    native: bool = False
    """The C++ kernels read it in place (csrc/blocks.h); their id for it is GGML's, native_id."""
    native_tiers: tuple[str, ...] = ()
    """The native tiers (hearth.kernels.tiers) whose kernels read it, where not every one does (empty: all of
    them); at the others it takes its torch path."""

    @property
    def name(self) -> str:
        return self.qtype.name

    @property
    def native_id(self) -> int | None:
        """The type's id in csrc/blocks.h's enum (GGML's own id), or None if the kernels lack it."""
        return int(self.qtype) if self.native else None

    def native_at(self, tier: str) -> bool:
        """The kernels of native tier `tier` read it in place."""
        return self.native and (not self.native_tiers or tier in self.native_tiers)

    @property
    def bits(self) -> float:
        """Bits a weight as stored in the file (scales included)."""
        return 8 * self.type_size / self.block_size

    def torch_head_path(self, capability: str) -> str:
        """torch_path for an output head on this ATen CPU capability: past HEAD_INT4_MAX_PLANES's planes, int8 rows."""
        more = INT4_PLANES.get(self.torch_path, 0) > HEAD_INT4_MAX_PLANES.get(capability, 1)
        return "int8" if more else self.torch_path

    def __post_init__(self):
        if self.torch_path not in TORCH_PATHS:
            raise ValueError(f"{self.name}: torch_path {self.torch_path!r} is not one of {TORCH_PATHS}")
        if GGML_QUANT_SIZES[self.qtype] != (self.block_size, self.type_size):
            raise ValueError(f"{self.name}: block {(self.block_size, self.type_size)} disagrees with gguf-py's "
                             f"{GGML_QUANT_SIZES[self.qtype]}")


def _q(qtype: Q, block: int, size: int, path: str, group: int, bits: int, zero: int | None = None,
       f16_at: tuple[int, ...] = (0,)) -> WeightFormat:
    return WeightFormat(qtype, block, size, path, group, bits, zero, f16_at, native=True)


IQ4_TIERS = ("avx512", "avx2", "neon")
"""Where the C++ kernels read IQ4_NL / IQ4_XS (and MXFP4, read as IQ4_NL): not amx (its tiles' paths untested on a
CPU with them)."""

WEIGHT_FORMATS: dict[Q, WeightFormat] = {f.qtype: f for f in (
    WeightFormat(Q.F32, 1, 4, "f32"),  # used in place from the memory map
    WeightFormat(Q.F16, 1, 2, "bf16"),
    WeightFormat(Q.BF16, 1, 2, "bf16"),  # used in place
    # 32-wide blocks: d (and m) then the codes
    _q(Q.Q4_0, 32, 18, "int4x1", 32, 4, zero=8),
    _q(Q.Q4_1, 32, 20, "int4x1", 32, 4, f16_at=(0, 2)),
    _q(Q.Q5_0, 32, 22, "int4x2", 32, 5, zero=16),
    _q(Q.Q5_1, 32, 24, "int4x2", 32, 5, f16_at=(0, 2)),
    _q(Q.Q8_0, 32, 34, "int4x2", 32, 8, zero=128),
    # k-quants: 256-wide super-blocks; 16-wide groups do not fit int4pack (groups >= 32), so bf16, or for
    # Q6_K (head and ffn_down of *_K_M files) int8 rows: half of bf16's bytes, and torch's bf16 GEMV is slow
    # where ATen runs AVX2; lossy (Qwen2.5-Coder-0.5B decode KL 0.27x -> 0.49x llama.cpp's, prefill
    # 0.36x -> 0.59x; the native tiers read Q6_K in place)
    _q(Q.Q2_K, QK_K, 84, "bf16", 16, 2, f16_at=(80, 82)),
    _q(Q.Q3_K, QK_K, 110, "bf16", 16, 3, zero=4, f16_at=(108,)),
    _q(Q.Q4_K, QK_K, 144, "int4x1", 32, 4, f16_at=(0, 2)),
    _q(Q.Q5_K, QK_K, 176, "int4x2", 32, 5, f16_at=(0, 2)),
    _q(Q.Q6_K, QK_K, 210, "int8", 16, 6, zero=32, f16_at=(208,)),
    # i-quants with llama.cpp's 16-value codebook (kvalues_iq4nl): the affine code is the codebook's int8 value
    # + 128 (w = d * (q - 128), so 8 bits, two int4 planes on the torch path, as Q8_0); the avx512, avx2 and
    # neon tiers' kernels read them in place (one vpshufb from index to code), the other tiers take the torch path
    WeightFormat(Q.IQ4_NL, 32, 18, "int4x2", 32, 8, 128, (0,), True, IQ4_TIERS),  # d, 16 bytes of indices
    WeightFormat(Q.IQ4_XS, QK_K, 136, "int4x2", 32, 8, 128, (0,), True, IQ4_TIERS),  # d, scales_h, scales_l[4], qs
    # OCP microscaling FP4 (gpt-oss's experts): an E8M0 exponent byte, then 32 E2M1 codes; the codes' values
    # (doubled: 0, +-1, 2, 3, 4, 6, 8, 12) + 12 are 5-bit affine codes under a power-of-two scale, so the
    # torch path's two int4 planes hold it exactly; the avx512, avx2 and neon tiers read it in place as IQ4_NL (its
    # own codebook's vpshufb, the E8M0 byte as the scale)
    WeightFormat(Q.MXFP4, 32, 17, "int4x2", 32, 5, 12, (), True, IQ4_TIERS),
)}

MXFP4_KVALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)
"""E2M1 code -> twice its value (ggml's kvalues_mxfp4; the E8M0 scale is taken halved to match)."""

IQ4_KVALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
"""llama.cpp's kvalues_iq4nl (ggml-common.h; gguf-py's IQ4_NL.kvalues): what an IQ4 4-bit index stands for."""

NATIVE_IDS: dict[int, str] = {f.native_id: f.name for f in WEIGHT_FORMATS.values() if f.native}
"""csrc/gguf_formats.h's type ids -> names: every type some tier's kernels read."""


def native_ids(tier: str) -> dict[int, str]:
    """The type ids -> names that native tier `tier`'s kernels read (hearth.kernels.native.qtypes)."""
    return {f.native_id: f.name for f in WEIGHT_FORMATS.values() if f.native_at(tier)}
