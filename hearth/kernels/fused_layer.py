"""A whole decoder layer in one C++ call (hk_layer_forward in csrc/fused_layer.h) for steps of a
few rows and for one sequence's prefill chunk (hk_layer_forward_prefill): norm, q|k|v, q/k norm and
rope, KV write, attention, output projection and MLP with their residual adds. Over an f16/bf16
paged cache, or a quantized one (hk_layer_forward_kvq) in the steps that only stage new tokens (a
step that fills a block, one in block_size decode steps, encodes it through hearth.kvstore.paged
and runs the layer in parts). The per-step arguments (slots, block tables) are packed once per step
on the AttentionMetadata and shared by every layer."""

from __future__ import annotations

import ctypes
import weakref

import torch

from hearth.kernels import native
from hearth.kernels.attention import native_pages, quantized_native_args
from hearth.kernels.native import NativeMatmul

_p, _i64, _int, _f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
_declared = False


LAYER_SIGNATURES = {  # name: (restype, argtypes)
    "hk_layer_new": (_p, [_p, _p, _p, _p, _p, _p, _int, _int, _i64, _i64, _i64, _i64, _i64, _f32, _f32]),
    "hk_layer_free": (None, [_p]),
    "hk_layer_qk_whole": (None, [_p, _i64]),
    "hk_layer_forward": (_int, [_p, _p, _i64, _p, _p, _p, _int, _i64, _i64, _p, _i64, _p, _p, _p, _p, _i64,
                                _p, _i64]),
    "hk_stack_forward": (_int, [_p, _int, _p, _i64, _p, _p, _p, _int, _i64, _i64, _p, _i64, _p, _p, _p, _p, _i64,
                                _p, _i64]),
    "hk_stack_forward_prefill": (_int, [_p, _int, _p, _i64, _i64, _p, _p, _p, _int, _i64, _i64, _p, _i64, _p]),
    "hk_layer_forward_kvq": (_int, [_p, _p, _i64, _p, _p, _int, _int, _p, _p, _i64, _i64, _p, _int, _i64, _p,
                                    _p, _p, _p, _i64, _p, _p, _i64]),
    "hk_lora_new": (_p, [_p, _p, _p, _p, _p, _p]),  # hearth.kernels.fused_lora's
    "hk_lora_free": (None, [_p]),
    "hk_stack_forward_lora": (_int, [_p, _p, _int, _p, _i64, _p, _i64, _p, _p, _p, _int, _i64, _i64, _p, _i64, _p, _p,
                                     _p, _p, _i64, _p, _i64]),
}


def _lib() -> ctypes.CDLL:
    global _declared
    so = native.lib()
    if not _declared:
        for name, (res, args) in LAYER_SIGNATURES.items():
            if name in native.entry_points():  # those of the library's capabilities
                fn = getattr(so, name)
                fn.restype, fn.argtypes = res, args
        _declared = True
    return so


class FusedLayer:
    NAME = "the fused C++ decoder layer"
    IMPLEMENTS = {  # hearth.models.arch_spec.ArchSpec field -> values it runs (None: all); the rest refused
        "neox_rope": None,  # both rope layouts (hk_qk_rope's neox flag)
        "activation": tuple(native.ACTIVATIONS),
        "qk_norm": None,  # the per-head norm pointer
        "sandwich_norm": None,  # the post-attention and post-MLP norm pointers
        "embed_scale": None,  # before the first layer (the model's embedding step): no layer's concern
        "pre_norm": None,  # no norm before attention and the MLP: null norm pointers
        "qk_norm_whole": None,  # hk_layer_qk_whole: q's and k's norm each over its whole projection
    }
    """What DecoderLayer may hand it, and the C++ layer in parts (the same kernels, op by op)."""

    def __init__(self, mms: tuple[NativeMatmul, ...], norms: list[torch.Tensor | None], eps: list[float],
                 activation: str, neox: bool, heads: int, kv_heads: int, head_dim: int, rot: int, window: int,
                 scale: float, softcap: float, qk_whole: bool = False):
        """mms: qkv, o, gate_up, down; norms: attn, qkv bias, q|k (per head, or with qk_whole q's whole projection
        then k's), post-attn, ffn, post-ffn (f32, None where the architecture has none); eps: attn, q|k,
        post-attn, ffn, post-ffn."""
        self.lib = _lib()
        self.mms, self.norms = mms, norms  # keep the memory the C++ side points at alive
        ptrs = (_p * 6)(*[None if t is None else t.data_ptr() for t in norms])
        self.ptr = self.lib.hk_layer_new(*(m.plan for m in mms), ptrs, (_f32 * 5)(*eps), native.ACTIVATIONS[activation],
                                         int(neox), heads, kv_heads, head_dim, rot, window, scale, softcap)
        if self.ptr:  # freed before the plans it points at (they are kept alive by self.mms till then)
            self._free = weakref.finalize(self, self.lib.hk_layer_free, self.ptr)
            if qk_whole:
                self.lib.hk_layer_qk_whole(self.ptr, heads)

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache, meta) -> bool:
        """x: the residual stream f32 [M, hidden], contiguous, updated in place. False: not run (the
        cache, or this step over a quantized cache, is one the fused call does not cover)."""
        if not self.ptr or not x.is_contiguous():
            return False
        head = (self.ptr, x.data_ptr(), x.shape[0], cos.data_ptr(), sin.data_ptr())
        if native_pages(x, kv_cache):
            rc = self.lib.hk_layer_forward(*head, kv_cache.data_ptr(), *step_args(kv_cache, meta))
        elif native.has("kv_quant"):
            cache_args = _quantized_cache_args(x, kv_cache, meta)
            if cache_args is None:
                return False
            rc = self.lib.hk_layer_forward_kvq(*head, *cache_args, *_quantized_step_args(kv_cache, meta))
        else:
            return False
        return rc == 0


    def prefill(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv_cache, meta, keep: int) -> bool:
        """The same for a step that is one sequence's long chunk over an f16/bf16 cache, attention on
        AMX tiles (~8 Python-level calls per layer fewer); past the K/V, only the last `keep` rows of
        x are computed (and updated). False: not run (another step, cache or CPU)."""
        return bool(self.ptr) and _prefill(self.lib, (_p * 1)(self.ptr), x, [(cos, sin)], [kv_cache], meta, keep) == 1


class FusedStack:
    """A model's fused layers, all of them, in one C++ call: one sequence's prefill chunk
    (hk_stack_forward_prefill) or a decode step (hk_stack_forward): no return to Python between layers."""

    def __init__(self, layers: list[FusedLayer]):
        self.lib = _lib()
        self.layers = layers  # keep the C++ layers alive
        self.ptrs = (_p * len(layers))(*[layer.ptr for layer in layers])
        self.built = all(layer.ptr for layer in layers)  # every C++ layer made (read every step: not the array)
        self.kv_key, self.kv_ptrs = None, None  # decode's caches, checked and their addresses

    def prefill(self, x: torch.Tensor, tables: list[tuple[torch.Tensor, torch.Tensor]], kv_caches: list, meta,
                keep: int) -> int:
        """FusedLayer.prefill through every layer, layer i with its (cos, sin) tables[i] and cache
        kv_caches[i]; only the last layer keeps just `keep` rows. Returns the number of layers run
        (0 where the step or cache is not one this call covers; the caller runs the rest)."""
        return _prefill(self.lib, self.ptrs, x, tables, kv_caches, meta, keep) if self.built else 0

    def decode(self, x: torch.Tensor, tables: list[tuple[torch.Tensor, torch.Tensor]], kv_caches: list, meta) -> int:
        """FusedLayer.__call__ through every layer in one C++ call (hk_stack_forward): a step of a few
        rows over f16/bf16 caches of one dtype and shape (as the runner allocates them), x updated in
        place. Returns the number of layers run (0 where the step or cache is not one it covers)."""
        args = self.decode_args(x, tables, kv_caches, meta)
        return 0 if args is None else self.lib.hk_stack_forward(self.ptrs, len(self.layers), x.data_ptr(), x.shape[0],
                                                                *args)

    def decode_args(self, x: torch.Tensor, tables: list[tuple[torch.Tensor, torch.Tensor]], kv_caches: list,
                    meta) -> tuple | None:
        """hk_stack_forward's arguments after x and its rows (tables, caches, the step's), or None where
        the step or cache is not one it covers."""
        kv, n = kv_caches[0], len(kv_caches)
        if not self.built or not x.is_contiguous() or n != len(self.layers):
            return None
        if not all(isinstance(c, torch.Tensor) for c in kv_caches):  # quantized caches: layer by layer
            return None
        # checked once, not every step (~25 us); the key itself from map()s, not a generator of pairs
        key = (kv.dtype, kv.shape, *map(id, kv_caches), *[c.data_ptr() for c in kv_caches])
        if self.kv_key != key:
            ok = all(native_pages(x, c) and c.dtype == kv.dtype and c.shape == kv.shape for c in kv_caches)
            self.kv_key, self.kv_ptrs = key, (_p * n)(*[c.data_ptr() for c in kv_caches]) if ok else None
        if self.kv_ptrs is None or x.dtype != torch.float32:
            return None
        return ((_p * n)(*[c.data_ptr() for c, _ in tables]), (_p * n)(*[s.data_ptr() for _, s in tables]),
                self.kv_ptrs, *step_args(kv, meta))


def _prefill(lib, layers, x: torch.Tensor, tables: list, kv_caches: list, meta, keep: int) -> int:
    """hk_stack_forward_prefill over `layers` (C++ layer pointers): how many of them ran, 0 when the
    step is not one sequence's chunk over f16/bf16 caches (every cache of the first's dtype and
    shape, as the runner allocates them) on a CPU with bf16 tiles."""
    kv = kv_caches[0]
    if (not x.is_contiguous() or len(meta.seq_lens) != 1 or not all(native_pages(x, c) for c in kv_caches)
            or not native.bf16_tiles() or meta.trees):  # the tile kernel has no tree remap
        return 0
    n, (_, nb, bs, _, _) = len(kv_caches), kv.shape
    ptrs = lambda ts: (_p * n)(*[t.data_ptr() for t in ts])  # noqa: E731
    return lib.hk_stack_forward_prefill(layers, n, x.data_ptr(), x.shape[0], keep, ptrs(c for c, _ in tables),
                                        ptrs(s for _, s in tables), ptrs(kv_caches), int(kv.dtype == torch.bfloat16),
                                        nb * bs, bs, meta.slot_mapping.data_ptr(), meta.seq_lens[0],
                                        meta.table_tensor(0).data_ptr())


def step_args(kv_cache: torch.Tensor, meta) -> tuple:
    """The step's cache geometry, slots and attention arguments as plain ints, built once per step."""
    memo, key = meta.memo.kernel_args, ("fused_layer", kv_cache.dtype, kv_cache.shape)
    if key not in memo:
        big, (q_start, q_len, seq_lens, tables) = meta.native_split()
        assert not big, "a fused layer step has only short sequences"
        _, nb, bs, _, _ = kv_cache.shape
        tree = meta.tree_rows()  # a token tree's rows attend along their paths, as in paged_attention
        memo[key] = (int(kv_cache.dtype == torch.bfloat16), nb * bs, bs, meta.slot_mapping.data_ptr(),
                           q_start.shape[0], q_start.data_ptr(), q_len.data_ptr(), seq_lens.data_ptr(),
                           tables.data_ptr(), tables.stride(0), None if tree is None else tree.data_ptr(),
                           0 if tree is None else tree.stride(0))
    return memo[key]


def _quantized_cache_args(x: torch.Tensor, cache, meta) -> tuple | None:
    """A hearth.kvstore.paged.QuantizedKVCache's formats and addresses, or None when the fused call
    does not cover this step (it seals a block, or a format has no native reader)."""
    plan = meta.kv_plan
    if x.dtype != torch.float32 or plan is None or plan.seal_blocks.numel():
        return None
    formats = native.kvq_formats(cache.codec)
    if formats is None:
        return None
    cache.ensure_slots(plan.num_slots)
    return (*formats, cache.field_ptrs.data_ptr(), cache.staging.data_ptr(), cache.staging.shape[1], cache.bs,
            plan.stage_dst.data_ptr(), int(cache.rotation is not None))


def _quantized_step_args(cache, meta) -> tuple:
    memo, key = meta.memo.kernel_args, ("fused_layer_kvq", cache.bs)
    if key not in memo:
        big, (q_start, q_len, seq_lens, tables, sinks, fresh) = quantized_native_args(meta, cache.bs)
        assert not big, "a fused layer step has only short sequences"
        memo[key] = (q_start.shape[0], q_start.data_ptr(), q_len.data_ptr(), seq_lens.data_ptr(),
                           tables.data_ptr(), tables.stride(0), sinks.data_ptr(), fresh.data_ptr(), fresh.stride(0))
    return memo[key]
