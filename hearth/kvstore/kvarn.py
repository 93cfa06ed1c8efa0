"""KVarN tiles (arXiv 2606.03458; same math as the torch golden of huawei-csl/KVarN's store-tile
kernel test): K and V are stored rotated by a normalized Hadamard matrix along head_dim; each tile
(one cache block of 64 or 128 tokens, one KV head) is balanced by ~16 rounds of alternating
log-domain std normalization over its two axes (scales clamped, the least imbalanced iterate kept),
then rounded to nearest, asymmetric:
- K per channel (over the tile's tokens): 4-bit codes, f16 scale + zero per channel, and the
  per-token balancing scale (f16) that the per-channel grid cannot absorb;
- V per token (over head_dim): 2- or 4-bit codes, f16 scale + zero per token, and the per-channel
  balancing scale (f16).
The balancing scale along the quantized axis is folded into that axis's stored scale and zero.

Fields are laid out [bs, kv_heads, ...] like the plain cache so a block decodes straight to
[bs, kv_heads, head_dim]; codes are packed along head_dim, low bits first."""

from __future__ import annotations

import math

import torch

ITERATIONS = 16
STD_MIN, STD_MAX = 1e-3, 1e3
LOG_S_MIN, LOG_S_MAX = -0.3, 10.0


def hadamard(n: int) -> torch.Tensor:
    """[n, n] f32 normalized (orthonormal, symmetric) Hadamard matrix, Sylvester's construction."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"KVarN needs a power-of-two head_dim, not {n}")
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(n)


def _imbalance(col: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
    """[N]: max/min of the per-column stds plus max/min of the per-row stds (2 = balanced)."""
    col, row = col.flatten(1), row.flatten(1)
    return col.amax(1) / col.amin(1).clamp_min(1e-8) + row.amax(1) / row.amin(1).clamp_min(1e-8)


def balance(tile: torch.Tensor, iterations: int = ITERATIONS) -> tuple[torch.Tensor, torch.Tensor]:
    """tile: [N, R, C] f32 -> (s_col [N, 1, C], s_row [N, R, 1]) with tile / s_col / s_row balanced.
    Each std is taken once: the column stds that score an iterate also start the next round."""
    N, R, C = tile.shape
    log_c, log_r = tile.new_zeros(N, 1, C), tile.new_zeros(N, R, 1)
    sc, sr = log_c.exp(), log_r.exp()
    col, row = tile.std(dim=1, keepdim=True), tile.std(dim=2, keepdim=True)
    best, best_c, best_r = _imbalance(col, row), sc, sr
    for _ in range(iterations):
        log_c = (log_c + col.clamp(STD_MIN, STD_MAX).log()).clamp(LOG_S_MIN, LOG_S_MAX)
        sc = log_c.exp()
        row = (tile / sc / sr).std(dim=2, keepdim=True)
        log_r = (log_r + row.clamp(STD_MIN, STD_MAX).log()).clamp(LOG_S_MIN, LOG_S_MAX)
        sr = log_r.exp()
        cur = tile / sc / sr
        col, row = cur.std(dim=1, keepdim=True), cur.std(dim=2, keepdim=True)
        imb = _imbalance(col, row)
        better = (imb <= best).view(N, 1, 1)
        best_c, best_r = torch.where(better, sc, best_c), torch.where(better, sr, best_r)
        best = torch.where(better.view(N), imb, best)
    return best_c, best_r


def quantize_rows(tile: torch.Tensor, bits: int, iterations: int = ITERATIONS):
    """tile: [N, R, C] -> codes [N, R, C] uint8, row scale and zero [N, R] f16 (balancing folded in),
    column scale [N, C] f16. tile ~= (codes * scale + zero) * col_scale."""
    s_col, s_row = balance(tile, iterations)
    bal = tile / s_col / s_row
    lo, hi = bal.amin(2, keepdim=True), bal.amax(2, keepdim=True)
    scale = ((hi - lo) / ((1 << bits) - 1)).clamp_min(1e-10)
    codes = ((bal - lo) / scale).round().clamp(0, (1 << bits) - 1).to(torch.uint8)
    return codes, (s_row * scale)[..., 0].half(), (s_row * lo)[..., 0].half(), s_col[:, 0].half()


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """[..., d] uint8 codes < 2**bits -> [..., d * bits / 8], value i of a byte in bits [i*b, (i+1)*b)."""
    per = 8 // bits
    c = codes.unflatten(-1, (-1, per))
    out = c[..., 0].clone()
    for i in range(1, per):
        out |= c[..., i] << (bits * i)
    return out


def unpack(packed: torch.Tensor, bits: int) -> torch.Tensor:
    per, mask = 8 // bits, (1 << bits) - 1
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8)
    return ((packed.unsqueeze(-1) >> shifts) & mask).flatten(-2)[..., :packed.shape[-1] * per]


class KVarNKeys:
    """Per-channel asymmetric codes over the tile's tokens."""

    def __init__(self, bits: int = 4, iterations: int = ITERATIONS):
        self.bits, self.iterations = bits, iterations
        self.name = f"kvarn_k{bits}"

    def fields(self, bs: int, kv_heads: int, head_dim: int) -> dict:
        return {"codes": ((bs, kv_heads, head_dim * self.bits // 8), torch.uint8),
                "scale": ((kv_heads, head_dim), torch.float16), "zero": ((kv_heads, head_dim), torch.float16),
                "token_scale": ((bs, kv_heads), torch.float16)}

    def encode(self, x: torch.Tensor) -> dict:
        m, bs, kvh, d = x.shape
        tile = x.float().permute(0, 2, 3, 1).reshape(m * kvh, d, bs)  # rows = channels, cols = tokens
        codes, scale, zero, tok = quantize_rows(tile, self.bits, self.iterations)
        codes = codes.view(m, kvh, d, bs).permute(0, 3, 1, 2)  # [m, bs, kvh, d]
        return {"codes": pack(codes, self.bits), "scale": scale.view(m, kvh, d), "zero": zero.view(m, kvh, d),
                "token_scale": tok.view(m, kvh, bs).transpose(1, 2).contiguous()}

    def decode(self, f: dict) -> torch.Tensor:
        q = unpack(f["codes"], self.bits).float()  # [m, bs, kvh, d]
        return (q * f["scale"].float()[:, None] + f["zero"].float()[:, None]) * f["token_scale"].float()[..., None]

    def encode_ref(self, x: torch.Tensor) -> dict:
        return _encode_ref(self, x, per_token=False)

    def decode_ref(self, f: dict) -> torch.Tensor:
        q = _unpack_ref(f["codes"], self.bits)
        m, bs, kvh, d = q.shape
        out = torch.empty(m, bs, kvh, d)
        for b in range(m):
            for h in range(kvh):
                for t in range(bs):
                    out[b, t, h] = ((q[b, t, h] * f["scale"][b, h].float() + f["zero"][b, h].float())
                                    * float(f["token_scale"][b, t, h]))
        return out


class KVarNValues:
    """Per-token asymmetric codes over head_dim."""

    def __init__(self, bits: int = 2, iterations: int = ITERATIONS):
        self.bits, self.iterations = bits, iterations
        self.name = f"kvarn_v{bits}"

    def fields(self, bs: int, kv_heads: int, head_dim: int) -> dict:
        return {"codes": ((bs, kv_heads, head_dim * self.bits // 8), torch.uint8),
                "scale": ((bs, kv_heads), torch.float16), "zero": ((bs, kv_heads), torch.float16),
                "channel_scale": ((kv_heads, head_dim), torch.float16)}

    def encode(self, x: torch.Tensor) -> dict:
        m, bs, kvh, d = x.shape
        tile = x.float().permute(0, 2, 1, 3).reshape(m * kvh, bs, d)  # rows = tokens, cols = channels
        codes, scale, zero, ch = quantize_rows(tile, self.bits, self.iterations)
        codes = codes.view(m, kvh, bs, d).transpose(1, 2)
        return {"codes": pack(codes, self.bits), "scale": scale.view(m, kvh, bs).transpose(1, 2).contiguous(),
                "zero": zero.view(m, kvh, bs).transpose(1, 2).contiguous(), "channel_scale": ch.view(m, kvh, d)}

    def decode(self, f: dict) -> torch.Tensor:
        q = unpack(f["codes"], self.bits).float()
        return (q * f["scale"].float()[..., None] + f["zero"].float()[..., None]) * f["channel_scale"].float()[:, None]

    def encode_ref(self, x: torch.Tensor) -> dict:
        return _encode_ref(self, x, per_token=True)

    def decode_ref(self, f: dict) -> torch.Tensor:
        q = _unpack_ref(f["codes"], self.bits)
        m, bs, kvh, d = q.shape
        out = torch.empty(m, bs, kvh, d)
        for b in range(m):
            for h in range(kvh):
                for t in range(bs):
                    out[b, t, h] = ((q[b, t, h] * float(f["scale"][b, t, h]) + float(f["zero"][b, t, h]))
                                    * f["channel_scale"][b, h].float())
        return out


def _balance_one(tile: torch.Tensor, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One [R, C] tile, written out step by step: (s_col [C], s_row [R])."""
    log_c, log_r = torch.zeros(tile.shape[1]), torch.zeros(tile.shape[0])

    def scaled():
        return tile / log_c.exp()[None, :] / log_r.exp()[:, None]

    def imbalance(cur):
        col, row = cur.std(dim=0), cur.std(dim=1)
        return float(col.max() / col.min().clamp_min(1e-8) + row.max() / row.min().clamp_min(1e-8))

    best, best_c, best_r = imbalance(tile), log_c.exp(), log_r.exp()
    for _ in range(iterations):
        log_c = (log_c + scaled().std(dim=0).clamp(STD_MIN, STD_MAX).log()).clamp(LOG_S_MIN, LOG_S_MAX)
        log_r = (log_r + scaled().std(dim=1).clamp(STD_MIN, STD_MAX).log()).clamp(LOG_S_MIN, LOG_S_MAX)
        imb = imbalance(scaled())
        if imb <= best:
            best, best_c, best_r = imb, log_c.exp(), log_r.exp()
    return best_c, best_r


def _encode_ref(q, x: torch.Tensor, per_token: bool) -> dict:
    """Tile by tile: the [R, C] tile is [tokens, channels] for V, [channels, tokens] for K."""
    m, bs, kvh, d = x.shape
    levels = (1 << q.bits) - 1
    codes = torch.empty(m, bs, kvh, d, dtype=torch.uint8)
    row_s = torch.empty(m, kvh, bs if per_token else d, dtype=torch.float16)
    row_z, col_s = torch.empty_like(row_s), torch.empty(m, kvh, d if per_token else bs, dtype=torch.float16)
    for b in range(m):
        for h in range(kvh):
            tile = x[b, :, h].float() if per_token else x[b, :, h].float().T
            s_col, s_row = _balance_one(tile, q.iterations)
            bal = tile / s_col[None, :] / s_row[:, None]
            for r in range(tile.shape[0]):
                lo, hi = bal[r].min(), bal[r].max()
                scale = max(float(hi - lo) / levels, 1e-10)
                c = ((bal[r] - lo) / scale).round().clamp(0, levels).to(torch.uint8)
                if per_token:
                    codes[b, r, h] = c
                else:
                    codes[b, :, h, r] = c
                row_s[b, h, r], row_z[b, h, r] = float(s_row[r]) * scale, float(s_row[r] * lo)
            col_s[b, h] = s_col.half()
    if per_token:
        return {"codes": pack(codes, q.bits), "scale": row_s.transpose(1, 2).contiguous(),
                "zero": row_z.transpose(1, 2).contiguous(), "channel_scale": col_s}
    return {"codes": pack(codes, q.bits), "scale": row_s, "zero": row_z,
            "token_scale": col_s.transpose(1, 2).contiguous()}


def _unpack_ref(packed: torch.Tensor, bits: int) -> torch.Tensor:
    per, mask = 8 // bits, (1 << bits) - 1
    flat = packed.reshape(-1, packed.shape[-1])
    out = torch.empty(flat.shape[0], flat.shape[1] * per)
    for i, row in enumerate(flat.tolist()):
        out[i] = torch.tensor([(byte >> (bits * j)) & mask for byte in row for j in range(per)], dtype=torch.float32)
    return out.view(*packed.shape[:-1], -1)
