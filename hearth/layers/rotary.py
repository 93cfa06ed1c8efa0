"""Rotary position embedding in both layouts GGUF files use.

llama-arch GGUFs are converted with q/k rows permuted so that rope rotates adjacent pairs
(x[2i], x[2i+1]) -- llama.cpp's LLAMA_ROPE_TYPE_NORM; qwen2/qwen3/gemma3 rotate halves
(x[i], x[i + d/2]) -- LLAMA_ROPE_TYPE_NEOX.

cos/sin are looked up once per step and rope configuration (`memo` is the step's
AttentionMetadata.memo.rope, shared by all layers) in a table of the positions seen so far, up to TABLE_POSITIONS (no table
sized to the whole context); positions past it are computed for the step.
M-RoPE (Qwen2-VL's `mrope_section`, ggml's rope_multi): a step's positions may be [3, T], (t, h, w) per
token, each rotated pair following one component by the sections, laid out as a MROPE_LAYOUTS record says
(Qwen2-VL's runs, Qwen3-VL's interleaving); the tables keep their [T, rot/2] layout, so every path that reads
them (the native and fused kernels too) rotates M-RoPE unchanged.
Rotation is in place on f32 q|k, in one or three ops: adjacent pairs are complex numbers times
e^(i*angle); halves are x * cos + [b, a] * [-sin, sin] (torch.roll makes [b, a])."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from hearth.config import YarnScaling
from hearth.errors import ModelLoadError


TABLE_POSITIONS = 4096
"""At most 4096 x rot/2 x 8 bytes per rope configuration (4 MB at rot 256): computing them took ~0.3 ms
per 512-token prefill chunk and configuration."""


@dataclass(frozen=True, slots=True)
class RopeFactors:
    """Per-pair frequency divisors a GGUF carries (llama.cpp's freq_factors): Llama 3.1's one set
    (`rope_freqs.weight`), or Phi-3's LongRoPE pair (`rope_factors_short` / `_long`), the long set
    for a context past `original_context`, and the attention factor LongRoPE scales cos and sin by."""

    short: tuple[float, ...]
    long: tuple[float, ...] = ()
    original_context: int = 0
    attn_factor: float = 1.0


def yarn_factors(rot_dim: int, base: float, y: YarnScaling, original: int) -> RopeFactors:
    """YaRN as per-pair divisors of the frequency (as ggml's rope_yarn and transformers'
    _compute_yarn_parameters): pairs below the correction range keep their frequency (extrapolated),
    pairs above it are divided by the factor (interpolated), a linear ramp between; cos and sin
    scaled by mscale = 0.1 ln(factor) + 1 (llama.cpp's yarn_attn_factor after its cancel)."""
    def corr_dim(rotations: float) -> float:  # the pair that turns `rotations` times over the original context
        return rot_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))
    pairs = rot_dim // 2
    low, high = corr_dim(y.beta_fast), corr_dim(y.beta_slow)
    if y.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(0, low), min(rot_dim - 1, high)
    ramp = ((torch.arange(pairs, dtype=torch.float64) - low) / max(high - low, 0.001)).clamp(0, 1)
    extrapolated = (1 - ramp) * y.ext_factor  # ggml's ramp_mix: each pair's weight of its own frequency
    divisors = 1 / (extrapolated + (1 - extrapolated) / y.factor)

    def mscale(m: float) -> float:
        return 0.1 * m * math.log(y.factor) + 1 if y.factor > 1 else 1.0
    attn = mscale(1) / mscale(y.log_multiplier) if y.log_multiplier else mscale(1)
    return RopeFactors(tuple(divisors.tolist()), attn_factor=attn * y.attn_factor if y.ext_factor else y.attn_factor)


def runs(sections: tuple[int, ...]) -> torch.Tensor:
    """Qwen2-VL's M-RoPE (transformers' mrope_section split, ggml's rope_multi): the first sections[0] pairs
    turn by t, the next sections[1] by h, then w."""
    return torch.repeat_interleave(torch.arange(len(sections)), torch.tensor(sections, dtype=torch.long))


def interleaved(sections: tuple[int, ...]) -> torch.Tensor:
    """Qwen3-VL's (transformers' apply_interleaved_mrope): pair j turns by h where j % 3 == 1 and j < 3 * sections[1],
    by w where j % 3 == 2 and j < 3 * sections[2], else by t. (ggml's imrope turns pairs past those, j % 3 != 0, by
    a 4th position, 0 on an image's rows: at Qwen3-VL's [24, 20, 20] pairs 61 and 62, whose ~4e-7 rad per position
    make ~1e-4 rad at most there.)"""
    j = torch.arange(sum(sections))
    hw = j % 3
    limit = 3 * torch.tensor([0, *sections[1:3]], dtype=torch.long)[hw]
    return torch.where((hw > 0) & (j < limit), hw, 0)


MROPE_LAYOUTS = {"runs": runs, "interleaved": interleaved}
"""ModelConfig.rope_layout -> sections -> [rot/2] int64, the position component (0 t, 1 h, 2 w) each pair turns by."""


class Rotary(nn.Module):
    def __init__(self, rot_dim: int, base: float, neox: bool, scale: float = 1.0, factors: RopeFactors | None = None,
                 sections: tuple[int, ...] = (), layout: str = "runs"):
        super().__init__()
        self.rot_dim, self.neox, self.base, self.scale = rot_dim, neox, base, scale
        self.factors, self.sections = factors, tuple(sections)
        if sections and sum(sections) != rot_dim // 2:
            raise ModelLoadError(f"M-RoPE sections {list(sections)} cover {sum(sections)} pairs, but the rope rotates "
                                 f"{rot_dim // 2}")
        self.layout = layout if sections else ""  # in the key: the same sections laid out otherwise are other tables
        self.component = MROPE_LAYOUTS[layout](self.sections)  # [rot/2] int64
        for name, f in (("short", factors.short), ("long", factors.long)) if factors else ():
            if f and len(f) != rot_dim // 2:
                raise ModelLoadError(f"rope factors ({name}): {len(f)}, but the rope rotates {rot_dim // 2} pairs")
        self._use(factors.short if factors else ())

    def fit_context(self, n: int) -> None:
        """The model runs sequences of up to n tokens: LongRoPE's long factors past its original context
        (llama.cpp's choice by the context; transformers' by the sequence so far), else the short ones."""
        f = self.factors
        if f is not None and f.long:
            self._use(f.long if n > f.original_context else f.short)

    def _use(self, factors: tuple[float, ...]) -> None:
        attn = self.factors.attn_factor if self.factors else 1.0
        self.key = ("rope", self.rot_dim, self.base, self.scale, self.neox, factors, attn, self.sections, self.layout)
        self._halves_key = (*self.key, "halves")  # halves()' memo key, made once: looked up every step
        # angles in float64: at position 32k a float32 angle would be off by ~1e-3 rad
        self.inv_freq = 1.0 / (self.base ** (torch.arange(0, self.rot_dim, 2, dtype=torch.float64) / self.rot_dim))
        self.inv_freq /= self.scale
        if factors:
            self.inv_freq /= torch.tensor(factors, dtype=torch.float64)
        self._attn = attn
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None  # halves() of positions 0 ..

    def tables(self, positions: torch.Tensor, memo: dict) -> tuple[torch.Tensor, ...]:
        """Per step: (e^(i*angle) [T, 1, rot/2] complex64,) for pairs; (cos, signed sin) [T, 1, rot]
        for halves."""
        if self.key not in memo:
            cos, sin = (t.unsqueeze(1) for t in self.halves(positions, memo))  # [T, 1, rot/2]
            if self.neox:
                memo[self.key] = (torch.cat((cos, cos), -1), torch.cat((-sin, sin), -1))
            else:
                memo[self.key] = (torch.complex(cos, sin),)
        return memo[self.key]

    def halves(self, positions: torch.Tensor, memo: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Per step: (cos, sin) f32 [T, rot/2], contiguous (the layout the native kernel reads). positions: [T],
        or [3, T] (t, h, w) with M-RoPE sections: pair j at its component's position."""
        key = self._halves_key
        if key not in memo:
            if positions.dim() == 1:
                memo[key] = self._lookup(positions)
            elif self.sections and positions.shape[0] == len(self.sections):
                T = positions.shape[1]
                pick = self.component.expand(T, -1).unsqueeze(-1)  # [T, rot/2, 1]
                memo[key] = tuple(t.permute(1, 2, 0).gather(2, pick).squeeze(-1)  # [3, T, rot/2] -> [T, rot/2]
                                  for t in self._lookup(positions))
            else:
                raise ValueError(f"positions {tuple(positions.shape)} for a rope with sections {list(self.sections)}")
        return memo[key]

    def _lookup(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) f32 [*positions.shape, rot/2]."""
        top = int(positions.max()) + 1 if positions.numel() else 0
        if top > TABLE_POSITIONS:
            cos, sin = self._cos_sin(positions.reshape(-1))
            return cos.view(*positions.shape, -1), sin.view(*positions.shape, -1)
        if self._table is None or self._table[0].shape[0] < top:  # grow to a power of two
            n = min(TABLE_POSITIONS, max(1024, 1 << (top - 1).bit_length()))
            self._table = self._cos_sin(torch.arange(n))
        cos, sin = self._table
        return cos[positions], sin[positions]

    def _cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = torch.outer(positions.to(torch.float64), self.inv_freq)
        if self._attn != 1.0:
            return (freqs.cos() * self._attn).float(), (freqs.sin() * self._attn).float()
        return freqs.cos().float(), freqs.sin().float()

    def forward(self, x: torch.Tensor, positions: torch.Tensor, memo: dict) -> torch.Tensor:
        """x: [T, heads, head_dim] f32, rotated in place (a strided view of a wider row is fine)."""
        T, heads, _ = x.shape
        if not self.rot_dim:  # a NoPE layer (smollm3)
            return x
        r = x if x.shape[-1] == self.rot_dim else x[..., : self.rot_dim]
        if self.neox:
            cos, sin = self.tables(positions, memo)
            torch.addcmul(r * cos, r.roll(self.rot_dim // 2, -1), sin, out=r)
        else:
            (rot,) = self.tables(positions, memo)
            pairs = torch.view_as_complex(r.view(T, heads, self.rot_dim // 2, 2))
            torch.mul(pairs, rot, out=pairs)
        return x
