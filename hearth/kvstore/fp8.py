"""fp8 (e4m3) KV blocks with one f32 scale per KV head per cache block: the block's largest
magnitude maps to e4m3's largest finite value, 448 (vLLM's per-tensor fp8 KV, made per block so a
single outlier token costs only its own block's precision).

Fields per cache block: values [bs, kv_heads, head_dim] float8_e4m3fn, scale [kv_heads] f32."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


class FP8E4M3:
    name = "fp8_e4m3"

    def fields(self, bs: int, kv_heads: int, head_dim: int) -> dict:
        return {"values": ((bs, kv_heads, head_dim), FP8), "scale": ((kv_heads,), torch.float32)}

    def encode(self, x: torch.Tensor) -> dict:
        """x: [m, bs, kvh, d] -> values [m, bs, kvh, d] e4m3 (round to nearest even), scale [m, kvh]."""
        x = x.float()
        amax = x.abs().amax(dim=(1, 3))  # [m, kvh]
        scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
        y = (x / scale[:, None, :, None]).clamp_(-FP8_MAX, FP8_MAX)
        return {"values": y.to(FP8), "scale": scale}

    def decode(self, f: dict) -> torch.Tensor:
        return f["values"].float() * f["scale"][:, None, :, None]

    def encode_ref(self, x: torch.Tensor) -> dict:
        """One (block, head) at a time."""
        m, bs, kvh, d = x.shape
        values = torch.empty(m, bs, kvh, d, dtype=FP8)
        scale = torch.empty(m, kvh)
        for b in range(m):
            for h in range(kvh):
                tile = x[b, :, h].float()
                amax = float(tile.abs().max())
                s = amax / FP8_MAX if amax > 0 else 1.0
                scale[b, h] = s
                values[b, :, h] = torch.clamp(tile / torch.tensor(s, dtype=torch.float32), -FP8_MAX, FP8_MAX).to(FP8)
        return {"values": values, "scale": scale}

    def decode_ref(self, f: dict) -> torch.Tensor:
        v, s = f["values"], f["scale"]
        out = torch.empty(v.shape)
        for b in range(v.shape[0]):
            for h in range(v.shape[2]):
                out[b, :, h] = v[b, :, h].float() * float(s[b, h])
        return out
