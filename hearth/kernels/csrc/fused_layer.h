// The whole decoder layer for a few rows (hk_layer_new, hk_layer_forward and its prefill, stack and
// quantized-cache forms) over the AVX-512 library's own entry points (hk_linear, hk_qk_rope, hk_mlp,
// hk_kv_write, the attentions). Included by gguf_kernels.cpp after those, outside its extern "C" block.
// The decode-tier libraries have their own (decode_library.h).
#pragma once

#include "layer.h"

extern "C" {

// ---- a whole decoder layer for a few rows (decodes, short chunks) in one call ----
// The same block as hearth.models.transformer.DecoderLayer with every attention over the paged
// f16/bf16 cache: saves the ~8 Python-level calls and temporaries per layer (~20% of a SmolLM2
// decode token).

thread_local std::vector<float, AlignedAlloc<float>> tmp_qkv, tmp_attn;
thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> tmp_attn16;

void* hk_layer_new(const void* qkv, const void* o, const void* gate_up, const void* down, const float* norms[6],
                   const float eps[5], int act, int neox, int64_t heads, int64_t kvh, int64_t d, int64_t rot,
                   int64_t window, float scale, float softcap) {
  if (d % 16 || heads % kvh || heads > MAX_TASK_HEADS || heads / kvh > 16 || !pick_attend(d / 16, false)) return nullptr;
  Layer* l = new Layer{static_cast<const Plan*>(qkv), static_cast<const Plan*>(o), static_cast<const Plan*>(gate_up),
                       static_cast<const Plan*>(down), norms[0], norms[1], norms[2], norms[3], norms[4], norms[5],
                       eps[0], eps[1], eps[2], eps[3], eps[4], scale, softcap, act, neox, heads, kvh, d, rot, window};
  return l;
}

void hk_layer_free(void* l) { delete static_cast<Layer*>(l); }

// The layer's q/k norm spans each whole projection (q's `qheads` heads, then k's), not each head (olmo2).
void hk_layer_qk_whole(void* l, int64_t qheads) { static_cast<Layer*>(l)->qk_whole = qheads; }

}  // extern "C"

namespace {

// The layer around its attention: attend(y, ldy, att, att16) gets the normed, rotated q | k | v rows
// (y: f32 [M, ldy]), stores the new K/V of all M and writes the attention output att: f32 [keep,
// heads * d] of the last `keep` rows, the only rows of x updated (the model's last layer needs the
// K/V of every row but the output of the rows it samples). PACKED (prefill attention): when every
// row goes on and the output projection runs on bf16 tiles, att16 is given instead of att, for the
// rows in that matmul's packed layout.
template <bool PACKED = false, class Attend>
int layer_forward(const Layer& l, float* x, int64_t M, int64_t keep, const float* cos, const float* sin,
                  const Attend& attend) {
  const int64_t hidden = l.qkv->K, n = l.qkv->N, nq = l.heads * l.d;
  float* y = scratch(tmp_qkv, M * n);
  // q | k normed and rotated as the matmul's row phase (on its threads, a decode's rows split)
  linear(*l.qkv, x, M, hidden, l.attn_norm, l.attn_eps, l.bias, y, n,
         QkRope{y, n, l.heads + l.kvh, l.d, l.rot, l.qk_norm, l.qk_eps, cos, sin, l.neox, l.qk_whole});
  const bool packed = PACKED && keep == M && bf16_tiles_for(*l.o, M);
  uint16_t* att16 = packed ? scratch(tmp_attn16, (M + 15) / 16 * 16 * nq) : nullptr;
  float* att = att16 ? nullptr : scratch(tmp_attn, std::max<int64_t>(1, keep) * nq);
  if (const int rc = attend(y, n, att, att16)) return rc;
  if (keep == 0) return 0;
  float* xk = x + (M - keep) * hidden;
  linear_residual(*l.o, att, att16, keep, nq, l.post_attn_norm, l.post_attn_eps, xk, hidden);
  hk_mlp(l.gate_up, l.down, l.act, xk, keep, hidden, l.ffn_norm, l.ffn_eps, l.post_ffn_norm, l.post_ffn_eps);
  return 0;
}

}  // namespace

extern "C" {

// x: the residual stream f32 [M, hidden] (contiguous), updated in place. cos, sin: [M, rot / 2];
// slots: [M] cache slots of the new tokens; the attention arguments as in hk_paged_attention.
int hk_layer_forward(const void* layer, float* x, int64_t M, const float* cos, const float* sin, void* kv,
                     int kv_bf16, int64_t num_slots, int64_t bs, const int64_t* slots, int64_t S,
                     const int64_t* q_start, const int64_t* q_len, const int64_t* seq_lens, const int64_t* tables,
                     int64_t ldt, const int64_t* tree, int64_t ldtree) {
  const Layer& l = *static_cast<const Layer*>(layer);
  const int64_t nq = l.heads * l.d;
  return layer_forward(l, x, M, M, cos, sin, [&](float* y, int64_t ldy, float* att, uint16_t*) {
    hk_kv_write(y + nq, ldy, M, slots, kv, kv_bf16, num_slots, l.kvh * l.d);
    return hk_paged_attention(y, ldy, kv, kv_bf16, num_slots, bs, l.heads, l.kvh, l.d, S, q_start, q_len, seq_lens,
                              tables, ldt, l.scale, l.window, l.softcap, att, nq, tree, ldtree);
  });
}

// The same layer for one sequence's long chunk (a prefill) over an f16/bf16 cache: the M new rows are
// the last M of its ctx tokens, in the blocks `table`; attention on AMX tiles (hk_prefill_attention).
// Only the last `keep` rows (0 .. M) go on past attention, as in layer_forward. Non-zero where that
// kernel does not cover the shape, x untouched (a fallback writes the same K/V).
int hk_layer_forward_prefill(const void* layer, float* x, int64_t M, int64_t keep, const float* cos, const float* sin,
                             void* kv, int kv_bf16, int64_t num_slots, int64_t bs, const int64_t* slots, int64_t ctx,
                             const int64_t* table) {
  const Layer& l = *static_cast<const Layer*>(layer);
  const int64_t nq = l.heads * l.d;
  return layer_forward<true>(l, x, M, keep, cos, sin, [&](float* y, int64_t ldy, float* att, uint16_t* att16) {
    hk_kv_write(y + nq, ldy, M, slots, kv, kv_bf16, num_slots, l.kvh * l.d);
    if (keep == 0) return 0;
    return prefill_attention(y, ldy, kv, kv_bf16, num_slots, bs, l.heads, l.kvh, l.d, M, ctx, table, l.scale, l.window,
                             l.softcap, M - keep, att, nq, att16);
  });
}

// hk_layer_forward_prefill through a stack of n layers (a model's decoder) in one call: layer i
// with cos[i], sin[i] and its cache kv[i] (every cache of one dtype and shape), only the last layer
// keeping `keep` rows. A return to Python between layers ran its first ops from cold caches (~0.1
// ms a layer). Returns the number of layers run: fewer than n where a layer's kernel does not
// cover the shape (x as that layer found it; the caller goes on from there).
int hk_stack_forward_prefill(const void* const* layers, int n, float* x, int64_t M, int64_t keep,
                             const float* const* cos, const float* const* sin, void* const* kv, int kv_bf16,
                             int64_t num_slots, int64_t bs, const int64_t* slots, int64_t ctx, const int64_t* table) {
  for (int i = 0; i < n; ++i)
    if (hk_layer_forward_prefill(layers[i], x, M, i == n - 1 ? keep : M, cos[i], sin[i], kv[i], kv_bf16, num_slots, bs,
                                 slots, ctx, table) != 0)
      return i;
  return n;
}

// The same layer over a quantized cache (hk_kvq_attention) in a step that seals no block: every new
// token's K/V (rotated first when `rotate`, like hearth.kvstore.paged.QuantizedKVCache.write) goes to
// its f16 staging position stage_dst[t] (flat: slot * bs + offset). The cache and sequence arguments
// as in hk_kvq_attention, with no fresh blocks.
int hk_layer_forward_kvq(const void* layer, float* x, int64_t M, const float* cos, const float* sin, int kfmt,
                         int vfmt, const int64_t* fields, void* staging, int64_t slots, int64_t bs,
                         const int64_t* stage_dst, int rotate, int64_t S, const int64_t* q_start,
                         const int64_t* q_len, const int64_t* seq_lens, const int64_t* tables, int64_t ldt,
                         const int64_t* sink, const int64_t* fresh_refs, int64_t ldf) {
  const Layer& l = *static_cast<const Layer*>(layer);
  const int64_t nq = l.heads * l.d, nkv = l.kvh * l.d;
  return layer_forward(l, x, M, M, cos, sin, [&](float* y, int64_t ldy, float* att, uint16_t*) {
    if (rotate && hk_hadamard(y + nq, ldy, M, 2 * nkv, l.d, y + nq, ldy) != 0) return -1;
    hk_kv_write(y + nq, ldy, M, stage_dst, staging, 0, slots * bs, nkv);
    return hk_kvq_attention(y, ldy, kfmt, vfmt, fields, staging, slots, nullptr, 0, bs, l.heads, l.kvh, l.d, S,
                            q_start, q_len, seq_lens, tables, ldt, sink, fresh_refs, ldf, rotate, l.scale, l.window,
                            l.softcap, att, nq);
  });
}

}  // extern "C"
