"""The fp8_e4m3, q8_0 and q4_0 KV codecs in Triton: encode a sealed block, and decode codes in registers
inside the attention kernels (hearth.kernels.gpu.quantized_attention). Bit for bit the torch codecs
(hearth.kvstore.fp8.FP8E4M3, hearth.kvstore.ggml.Q8_0 and Q4_0), whose field layouts they read and write:

  fp8_e4m3  values [nb, bs, kvh, d] e4m3fn bytes, scale [nb, kvh] f32 (the block's |max| / 448)
  q8_0      raw [nb, bs, kvh, d // 32, 34]: ggml's block_q8_0, f16 d then 32 int8
  q4_0      raw [nb, bs, kvh, d // 32, 18]: ggml's block_q4_0, f16 d then 16 bytes of nibbles

e4m3 is converted by integer arithmetic, not Triton's fp8 casts: the interpreter's cast does not round
to nearest even, and the hardware's needs sm_89. Divisions are div_rn and the encoders run without
mul+add fusion, so the GPU rounds each step as torch does on the CPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from hearth.kernels.gpu.launch import Rows, launch

FP8_CODE, Q8_0_CODE, Q4_0_CODE = 1, 2, 3
"""The attention kernels' CODEC constexpr (0: the f16/bf16 pages of a plain cache)."""


@triton.jit
def fp8_bits(y):
    """f32 in [-448, 448] -> its e4m3fn byte (int32), rounded to nearest even like torch's cast."""
    bits = y.to(tl.int32, bitcast=True)
    a = tl.abs(y)
    abits = a.to(tl.int32, bitcast=True)
    normal = ((abits + 0x7FFFF + ((abits >> 20) & 1)) >> 20) - (120 << 3)  # 3 mantissa bits, bias 127 -> 7
    tiny = (a + 16384.0).to(tl.int32, bitcast=True) - 0x46800000  # below 2^-6: multiples of 2^-9, the add rounds
    code = tl.where(a < 0.015625, tiny, normal)
    return code | ((bits >> 24) & 0x80)


@triton.jit
def fp8_value(code):
    """e4m3fn byte (int32) -> f32 (exact; 0x7f/0xff, NaN, never written by the encoder)."""
    e = (code >> 3) & 15
    m = code & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    mag = tl.where(e > 0, normal, m.to(tl.float32) * 0.001953125)
    return tl.where((code & 0x80) != 0, -mag, mag)


@triton.jit
def decode_tile(codes, scales, blk, kvh, live, KVH, BS: tl.constexpr, D: tl.constexpr, CODEC: tl.constexpr):
    """[BS, D] f32: the values of sealed block blk (int64), kv head kvh, as the torch codec decodes them;
    live: [BS, 1] the tokens to read (the others 0)."""
    d = tl.arange(0, D)
    at_tok = (blk * BS + tl.arange(0, BS)) * KVH + kvh  # [BS]: (block, token, head) index
    if CODEC == 1:
        b = tl.load(codes + at_tok[:, None] * D + d[None, :], mask=live, other=0).to(tl.int32)
        return fp8_value(b) * tl.load(scales + blk * KVH + kvh)
    elif CODEC == 2:
        at = at_tok[:, None] * (D // 32 * 34) + (d[None, :] // 32) * 34  # [BS, D]: each value's ggml block
        q = tl.load(codes + at + 2 + d[None, :] % 32, mask=live, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        lo = tl.load(codes + at, mask=live, other=0).to(tl.int32)
        hi = tl.load(codes + at + 1, mask=live, other=0).to(tl.int32)
        scale = (lo | (hi << 8)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        return q * scale
    else:
        j = d[None, :] % 32
        at = at_tok[:, None] * (D // 32 * 18) + (d[None, :] // 32) * 18  # [BS, D]: each value's ggml block
        byte = tl.load(codes + at + 2 + j % 16, mask=live, other=0).to(tl.int32)
        q = (tl.where(j < 16, byte & 15, byte >> 4) - 8).to(tl.float32)
        lo = tl.load(codes + at, mask=live, other=0).to(tl.int32)
        hi = tl.load(codes + at + 1, mask=live, other=0).to(tl.int32)
        return q * (lo | (hi << 8)).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def fp8_encode_kernel(fresh, seal, k_values, k_scale, v_values, v_scale, s_kv, KVH, BS: tl.constexpr, D: tl.constexpr):
    """Program (i, h): sealed block i (fresh f16 [2, m, BS, KVH, D]) of kv head h -> block seal[i]'s
    e4m3 values and its f32 scale, K then V (FP8E4M3.encode: y = clamp(x / scale, +-448))."""
    i, h = tl.program_id(0), tl.program_id(1)
    blk = tl.load(seal + i).to(tl.int64)
    tok = tl.arange(0, BS)
    d = tl.arange(0, D)
    src = ((i.to(tl.int64) * BS + tok[:, None]) * KVH + h) * D + d[None, :]  # [BS, D]
    dst = ((blk * BS + tok[:, None]) * KVH + h) * D + d[None, :]
    for part in tl.static_range(2):
        x = tl.load(fresh + part * s_kv + src).to(tl.float32)
        amax = tl.max(tl.max(tl.abs(x), axis=1), axis=0)
        scale = tl.where(amax > 0, tl.math.div_rn(amax, 448.0), 1.0)
        y = tl.minimum(tl.maximum(tl.math.div_rn(x, scale), -448.0), 448.0)
        code = fp8_bits(y).to(tl.uint8)
        if part == 0:
            tl.store(k_values + dst, code)
            tl.store(k_scale + blk * KVH + h, scale)
        else:
            tl.store(v_values + dst, code)
            tl.store(v_scale + blk * KVH + h, scale)


@triton.jit
def q8_0_encode_kernel(fresh, seal, k_raw, v_raw, s_kv, KVH, BS: tl.constexpr, D: tl.constexpr):
    """Program (i, h, c): sealed block i (fresh f16 [2, m, BS, KVH, D]), kv head h, values 32c .. 32c + 31 of
    each token -> one ggml block_q8_0 per token, K then V (Q8_0.encode: ggml's quantize_row_q8_0_ref)."""
    i, h, c = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    blk = tl.load(seal + i).to(tl.int64)
    tok = tl.arange(0, BS)
    j = tl.arange(0, 32)
    src = ((i.to(tl.int64) * BS + tok[:, None]) * KVH + h) * D + c * 32 + j[None, :]  # [BS, 32]
    dst = (((blk * BS + tok) * KVH + h) * (D // 32) + c) * 34  # [BS]: each token's block
    for part in tl.static_range(2):
        x = tl.load(fresh + part * s_kv + src).to(tl.float32)
        scale = tl.math.div_rn(tl.max(tl.abs(x), axis=1), 127.0)  # [BS]
        inv = tl.where(scale > 0, tl.math.div_rn(1.0, tl.where(scale > 0, scale, 1.0)), 0.0)
        v = x * inv[:, None]
        r = tl.floor(tl.abs(v) + 0.5)  # C's roundf: half away from zero
        q = tl.where(v < 0, -r, r).to(tl.int8).to(tl.uint8, bitcast=True)
        bits = scale.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
        raw = k_raw if part == 0 else v_raw
        tl.store(raw + dst, (bits & 0xFF).to(tl.uint8))
        tl.store(raw + dst + 1, (bits >> 8).to(tl.uint8))
        tl.store(raw + dst[:, None] + 2 + j[None, :], q)


@triton.jit
def q4_0_encode_kernel(fresh, seal, k_raw, v_raw, s_kv, KVH, BS: tl.constexpr, D: tl.constexpr):
    """Program (i, h, c): as q8_0_encode_kernel, one ggml block_q4_0 per token (Q4_0.encode: ggml's
    quantize_row_q4_0_ref: d = the signed value of the first largest |x| / -8, q = min(15, trunc(x / d + 8.5)),
    values 0..15 in the low nibbles, 16..31 in the high ones)."""
    i, h, c = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    blk = tl.load(seal + i).to(tl.int64)
    tok = tl.arange(0, BS)
    j = tl.arange(0, 16)
    src = ((i.to(tl.int64) * BS + tok[:, None]) * KVH + h) * D + c * 32 + j[None, :]  # [BS, 16]: the low half
    dst = (((blk * BS + tok) * KVH + h) * (D // 32) + c) * 18  # [BS]: each token's block
    for part in tl.static_range(2):
        lo = tl.load(fresh + part * s_kv + src).to(tl.float32)
        hi = tl.load(fresh + part * s_kv + src + 16).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(lo), axis=1), tl.max(tl.abs(hi), axis=1))[:, None]  # [BS, 1]
        first = tl.minimum(tl.min(tl.where(tl.abs(lo) == amax, j[None, :], 32), axis=1),
                           tl.min(tl.where(tl.abs(hi) == amax, j[None, :] + 16, 32), axis=1))[:, None]
        signed = tl.maximum(tl.max(tl.where(j[None, :] == first, lo, -float("inf")), axis=1),
                            tl.max(tl.where(j[None, :] + 16 == first, hi, -float("inf")), axis=1))  # its sign kept
        scale = tl.math.div_rn(signed, -8.0)  # [BS]
        inv = tl.where(scale != 0, tl.math.div_rn(1.0, tl.where(scale != 0, scale, 1.0)), 0.0)[:, None]
        q_lo = tl.minimum(tl.maximum((lo * inv + 8.5).to(tl.int32), 0), 15)
        q_hi = tl.minimum(tl.maximum((hi * inv + 8.5).to(tl.int32), 0), 15)
        bits = scale.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
        raw = k_raw if part == 0 else v_raw
        tl.store(raw + dst, (bits & 0xFF).to(tl.uint8))
        tl.store(raw + dst + 1, (bits >> 8).to(tl.uint8))
        tl.store(raw + dst[:, None] + 2 + j[None, :], (q_lo | (q_hi << 4)).to(tl.uint8))


@dataclass(frozen=True, slots=True)
class GpuCodec:
    """How the Triton kernels hold one torch codec's fields: the attention kernels' CODEC id, and
    the encoder's launch for a step's sealed blocks."""

    code: int
    encode: object

    def fields(self, part: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes, scales) as the attention kernels read them (uint8 views; q8_0's scales sit in its codes)."""
        if self.code == FP8_CODE:
            return part["values"].view(torch.uint8), part["scale"]
        return part["raw"], part["raw"]


def _encode_fp8(fresh: torch.Tensor, seal: torch.Tensor, store: dict) -> None:
    _, m, bs, kvh, d = fresh.shape
    k, v = store["k"], store["v"]
    args = dict(fresh=fresh, seal=seal, k_values=k["values"].view(torch.uint8), k_scale=k["scale"],
                v_values=v["values"].view(torch.uint8), v_scale=v["scale"], s_kv=fresh.stride(0), KVH=kvh)
    per_head = Rows("seal", dim=0, split=((1, 2, 1),))
    launch(fp8_encode_kernel, (m, kvh), args,
           {"k_values": per_head, "v_values": per_head, "k_scale": Rows("seal", split=((1, 1, 1),)),
            "v_scale": Rows("seal", split=((1, 1, 1),))}, ("fresh", "seal"), BS=bs, D=d, enable_fp_fusion=False)


def _ggml_encoder(kernel):
    def encode(fresh: torch.Tensor, seal: torch.Tensor, store: dict) -> None:
        _, m, bs, kvh, d = fresh.shape
        args = dict(fresh=fresh, seal=seal, k_raw=store["k"]["raw"], v_raw=store["v"]["raw"], s_kv=fresh.stride(0), KVH=kvh)
        per_block = Rows("seal", dim=0, split=((1, 2, 1), (2, 3, 1)))
        launch(kernel, (m, kvh, d // 32), args, {"k_raw": per_block, "v_raw": per_block}, ("fresh", "seal"),
               BS=bs, D=d, enable_fp_fusion=False)
    return encode


GPU_CODECS = {"fp8_e4m3": GpuCodec(FP8_CODE, _encode_fp8), "q8_0": GpuCodec(Q8_0_CODE, _ggml_encoder(q8_0_encode_kernel)),
              "q4_0": GpuCodec(Q4_0_CODE, _ggml_encoder(q4_0_encode_kernel))}
"""By the torch codec's name (hearth.kvstore.codecs.QuantCodec.name); K and V share one codec here."""


def encode_blocks(name: str, fresh: torch.Tensor, seal: torch.Tensor, store: dict) -> None:
    """fresh: f16 [2, m, bs, kv_heads, head_dim] (K, V of the step's full blocks) -> the codec's fields of
    blocks seal (int64 [m], on the device) in store ({"k": fields, "v": fields}, each [num_blocks, ...])."""
    if seal.numel():
        GPU_CODECS[name].encode(fresh.contiguous(), seal, store)
