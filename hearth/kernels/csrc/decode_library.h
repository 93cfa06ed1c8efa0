// The entry points of the decode-tier kernel libraries (gguf_kernels_avx2.cpp, gguf_kernels_neon.cpp),
// called via ctypes with the same C names as gguf_kernels.cpp for what they implement
// (hearth/kernels/native.py lists them): matmul on GGUF blocks for few rows (8-bit activations per
// 16, ggml's q8_0 rule, and an integer dot product per 32 weights), row lookup and bf16 expansion,
// the small f32 ops of a decode step, KV write and paged attention over f16/bf16 caches, and the
// whole decoder layer for few rows. Where the library has a GEMM (gemm_avx2.h defines HK_ROWS_GEMM)
// matmuls from a plan's gemm_min_rows run on it (prefills); elsewhere (neon) prefill matmuls stay in
// torch (bf16 tiles from hk_dequant_bf16).
//
// Written once against what the including library provides first: the vf8 interface (simd_avx2.h,
// simd_neon.h), its block unpackers, Act, quantize, rows_dot and dequant_row (blocks_avx2.h,
// blocks_neon.h) and attention_pages.h. The library adds hk_set_tier and hk_cpu_ok, its own CPU checks,
// and dispatch: the block types its kernels read (hearth.formats.weights native_at).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

template <class T>
struct RowsDot {
  static void run(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a, float* y,
                  int64_t ldy) {
    rows_dot<T>(w, row_bytes, n0, n1, nb, a, y, ldy);
  }
};

#ifdef HK_ROWS_GEMM
template <class T>
struct RowsGemm {
  static void run(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a, float* y,
                  int64_t ldy) {
    rows_gemm<T>(w, row_bytes, n0, n1, nb, a, y, ldy);
  }
};
#endif

template <class T>
struct DequantRows {  // rows ids[..] -> out (f32)
  static void run(const uint8_t* w, int64_t row_bytes, int64_t K, int64_t nb, const int64_t* ids, int64_t T_,
                  float* out) {
#pragma omp parallel for schedule(static) if (T_ >= 64)  // a prefill's embedding rows
    for (int64_t t = 0; t < T_; ++t) dequant_row<T>(w + ids[t] * row_bytes, K, nb, out + t * K);
  }
};

template <class T>
struct DequantBf16 {
  static void run(const uint8_t* w, int64_t row_bytes, int64_t K, int64_t nb, int64_t r0, int64_t r1, uint16_t* out) {
    for (int64_t r = r0; r < r1; ++r) dequant_row<T>(w + r * row_bytes, K, nb, out + (r - r0) * K);
  }
};

struct Part {
  const uint8_t* w;
  int qtype;
  int64_t rows, row_bytes, out_col, nb;
};

struct Plan {  // a linear layer: weights sharing in_features K, outputs side by side (q|k|v, gate|up)
  int64_t K = 0, N = 0;
  int64_t gemm_min_rows = 0;  // from this many rows on the library's GEMM (HK_ROWS_GEMM), 0 = never
  std::vector<Part> parts;
  double bytes = 0;
};

int threads_for(double work) { return work < 64.0 * 1024 ? 1 : omp_get_max_threads(); }

// y[:, part columns] = a @ W.T, the rows of every part split evenly over the threads: on the GEMV,
// or from the plan's gemm_min_rows on the library's GEMM where it has one (gemm_avx2.h)
bool run(const Plan& p, const Act& a, float* y, int64_t ldy) {
  int bad = 0;
  const bool gemm = p.gemm_min_rows > 0 && a.M >= p.gemm_min_rows;
#pragma omp parallel num_threads(threads_for(p.bytes * a.M)) reduction(| : bad)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    for (const Part& q : p.parts) {
      const int64_t n0 = q.rows * t / T, n1 = q.rows * (t + 1) / T;
      if (n1 <= n0) continue;
#ifdef HK_ROWS_GEMM
      if (gemm) {
        if (!dispatch<RowsGemm>(q.qtype, q.w, q.row_bytes, n0, n1, q.nb, a, y + q.out_col, ldy)) bad = 1;
        continue;
      }
#endif
      if (!dispatch<RowsDot>(q.qtype, q.w, q.row_bytes, n0, n1, q.nb, a, y + q.out_col, ldy)) bad = 1;
    }
  }
  (void)gemm;
  return !bad;
}

template <class V>
auto* scratch(V& v, int64_t n) {  // v's first n elements; grows, never shrinks
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

thread_local std::vector<float> tmp_in, tmp_norm, tmp_mid, tmp_out, tmp_qkv, tmp_attn;

// f(m) for every row m < M: in parallel for prefill-sized M, else inline (no OpenMP region)
template <class F>
void for_rows(int64_t M, const F& f) {
  if (M < 64) {
    for (int64_t m = 0; m < M; ++m) f(m);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) f(m);
}

// 1 / sqrt(mean(x^2) + eps) over n values: an RMSNorm's scale (two sums: one FMA chain waits on latency)
inline float inv_rms(const float* x, int64_t n, float eps) {
  vf8 ss[2] = {vzero(), vzero()};
  for (int64_t i = 0; i < n; i += 8) {
    const vf8 v = load8(x + i, n - i);
    ss[(i / 8) % 2] = vfma(v, v, ss[(i / 8) % 2]);
  }
  return 1.0f / std::sqrt(hsum(vadd(ss[0], ss[1])) / static_cast<float>(n) + eps);
}

// out = x * rsqrt(mean(x^2) + eps) * w over n values (hearth.layers.norm.RMSNorm); out may be x
void rmsnorm_row(const float* x, int64_t n, const float* w, float eps, float* out) {
  const vf8 r = vset1(inv_rms(x, n, eps));
  for (int64_t i = 0; i < n; i += 8) store8(out + i, vmul(vmul(load8(x + i, n - i), r), load8(w + i, n - i)), n - i);
}

const float* normed(const float* x, int64_t M, int64_t K, int64_t& ldx, const float* w, float eps) {
  if (!w) return x;
  float* out = scratch(tmp_norm, M * K);
  for_rows(M, [&](int64_t m) { rmsnorm_row(x + m * ldx, K, w, eps, out + m * K); });
  ldx = K;
  return out;
}

bool matmul(const Plan& p, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, const float* norm_w = nullptr,
            float eps = 0.0f) {
  x = normed(x, M, p.K, ldx, norm_w, eps);
  return run(p, quantize(x, M, p.K, ldx), y, ldy);
}

enum : int { SILU = 0, GELU_TANH = 1 };

// act(g) = g * sigmoid(x): silu x = g; gelu_tanh x = 2 sqrt(2/pi) (g + 0.044715 g^3), as
// 0.5 (1 + tanh(z)) = sigmoid(2z); -x clamped to [-80, 80] (no subnormal e^-x or reciprocal)
inline vf8 act_ps(int act, vf8 g) {
  const vf8 x = act == SILU ? g : vmul(g, vfma(vset1(0.0713548163f), vmul(g, g), vset1(1.5957691216f)));
  const vf8 lim = vset1(80.0f), nx = vsub(vzero(), x);
  const vf8 e = exp_ps(vmax(vmin(nx, lim), vsub(vzero(), lim)));
  return vdiv(g, vadd(vset1(1.0f), e));
}

void act_mul(int act, const float* gate, const float* up, int64_t n, float* h) {  // h = act(gate) * up
  for (int64_t i = 0; i < n; i += 8)
    store8(h + i, vmul(act_ps(act, load8(gate + i, n - i)), load8(up + i, n - i)), n - i);
}

// r += y (after an RMSNorm of y's rows with post_w when given); y: [M, N] contiguous
void add_residual(const float* y, int64_t M, int64_t N, const float* post_w, float post_eps, float* r, int64_t ldr) {
  for_rows(M, [&](int64_t m) {
    const float* ym = y + m * N;
    float* rm = r + m * ldr;
    const vf8 inv = vset1(post_w ? inv_rms(ym, N, post_eps) : 1.0f);
    for (int64_t i = 0; i < N; i += 8) {
      vf8 v = load8(ym + i, N - i);
      if (post_w) v = vmul(vmul(v, inv), load8(post_w + i, N - i));
      store8(rm + i, vadd(load8(rm + i, N - i), v), N - i);
    }
  });
}

const float* widened(const uint16_t* x, int64_t M, int64_t K, int64_t& ldx) {  // rows of bf16 x as f32
  float* out = scratch(tmp_in, M * K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < K; ++i) {
      const uint32_t u = static_cast<uint32_t>(x[m * ldx + i]) << 16;
      std::memcpy(out + m * K + i, &u, 4);
    }
  ldx = K;
  return out;
}

}  // namespace

#include "layer.h"  // after Plan

extern "C" {

int hk_abi_version() { return 18; }

// A plan over `n` weights [rows_i, K] (GGUF blocks, rows row_bytes_i apart); nullptr for an unknown
// type or a K that is not a whole number of its blocks. gemm_min_rows: from this many rows on the
// library's GEMM where it has one (gemm_avx2.h), else unused; 0 = never.
void* hk_plan_new(int n, const void* const* w, const int* qtypes, const int64_t* rows, const int64_t* row_bytes,
                  int64_t K, int64_t gemm_min_rows) {
  if (K <= 0 || K % 32) return nullptr;
  Plan* p = new Plan;
  p->K = K;
  p->gemm_min_rows = gemm_min_rows;
  for (int i = 0; i < n; ++i) {
    if (is_k_quant(qtypes[i]) && K % SB) { delete p; return nullptr; }
    p->parts.push_back({static_cast<const uint8_t*>(w[i]), qtypes[i], rows[i], row_bytes[i], p->N,
                        blocks_per_row(qtypes[i], K)});
    p->N += rows[i];
    p->bytes += static_cast<double>(rows[i]) * row_bytes[i];
  }
  alignas(32) float probe[32] = {};  // unknown types fail here, once, instead of at every call
  const Act a = quantize(probe, 0, K, 0);
  for (const Part& q : p->parts)
    if (!dispatch<RowsDot>(q.qtype, q.w, q.row_bytes, 0, 0, q.nb, a, probe, 0)) { delete p; return nullptr; }
  return p;
}

void hk_plan_free(void* p) { delete static_cast<Plan*>(p); }

// Part i's weights now at w: the same bytes, moved (hearth.layers.huge_pages reads them into 2 MB pages while
// the model serves), so a call running meanwhile may read either copy.
void hk_plan_rebase(void* p, int i, const void* w) {
  __atomic_store_n(&static_cast<Plan*>(p)->parts[i].w, static_cast<const uint8_t*>(w), __ATOMIC_RELEASE);
}

// y[M, N] (row stride ldy) = rmsnorm(x) @ W.T + bias; x: [M, K] (row stride ldx), f32 or (x_bf16) bf16
void hk_linear(const void* plan, const void* x, int x_bf16, int64_t M, int64_t ldx, const float* norm_w, float eps,
               const float* bias, float* y, int64_t ldy) {
  const Plan& p = *static_cast<const Plan*>(plan);
  const float* xf = x_bf16 ? widened(static_cast<const uint16_t*>(x), M, p.K, ldx) : static_cast<const float*>(x);
  matmul(p, xf, M, ldx, y, ldy, norm_w, eps);
  if (bias)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < p.N; ++n) y[m * ldy + n] += bias[n];
}

// r[M, N] += rmsnorm_post(x @ W.T): an output projection into the residual stream (post_w optional)
void hk_linear_residual(const void* plan, const float* x, int64_t M, int64_t ldx, const float* post_w, float post_eps,
                        float* r, int64_t ldr) {
  const Plan& p = *static_cast<const Plan*>(plan);
  float* y = scratch(tmp_out, M * p.N);
  matmul(p, x, M, ldx, y, p.N);
  add_residual(y, M, p.N, post_w, post_eps, r, ldr);
}

// The MLP block on the residual stream r [M, hidden]: r += rmsnorm_post(down(act(gate) * up))
void hk_mlp(const void* gate_up, const void* down, int act, float* r, int64_t M, int64_t ldr, const float* norm_w,
            float eps, const float* post_w, float post_eps) {
  const Plan& gu = *static_cast<const Plan*>(gate_up);
  const Plan& dn = *static_cast<const Plan*>(down);
  const int64_t inter = gu.N / 2;
  float* g = scratch(tmp_mid, M * gu.N);
  float* y = scratch(tmp_out, M * dn.N);
  matmul(gu, r, M, ldr, g, gu.N, norm_w, eps);
  for (int64_t m = 0; m < M; ++m) act_mul(act, g + m * gu.N, g + m * gu.N + inter, inter, g + m * gu.N);
  matmul(dn, g, M, gu.N, y, dn.N);
  add_residual(y, M, dn.N, post_w, post_eps, r, ldr);
}

// hk_qk_rope, and with `whole` q heads a norm over q's whole projection then k's (olmo2; 0: per head)
static void qk_rope_rows(float* qk, int64_t T, int64_t ld, int64_t heads, int64_t D, int64_t rot, const float* norm_w,
                         float eps, const float* cos, const float* sin, int neox, int64_t whole) {
  const int64_t h2 = rot / 2;
  for_rows(T, [&](int64_t t) {
    const float* c = cos + t * h2;
    const float* s = sin + t * h2;
    if (norm_w && whole) {
      float* row = qk + t * ld;
      rmsnorm_row(row, whole * D, norm_w, eps, row);
      rmsnorm_row(row + whole * D, (heads - whole) * D, norm_w + whole * D, eps, row + whole * D);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = qk + t * ld + h * D;
      if (norm_w && !whole) rmsnorm_row(v, D, norm_w + h * D, eps, v);
      for (int64_t i = 0; i < h2; ++i) {  // (a, b) -> (a c - b s, b c + a s)
        const int64_t ia = neox ? i : 2 * i, ib = neox ? i + h2 : 2 * i + 1;
        const float a = v[ia], b = v[ib];
        v[ia] = a * c[i] - b * s[i];
        v[ib] = b * c[i] + a * s[i];
      }
    }
  });
}

// q | k heads in place: an RMSNorm per head (norm_w: [heads, D], optional), then rotary embedding of
// the first `rot` dims with cos, sin: [T, rot / 2]; neox rotates halves, else adjacent pairs
void hk_qk_rope(float* qk, int64_t T, int64_t ld, int64_t heads, int64_t D, int64_t rot, const float* norm_w, float eps,
                const float* cos, const float* sin, int neox) {
  qk_rope_rows(qk, T, ld, heads, D, rot, norm_w, eps, cos, sin, neox, 0);
}

// Attention of query rows over a paged f16/bf16 KV cache, as gguf_kernels.cpp's hk_paged_attention:
// q, out: f32 [rows, heads, d] (row strides ldq, ldo); kv: [2, num_slots, kvh, d]. tree (null: none):
// a token tree's node rows, int64 [rows, ldtree]: per row -1, or its position along its path, the
// tree's first position base and the flat slots of its keys base .. position, read instead of those
// positions' slots (a decode of its path's bits). Returns 0, or -1 for a head_dim or grouping this
// kernel does not cover.
int hk_paged_attention(const float* q, int64_t ldq, const void* kv, int kv_bf16, int64_t num_slots, int64_t bs,
                       int64_t heads, int64_t kvh, int64_t d, int64_t S, const int64_t* q_start, const int64_t* q_len,
                       const int64_t* seq_lens, const int64_t* tables, int64_t ldt, float scale, int64_t window,
                       float softcap, float* out, int64_t ldo, const int64_t* tree, int64_t ldtree) {
  const AttendFn fn = (d % 8 || heads > MAX_TASK_HEADS || heads % kvh) ? nullptr : pick_attend(d / 8, kv_bf16);
  if (!fn) return -1;
  const AttnShape a{static_cast<const uint8_t*>(kv), num_slots * kvh * d, bs, heads, kvh, d, nullptr, scale, softcap};
  // a task covers every head; a sequence's rows in one step (a verify chain, a tree) as one row group
  paged_attention_rows<AttnScratch>(a, fn, pick_attend_rows(d / 8, kv_bf16), q, ldq, S, q_start, q_len, seq_lens,
                                    tables, ldt, window, out, ldo, tree, ldtree);
  return 0;
}

// Rows of one sequence in one step attend as a row group (attention_tasks.h) while on (1, the
// default); 0: every task on its own. The bits are the same either way.
void hk_set_row_groups(int on) { row_groups() = on != 0; }

// K and V of T new tokens into their cache slots: kv rows (f32, row stride ldx) hold k then v
// ([2, kvh * d] each row). Rounds to nearest even like torch's casts.
void hk_kv_write(const float* x, int64_t ldx, int64_t T, const int64_t* slots, void* kv, int kv_bf16, int64_t num_slots,
                 int64_t width) {
  uint16_t* c = static_cast<uint16_t*>(kv);
  for_rows(T, [&](int64_t t) {
    for (int plane = 0; plane < 2; ++plane) {
      const float* src = x + t * ldx + plane * width;
      uint16_t* dst = c + plane * num_slots * width + slots[t] * width;
      int64_t i = 0;
      for (; i + 8 <= width; i += 8) store_half(dst + i, vload(src + i), kv_bf16);
      for (; i < width; ++i) dst[i] = half_of(src[i], kv_bf16);
    }
  });
}

// Rows `ids` of a [V, K] tensor -> f32 out [T, K]. 0, -1 for an unknown type, -2 for an id outside [0, V).
int hk_dequant_rows(const void* w, int qtype, int64_t row_bytes, int64_t K, int64_t V, const int64_t* ids, int64_t T,
                    float* out) {
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V) return -2;
  return dispatch<DequantRows>(qtype, static_cast<const uint8_t*>(w), row_bytes, K, blocks_per_row(qtype, K), ids, T,
                               out) ? 0 : -1;
}

// Rows r0 .. r1 of a [N, K] tensor -> bf16 out [r1 - r0, K] (the dense prefill path), in parallel.
int hk_dequant_bf16(const void* w, int qtype, int64_t row_bytes, int64_t K, int64_t r0, int64_t r1, uint16_t* out) {
  if (K % 16) return -1;
  int bad = 0;
  const int nt = threads_for(static_cast<double>(r1 - r0) * row_bytes * 8);
#pragma omp parallel num_threads(nt) reduction(| : bad)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t a = r0 + (r1 - r0) * t / T, b = r0 + (r1 - r0) * (t + 1) / T;
    if (b > a && !dispatch<DequantBf16>(qtype, static_cast<const uint8_t*>(w), row_bytes, K, blocks_per_row(qtype, K), a,
                                        b, out + (a - r0) * K))
      bad = 1;
  }
  return bad ? -1 : 0;
}

// ---- a whole decoder layer for a few rows in one call (fused_layer.h's hk_layer_forward) ----

void* hk_layer_new(const void* qkv, const void* o, const void* gate_up, const void* down, const float* norms[6],
                   const float eps[5], int act, int neox, int64_t heads, int64_t kvh, int64_t d, int64_t rot,
                   int64_t window, float scale, float softcap) {
  if (d % 8 || heads % kvh || heads > MAX_TASK_HEADS || !pick_attend(d / 8, false)) return nullptr;
  return new Layer{static_cast<const Plan*>(qkv), static_cast<const Plan*>(o), static_cast<const Plan*>(gate_up),
                   static_cast<const Plan*>(down), norms[0], norms[1], norms[2], norms[3], norms[4], norms[5],
                   eps[0], eps[1], eps[2], eps[3], eps[4], scale, softcap, act, neox, heads, kvh, d, rot, window};
}

void hk_layer_free(void* l) { delete static_cast<Layer*>(l); }

// The layer's q/k norm spans each whole projection (q's `qheads` heads, then k's), not each head (olmo2).
void hk_layer_qk_whole(void* l, int64_t qheads) { static_cast<Layer*>(l)->qk_whole = qheads; }

// x: the residual stream f32 [M, hidden] (contiguous), updated in place. cos, sin: [M, rot / 2];
// slots: [M] cache slots of the new tokens; the attention arguments as in hk_paged_attention.
int hk_layer_forward(const void* layer, float* x, int64_t M, const float* cos, const float* sin, void* kv, int kv_bf16,
                     int64_t num_slots, int64_t bs, const int64_t* slots, int64_t S, const int64_t* q_start,
                     const int64_t* q_len, const int64_t* seq_lens, const int64_t* tables, int64_t ldt,
                     const int64_t* tree, int64_t ldtree) {
  const Layer& l = *static_cast<const Layer*>(layer);
  const int64_t hidden = l.qkv->K, n = l.qkv->N, nq = l.heads * l.d;
  float* y = scratch(tmp_qkv, M * n);
  hk_linear(l.qkv, x, 0, M, hidden, l.attn_norm, l.attn_eps, l.bias, y, n);
  qk_rope_rows(y, M, n, l.heads + l.kvh, l.d, l.rot, l.qk_norm, l.qk_eps, cos, sin, l.neox, l.qk_whole);
  hk_kv_write(y + nq, n, M, slots, kv, kv_bf16, num_slots, l.kvh * l.d);
  float* att = scratch(tmp_attn, std::max<int64_t>(1, M) * nq);
  if (const int rc = hk_paged_attention(y, n, kv, kv_bf16, num_slots, bs, l.heads, l.kvh, l.d, S, q_start, q_len,
                                        seq_lens, tables, ldt, l.scale, l.window, l.softcap, att, nq, tree, ldtree))
    return rc;
  hk_linear_residual(l.o, att, M, nq, l.post_attn_norm, l.post_attn_eps, x, hidden);
  hk_mlp(l.gate_up, l.down, l.act, x, M, hidden, l.ffn_norm, l.ffn_eps, l.post_ffn_norm, l.post_ffn_eps);
  return 0;
}

}  // extern "C"

#include "stack_forward.h"  // hk_stack_forward over this library's hk_layer_forward
#include "lora_layer.h"  // hk_stack_forward_lora: that stack with LoRA terms, over the entry points above
#include "moe.h"  // hk_moe over this library's matmul
#include "delta_net.h"  // hk_delta_net: the Gated DeltaNet mixer (plain C++, every library)
