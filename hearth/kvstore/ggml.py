"""q8_0 and q4_0 KV blocks in ggml's byte layout: each run of 32 values along head_dim is one
ggml block (`block_q8_0`: f16 d + 32 int8; `block_q4_0`: f16 d + 16 bytes of nibbles), so a stored
row is exactly what llama.cpp's `-ctk q8_0` cache holds and `gguf.quants.dequantize` reads it.

Fields per cache block: raw [bs, kv_heads, head_dim // 32, 34 or 18] uint8."""

from __future__ import annotations

import numpy as np
import torch

QK = 32


def round_away(x: torch.Tensor) -> torch.Tensor:
    """C's roundf (half away from zero), which ggml uses; torch.round rounds half to even."""
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


class Q8_0:
    name = "q8_0"
    block_bytes = 2 + QK

    def fields(self, bs: int, kv_heads: int, head_dim: int) -> dict:
        return {"raw": ((bs, kv_heads, head_dim // QK, self.block_bytes), torch.uint8)}

    def encode(self, x: torch.Tensor) -> dict:
        """x: [m, bs, kvh, d] f32. Same math as ggml's quantize_row_q8_0_ref."""
        b = x.float().unflatten(-1, (-1, QK))  # [..., nb, 32]
        d = b.abs().amax(-1, keepdim=True) / 127
        inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
        q = round_away(b * inv).to(torch.int8)
        raw = torch.empty(*b.shape[:-1], self.block_bytes, dtype=torch.uint8)
        raw[..., :2] = d.half().view(torch.uint8)
        raw[..., 2:] = q.view(torch.uint8)
        return {"raw": raw}

    def decode(self, f: dict) -> torch.Tensor:
        raw = f["raw"]  # [m, bs, kvh, nb, 34]
        d = raw[..., :2].contiguous().view(torch.float16).float()  # [..., nb, 1]
        q = raw[..., 2:].view(torch.int8).float()
        return (q * d).flatten(-2)

    def encode_ref(self, x: torch.Tensor) -> dict:
        """One ggml block at a time, as quantize_row_q8_0_ref reads."""
        rows = x.float().reshape(-1, QK)
        out = torch.empty(rows.shape[0], self.block_bytes, dtype=torch.uint8)
        for i, r in enumerate(rows):
            d = np.float32(r.abs().max()) / np.float32(127)  # f32 arithmetic, as in C
            inv = np.float32(1) / d if d else np.float32(0)
            q = [int(np.sign(v * inv) * np.floor(abs(v * inv) + np.float32(0.5))) for v in r.numpy()]
            out[i, :2] = torch.tensor([d], dtype=torch.float16).view(torch.uint8)
            out[i, 2:] = torch.tensor(q, dtype=torch.int8).view(torch.uint8)
        return {"raw": out.view(*x.shape[:-1], -1, self.block_bytes)}

    def decode_ref(self, f: dict) -> torch.Tensor:
        raw = f["raw"]
        rows = raw.reshape(-1, self.block_bytes)
        out = torch.empty(rows.shape[0], QK)
        for i, r in enumerate(rows):
            d = float(r[:2].clone().view(torch.float16))
            out[i] = r[2:].clone().view(torch.int8).float() * d
        return out.view(*raw.shape[:-2], -1)


class Q4_0:
    name = "q4_0"
    block_bytes = 2 + QK // 2

    def fields(self, bs: int, kv_heads: int, head_dim: int) -> dict:
        return {"raw": ((bs, kv_heads, head_dim // QK, self.block_bytes), torch.uint8)}

    def encode(self, x: torch.Tensor) -> dict:
        """Same math as ggml's quantize_row_q4_0_ref: d = (signed value of largest |x|) / -8,
        q = min(15, trunc(x / d + 8.5)); low nibbles hold values 0..15, high nibbles 16..31."""
        b = x.float().unflatten(-1, (-1, QK))
        idx = b.abs().argmax(-1, keepdim=True)
        d = b.gather(-1, idx) / -8
        inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        q = (b * inv + 8.5).trunc().clamp(0, 15).to(torch.uint8)
        raw = torch.empty(*b.shape[:-1], self.block_bytes, dtype=torch.uint8)
        raw[..., :2] = d.half().view(torch.uint8)
        raw[..., 2:] = q[..., :QK // 2] | (q[..., QK // 2:] << 4)
        return {"raw": raw}

    def decode(self, f: dict) -> torch.Tensor:
        raw = f["raw"]
        d = raw[..., :2].contiguous().view(torch.float16).float()
        qs = raw[..., 2:]
        q = torch.cat([qs & 15, qs >> 4], -1).float() - 8  # [..., nb, 32]
        return (q * d).flatten(-2)

    def encode_ref(self, x: torch.Tensor) -> dict:
        rows = x.float().reshape(-1, QK)
        out = torch.empty(rows.shape[0], self.block_bytes, dtype=torch.uint8)
        for i, r in enumerate(rows.numpy()):
            mx = max(r, key=abs)  # the first value of largest magnitude, sign kept
            d = mx / np.float32(-8)
            inv = np.float32(1) / d if d else np.float32(0)
            q = [min(15, int(v * inv + np.float32(8.5))) for v in r]
            out[i, :2] = torch.tensor([d], dtype=torch.float16).view(torch.uint8)
            out[i, 2:] = torch.tensor([q[j] | (q[j + 16] << 4) for j in range(16)], dtype=torch.uint8)
        return {"raw": out.view(*x.shape[:-1], -1, self.block_bytes)}

    def decode_ref(self, f: dict) -> torch.Tensor:
        raw = f["raw"]
        rows = raw.reshape(-1, self.block_bytes)
        out = torch.empty(rows.shape[0], QK)
        for i, r in enumerate(rows):
            d = float(r[:2].clone().view(torch.float16))
            for j in range(16):
                out[i, j] = ((int(r[2 + j]) & 15) - 8) * d
                out[i, j + 16] = ((int(r[2 + j]) >> 4) - 8) * d
        return out.view(*raw.shape[:-2], -1)
