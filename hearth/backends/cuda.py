"""The CUDA backend: the Triton kernels of hearth.kernels.gpu, every launch checked-able
(hearth.kernels.gpu.launch). Weights of the types those kernels read stay GGUF blocks on the device;
other types (F16, BF16, F32, Q2_K, Q3_K) are expanded to bf16 (f32 for F32) and multiplied by torch.
Norms, q/k norm + rope, the KV write and attention over pages are Triton kernels; the activation and
residual adds torch ops. Token ids, positions and sampling stay on the host: the embedding's rows
go to the device, the logits come back.

KV caches: f16/bf16 pages, or a QuantizedKVCache of fp8_e4m3, q8_0 or q4_0 whose tensors live on the
device (kv_zeros) and whose blocks stay encoded there (hearth.kernels.gpu.quantized_attention); KVarN's
formats are refused before the load (kv_refusal), as the KV disk tier is.

Speculative decoding verifies chains and token trees below gm.GEMV_MAX_ROWS rows a step (row_regimes;
chains only over a quantized cache). Not yet (issue "One model definition over pluggable backends"):
CUDA graphs, and a run on a real GPU: the tests run every kernel, and whole models, in Triton's
interpreter on the CPU (CudaBackend(device="cpu"))."""

from __future__ import annotations

import torch
from torch import nn

from hearth.backends.base import Backend, ConvOps, LayerOps
from hearth.errors import UnsupportedError
from hearth.formats.weights import WEIGHT_FORMATS
from hearth.kernels.gpu import gguf_matmul as gm
from hearth.kernels.gpu.norm_rope import qk_norm_rope, rms_norm
from hearth.kernels.gpu.paged_attention import paged_attention, write_kv
from hearth.kernels.gpu.quantized_attention import quantized_attention, write_quantized
from hearth.kernels.gpu.quantized_attention import refusal as quantized_refusal
from hearth.kernels.step_metadata import AttentionMetadata
from hearth.layers.embedding import Embedding
from hearth.layers.linear import QuantLinear, build_linear
from hearth.layers.norm import RMSNorm
from hearth.layers.quant import as_bytes, dequantize
from hearth.layers.repack import dense_bf16
from hearth.loader.gguf_loader import GGUFTensor
from hearth.models.arch_spec import refusal


class TritonPart(nn.Module):
    """Weights of one block type, side by side: their GGUF blocks on the device, x @ W.T by
    hearth.kernels.gpu.gguf_matmul (GEMV for a few rows, tiles from there)."""

    in_dtype = torch.float32

    def __init__(self, ts: list[GGUFTensor], device: torch.device):
        super().__init__()
        self.qtype, self.k = ts[0].qtype, ts[0].shape[1]
        self.raw = torch.cat([as_bytes(t.data, t.qtype) for t in ts]).to(device)  # uint8 [N, bytes per row]
        self.out_features = self.raw.shape[0]

    @property
    def weight_bytes(self) -> int:
        return self.raw.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [M, K] -> f32 [M, N]
        return gm.gguf_matmul(x, self.raw, self.qtype, self.out_features, self.k)


class DeviceDense(nn.Module):
    """A weight the kernels do not read, expanded once: bf16 (f32 for F32) on the device."""

    def __init__(self, ts: list[GGUFTensor], device: torch.device):
        super().__init__()
        ws = [dequantize(t.data, t.qtype) if t.qtype.name == "F32" else dense_bf16(t) for t in ts]
        self.weight = torch.cat(ws).to(device)
        self.in_dtype, self.out_features = self.weight.dtype, self.weight.shape[0]

    @property
    def weight_bytes(self) -> int:
        return self.weight.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(self.weight.dtype) @ self.weight.T).float()


class DeviceEmbedding(Embedding):
    """Rows decoded on the host from the file's blocks, then sent to the device."""

    def __init__(self, t: GGUFTensor, device: torch.device):
        super().__init__(t)
        self.device = device

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return super().forward(ids.cpu()).to(self.device)


class TritonLayerOps(LayerOps):
    """The torch ops' steps with the norms and rope on the Triton kernels."""

    NAME = "the Triton layer ops"
    IMPLEMENTS = {f: None for f in ("neox_rope", "activation", "qk_norm", "sandwich_norm", "embed_scale", "moe",
                                    "lora", "attn_sinks")}  # the rest (olmo2's missing and whole norms): refused

    def norm(self, norm, x):
        return rms_norm(x, norm.weight, norm.eps, norm.out_dtype)

    def qk_rope(self, layer, qk, positions, meta):
        a = layer.attn
        if not a.rope.rot_dim:  # a NoPE layer (smollm3): at most its q/k norm
            if a.qk_norm is not None:
                a.qk_norm(qk, out=qk)
            return
        cos, sin = _device_tables(a.rope, positions, meta, qk.device)
        weight, eps = (None, 0.0) if a.qk_norm is None else (a.qk_norm.weight, a.qk_norm.eps)
        qk_norm_rope(qk, cos, sin, a.rope.neox, a.rope.rot_dim, weight, eps)


TRITON_OPS = TritonLayerOps()


class TritonConvOps(ConvOps):
    """A short-conv layer's steps with its norms on the Triton kernel."""

    norm = TritonLayerOps.norm


TRITON_CONV_OPS = TritonConvOps()


def _device_tables(rope, positions, meta: AttentionMetadata, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The rope's (cos, sin) for the step, on the device: once per step and rope configuration."""
    key = (*rope.key, "device")
    if key not in meta.memo.rope:
        cos, sin = rope.halves(positions.cpu(), meta.memo.rope)
        meta.memo.rope[key] = (cos.to(device), sin.to(device))
    return meta.memo.rope[key]


class CudaBackend(Backend):
    name = "cuda"

    def __init__(self, device: str | torch.device = "cuda"):
        self.device = torch.device(device)
        self.about = f"Triton kernels on {self.device}"

    def linear(self, t: GGUFTensor | list[GGUFTensor], bias: torch.Tensor | None = None) -> QuantLinear:
        paths = {q: "triton" if q in gm.QTYPES else "dense" for q in WEIGHT_FORMATS}
        builders = {"triton": lambda ts, _: TritonPart(ts, self.device), "dense": lambda ts, _: DeviceDense(ts, self.device)}
        lin = build_linear(t, bias, paths, builders)
        if lin.bias is not None:
            lin.bias = lin.bias.to(self.device)
        return lin

    def head(self, t: GGUFTensor) -> QuantLinear:
        return self.linear(t)

    def embedding(self, t: GGUFTensor) -> Embedding:
        return DeviceEmbedding(t, self.device)

    def layer_ops(self, layer, spec) -> LayerOps:
        layer.to(self.device)  # its norms' weights (the linears hold theirs on the device already)
        if why := refusal(TRITON_OPS.NAME, TRITON_OPS.IMPLEMENTS, spec):  # torch's ops read host tables: no fallback
            raise UnsupportedError(f"the CUDA backend cannot run this model yet: {why}")
        return TRITON_OPS

    def conv_ops(self, layer) -> ConvOps:
        layer.to(self.device)  # its norms' weights and conv taps; the conv itself: torch's, on the device
        return TRITON_CONV_OPS

    def norm(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        if norm.weight.device != self.device:  # the model's final norm, built after the layers
            norm.to(self.device)
        return TRITON_OPS.norm(norm, x)

    def kv_zeros(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, device=self.device)

    def kv_refusal(self, codec) -> str | None:
        return quantized_refusal(codec) if codec.quantized else None

    def write_kv(self, kv_cache, kv, meta):
        if isinstance(kv_cache, torch.Tensor):
            write_kv(kv_cache, kv, meta)
            return
        if why := quantized_refusal(kv_cache.codec):
            raise UnsupportedError(f"the CUDA backend has {why}")
        write_quantized(kv_cache, kv, meta)

    def attention(self, q, kv_cache, meta, scale, window, softcap, precise, sinks=None):
        # the Triton kernels have no sinks, and masks causal (and tree) only: the torch reference, on the device
        if sinks is not None or meta.bidirectional:
            return super().attention(q, kv_cache, meta, scale, window, softcap, precise, sinks)
        if isinstance(kv_cache, torch.Tensor):
            return paged_attention(q, kv_cache, meta, scale, window, softcap)
        return quantized_attention(q, kv_cache, meta, scale, window, softcap)

    def logits(self, head: QuantLinear, hidden: torch.Tensor, ids: torch.Tensor | None = None) -> torch.Tensor:
        logits = head(hidden).float().cpu()  # sampling runs on the host
        return logits if ids is None else logits[:, ids]

    def metadata(self, query_start_loc, seq_lens, block_tables, slots, block_size, trees=None) -> AttentionMetadata:
        return AttentionMetadata(query_start_loc, seq_lens, block_tables,
                                 torch.tensor(slots, dtype=torch.long, device=self.device), block_size, trees=trees or {})

    def row_regimes(self, model, quantized_kv: bool) -> tuple[int, ...] | None:
        """Below gm.GEMV_MAX_ROWS every kernel of a step computes a row alone, in the same program
        whatever the other rows (one GEMV program per activation row, row-wise attention below
        FLASH_MIN_ROWS rows of a sequence, norms and rope per row), so a verify row is a decode row;
        over a quantized cache too (such a step attends row-wise; a block encodes the same f16 values,
        and a row's own block is read in f16, whichever step sealed it); a weight expanded for torch's
        matmul (DeviceDense) sums rows as cuBLAS picks: None."""
        if any(isinstance(m, DeviceDense) for m in model.modules()):
            return None
        return (gm.GEMV_MAX_ROWS,)
