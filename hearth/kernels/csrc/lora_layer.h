// LoRA adapter terms inside the fused decoder layer (hearth.layers.lora's math, per row):
//   y[m] += B (s_m,adapter(r) * factor(r) * (A x[m]))   after each of the layer's four matmuls,
// added where the op-by-op path adds it: q|k|v after the bias and before q/k norm and rope; the output
// projection and down before their post-norm and residual add; gate|up before the activation.
// hk_lora_new holds a layer's terms (f32 A and B as LoraLinear stacks them); hk_stack_forward_lora is
// hk_stack_forward with the step's per-row adapter scales, a layer without terms running
// hk_layer_forward. A row whose scales are all 0 gets no term: the base layer's bits.
//
// One definition for every kernel library (gguf_kernels.cpp, and the decode tiers through
// decode_library.h): it uses only what each provides under the same names (Plan, Layer, matmul,
// rmsnorm_row, act_mul, add_residual, scratch, hk_linear, hk_qk_rope, hk_kv_write, hk_paged_attention,
// hk_layer_forward), so each includes this once, after them, outside its own anonymous namespace.
// The term's loops are plain C++ the compiler vectorizes (ranks are small: A x is K x R multiply-adds).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

struct LoraLinear {  // one linear's terms; R == 0: none
  int64_t K = 0, N = 0, R = 0, n_terms = 0;
  const float* a = nullptr;  // [K, R]: every term's A, transposed, side by side along R
  const float* b = nullptr;  // [R, N]: term t's B in rows c0 .. c0 + rank, columns start .. start + width
  const int64_t* adapter = nullptr;  // [R]: the adapter (a column of the step's scales) of each rank column
  const float* factor = nullptr;  // [R]: alpha / rank of each rank column
  const int64_t* terms = nullptr;  // [n_terms, 4]: c0, rank, start, width
};

struct LoraLayer {
  LoraLinear lin[4];  // q|k|v, the output projection, gate|up, down (Layer's plans)
};

thread_local std::vector<float> lora_h, lora_xn, lora_qkv, lora_att, lora_mid, lora_out;

// The threads split a call's terms from this much work on (bytes of A and B x rows): each split is a
// parallel region and a barrier, which a loaded machine's descheduled thread holds for a time slice.
// SmolLM2-135M, rank 16, 2 threads at load 3-9: split from 64 KB 0.48-1.17x of the base model's decode
// across four runs, unsplit 0.96-0.98x in three of them (an idle machine gains ~0.5 ms a token from it).
constexpr double LORA_SPLIT_WORK = 1 << 20;
constexpr int64_t LORA_COLS = 8;  // a thread's share of rank columns or outputs: whole vectors of 8
constexpr int64_t LORA_BLOCK = 256;  // outputs summed over the ranks in an L1-resident block, then added to y

// [lo, hi) of n in whole LORA_COLS for thread t of T
inline void lora_share(int64_t n, int t, int T, int64_t& lo, int64_t& hi) {
  const int64_t v = (n + LORA_COLS - 1) / LORA_COLS;
  lo = std::min(n, v * t / T * LORA_COLS);
  hi = std::min(n, v * (t + 1) / T * LORA_COLS);
}

// Rows m < M of y (row stride ldy) += the terms of x's rows (row stride ldx); s: the step's scales [M,
// adapters] (row stride lds; 0: one row for every row). As LoraLinear.forward: h = (x A) * (s * factor),
// then each output gets the sum over its term's ranks of h B, added to y once. The threads split A's
// rank columns, then the outputs: each value is summed in the same order at any thread count.
void lora_add(const LoraLinear& L, const float* x, int64_t ldx, int64_t M, const float* s, int64_t lds, float* y,
              int64_t ldy) {
  if (L.R == 0) return;
  const int64_t R = L.R;
  float* h = scratch(lora_h, M * R);  // [M, R]
  const double bytes = static_cast<double>(L.K + L.N) * R * 4;
#pragma omp parallel num_threads(bytes * M < LORA_SPLIT_WORK ? 1 : omp_get_max_threads())
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    int64_t r0, r1;
    lora_share(R, t, T, r0, r1);
    for (int64_t m = 0; m < M; ++m) {
      float* hm = h + m * R;
      const float* xm = x + m * ldx;
      std::fill(hm + r0, hm + r1, 0.0f);
      for (int64_t k = 0; k < L.K; ++k) {
        const float xk = xm[k];
        const float* ak = L.a + k * R;
        for (int64_t r = r0; r < r1; ++r) hm[r] += xk * ak[r];
      }
      for (int64_t r = r0; r < r1; ++r) hm[r] *= s[m * lds + L.adapter[r]] * L.factor[r];
    }
#pragma omp barrier
    for (int64_t i = 0; i < L.n_terms; ++i) {
      const int64_t* d = L.terms + 4 * i;
      const int64_t c0 = d[0], rank = d[1], start = d[2], width = d[3];
      int64_t n0, n1;
      lora_share(width, t, T, n0, n1);
      for (int64_t m = 0; m < M; ++m) {
        bool any = false;
        for (int64_t r = c0; r < c0 + rank; ++r) any |= h[m * R + r] != 0.0f;
        if (!any) continue;  // this term's scale 0 on this row: nothing to add (a row at 0: the base's values)
        float acc[LORA_BLOCK];
        for (int64_t b0 = n0; b0 < n1; b0 += LORA_BLOCK) {
          const int64_t w = std::min(LORA_BLOCK, n1 - b0);
          std::fill(acc, acc + w, 0.0f);
          for (int64_t r = c0; r < c0 + rank; ++r) {
            const float hr = h[m * R + r];
            const float* br = L.b + r * L.N + start + b0;
            for (int64_t n = 0; n < w; ++n) acc[n] += hr * br[n];
          }
          float* ym = y + m * ldy + start + b0;
          for (int64_t n = 0; n < w; ++n) ym[n] += acc[n];
        }
      }
    }
  }
}

// rows of x normed (w: null, none) into lora_xn, for the term of a linear that norms its input itself
const float* lora_input(const float* x, int64_t M, int64_t K, const float* w, float eps) {
  if (!w) return x;
  float* out = scratch(lora_xn, M * K);
  for (int64_t m = 0; m < M; ++m) rmsnorm_row(x + m * K, K, w, eps, out + m * K);
  return out;
}

// hk_layer_forward's layer (x: f32 [M, hidden], contiguous) with the terms of `lo` in its linears, in
// parts: each matmul as the fused layer runs it (the same kernels and row ops), its term added after it.
int lora_layer_forward(const Layer& l, const LoraLayer& lo, float* x, int64_t M, const float* s, int64_t lds,
                       const float* cos, const float* sin, void* kv, int kv_bf16, int64_t num_slots, int64_t bs,
                       const int64_t* slots, int64_t S, const int64_t* q_start, const int64_t* q_len,
                       const int64_t* seq_lens, const int64_t* tables, int64_t ldt, const int64_t* tree,
                       int64_t ldtree) {
  const int64_t hidden = l.qkv->K, n = l.qkv->N, nq = l.heads * l.d, inter = l.gate_up->N / 2, ngu = l.gate_up->N;
  float* y = scratch(lora_qkv, M * n);
  hk_linear(l.qkv, x, 0, M, hidden, l.attn_norm, l.attn_eps, l.bias, y, n);
  if (lo.lin[0].R) lora_add(lo.lin[0], lora_input(x, M, hidden, l.attn_norm, l.attn_eps), hidden, M, s, lds, y, n);
  hk_qk_rope(y, M, n, l.heads + l.kvh, l.d, l.rot, l.qk_norm, l.qk_eps, cos, sin, l.neox);
  hk_kv_write(y + nq, n, M, slots, kv, kv_bf16, num_slots, l.kvh * l.d);
  float* att = scratch(lora_att, std::max<int64_t>(1, M) * nq);
  if (const int rc = hk_paged_attention(y, n, kv, kv_bf16, num_slots, bs, l.heads, l.kvh, l.d, S, q_start, q_len,
                                        seq_lens, tables, ldt, l.scale, l.window, l.softcap, att, nq, tree, ldtree))
    return rc;
  float* o = scratch(lora_out, M * hidden);
  matmul(*l.o, att, M, nq, o, hidden);
  lora_add(lo.lin[1], att, nq, M, s, lds, o, hidden);
  add_residual(o, M, hidden, l.post_attn_norm, l.post_attn_eps, x, hidden);
  float* g = scratch(lora_mid, M * ngu);
  matmul(*l.gate_up, x, M, hidden, g, ngu, l.ffn_norm, l.ffn_eps);
  if (lo.lin[2].R) lora_add(lo.lin[2], lora_input(x, M, hidden, l.ffn_norm, l.ffn_eps), hidden, M, s, lds, g, ngu);
  for (int64_t m = 0; m < M; ++m) act_mul(l.act, g + m * ngu, g + m * ngu + inter, inter, g + m * ngu);
  matmul(*l.down, g, M, ngu, o, hidden);
  lora_add(lo.lin[3], g, ngu, M, s, lds, o, hidden);
  add_residual(o, M, hidden, l.post_ffn_norm, l.post_ffn_eps, x, hidden);
  return 0;
}

}  // namespace

extern "C" {

// A layer's terms: for linear i (q|k|v, o, gate|up, down) a[i] f32 [K, R], b[i] f32 [R, N], adapter[i]
// int64 [R], factor[i] f32 [R], terms[i] int64 [n_terms, 4] (c0, rank, start, width), dims[i] = {K, N,
// R, n_terms}; R == 0: no term on that linear. The arrays stay the caller's (kept alive while in use).
void* hk_lora_new(const float* const* a, const float* const* b, const int64_t* const* adapter,
                  const float* const* factor, const int64_t* const* terms, const int64_t* dims) {
  LoraLayer* lo = new LoraLayer;
  for (int i = 0; i < 4; ++i) {
    const int64_t* d = dims + 4 * i;
    lo->lin[i] = LoraLinear{d[0], d[1], d[2], d[3], a[i], b[i], adapter[i], factor[i], terms[i]};
  }
  return lo;
}

void hk_lora_free(void* lo) { delete static_cast<LoraLayer*>(lo); }

// hk_stack_forward with the adapters' terms: layer i with loras[i] (null: none, hk_layer_forward), the
// step's scales s: f32 [M, adapters] (row stride lds; 0: one row for all). Returns the layers run.
int hk_stack_forward_lora(const void* const* layers, const void* const* loras, int n, float* x, int64_t M,
                          const float* s, int64_t lds, const float* const* cos, const float* const* sin,
                          void* const* kv, int kv_bf16, int64_t num_slots, int64_t bs, const int64_t* slots, int64_t S,
                          const int64_t* q_start, const int64_t* q_len, const int64_t* seq_lens, const int64_t* tables,
                          int64_t ldt, const int64_t* tree, int64_t ldtree) {
  for (int i = 0; i < n; ++i) {
    const int rc = loras[i]
        ? lora_layer_forward(*static_cast<const Layer*>(layers[i]), *static_cast<const LoraLayer*>(loras[i]), x, M, s,
                             lds, cos[i], sin[i], kv[i], kv_bf16, num_slots, bs, slots, S, q_start, q_len, seq_lens,
                             tables, ldt, tree, ldtree)
        : hk_layer_forward(layers[i], x, M, cos[i], sin[i], kv[i], kv_bf16, num_slots, bs, slots, S, q_start, q_len,
                           seq_lens, tables, ldt, tree, ldtree);
    if (rc != 0) return i;
  }
  return n;
}

}  // extern "C"
