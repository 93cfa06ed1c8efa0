// Qwen3.5's Gated DeltaNet mixer between its in_proj and out_proj (hearth/layers/delta_mixer.py is the torch
// twin): the causal depthwise conv continued from each sequence's window, silu, q and k L2-normed per head, the
// gated delta rule token by token on each sequence's f32 state, and each head's output RMS-normed and gated by
// silu(z). Same math as transformers' torch_recurrent_gated_delta_rule and llama.cpp's gated delta net op.
//
// Plain C++ written for the compiler's vectorizer (the loops run over contiguous channels or value dims), so
// every tier's library compiles this one source with its own flags. Why native: torch's step is ~10 passes
// over each [k_dim, v_dim] state (decay, a batched matmul, the write, the flush) and many small ops; here a
// head's state (64 KB at 128 x 128, in L2) is read and written twice, so a token costs about one pass over the
// states in memory, and a prefill's rows run one after another on a state that stays in L2.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr float DELTA_FLOOR = -80.0f;  // decay exponents below it give 0 (delta_rule.FLOOR: no denormals)
constexpr float DELTA_SHIFT = 0x1p-100f;  // (x + SHIFT) - SHIFT flushes |x| < ~2^-124 (delta_rule.SHIFT)

// e^x for x in [-87, 88] (clamped): 2^n e^r, |r| <= ln2 / 2, cephes' degree-6 polynomial (as simd.h's exp_ps, ~2
// ulp), branch-free and with 2^n built in the exponent bits, so loops of it vectorize: the silu of a prefill's
// 6144 channels a row took libm's scalar expf, a third of the mixer's time
inline float exp_poly(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::nearbyint(x * 1.44269504f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + (r + 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float silu1(float x) { return x / (1.0f + exp_poly(-x)); }

inline float softplus1(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold 20

struct DeltaDims {
  int64_t k_heads, v_heads, k_dim, v_dim, kernel;
  int64_t channels() const { return 2 * k_heads * k_dim + v_heads * v_dim; }  // q | k | v
};

// One sequence's conv rows x[0..n) (row stride ld) of channels [0, cn) continued from their window [cn, K - 1]
// (rows of K - 1, updated to the last K - 1 inputs) -> silu(conv) into mixed [n, cn] (row stride ldm); w_t: the
// weights tap-major [K, cn] (row stride ldw). Rows outer, channels inner: the inner loops are contiguous.
void delta_conv(const float* x, int64_t ld, int64_t n, float* window, const float* w_t, int64_t ldw, int64_t cn,
                int64_t K, float* mixed, int64_t ldm) {
  const int64_t W = K - 1;
  for (int64_t t = 0; t < n; ++t) {
    float* __restrict m = mixed + t * ldm;
    std::memset(m, 0, cn * sizeof(float));
    for (int64_t j = 0; j < K; ++j) {  // taps in order: tap K - 1 is the row's own input
      const int64_t src = t - W + j;
      const float* __restrict wj = w_t + j * ldw;
      if (src >= 0) {
        const float* __restrict xr = x + src * ld;
        for (int64_t c = 0; c < cn; ++c) m[c] += wj[c] * xr[c];
      } else {
        for (int64_t c = 0; c < cn; ++c) m[c] += wj[c] * window[c * W + W + src];
      }
    }
    for (int64_t c = 0; c < cn; ++c) m[c] = silu1(m[c]);
  }
  std::vector<float> old(window, window + cn * W);  // the window's new taps may come from its old ones
  for (int64_t i = 0; i < W; ++i) {
    const int64_t src = n - W + i;
    for (int64_t c = 0; c < cn; ++c) window[c * W + i] = src >= 0 ? x[src * ld + c] : old[c * W + W + src];
  }
}

// x / |x| over each of a row's heads of d (transformers' l2norm: rsqrt(sum x^2 + eps)), then * scale
void l2_rows(float* x, int64_t heads, int64_t d, float eps, float scale, bool scaled) {
  for (int64_t h = 0; h < heads; ++h) {
    float* __restrict v = x + h * d;
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) ss += v[i] * v[i];
    const float r = 1.0f / std::sqrt(ss + eps);
    for (int64_t i = 0; i < d; ++i) v[i] = scaled ? (v[i] * r) * scale : v[i] * r;
  }
}

// One token on one head's state S [dk, dv] (in place): S' = e^decay S; delta = beta (v - k.S'); S = S' + k delta^T
// (flushed); -> o [dv] = q.S' + (q.k) delta, delta_step_'s formula.
void delta_token(float* __restrict S, const float* __restrict q, const float* __restrict k, const float* __restrict v,
                 float decay, float beta, int64_t dk, int64_t dv, float* __restrict ks, float* __restrict o) {
  const float g = decay < DELTA_FLOOR ? 0.0f : std::exp(decay);
  for (int64_t j = 0; j < dv; ++j) ks[j] = o[j] = 0.0f;
  float qk = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {  // the decay, and what the state recalls for k and for q
    float* __restrict row = S + i * dv;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      const float s = row[j] * g;
      row[j] = s;
      ks[j] += ki * s;
      o[j] += qi * s;
    }
    qk += qi * ki;
  }
  for (int64_t j = 0; j < dv; ++j) ks[j] = (v[j] - ks[j]) * beta;  // now delta
  for (int64_t i = 0; i < dk; ++i) {  // the write, flushed
    float* __restrict row = S + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) row[j] = ((row[j] + ki * ks[j]) + DELTA_SHIFT) - DELTA_SHIFT;
  }
  for (int64_t j = 0; j < dv; ++j) o[j] += qk * ks[j];
}

// o [dv] -> RMSNorm(o) * norm_w * silu(z), into y (hearth.layers.norm.RMSNorm's order: (o * r) * w)
void gated_norm(const float* __restrict o, const float* __restrict z, const float* __restrict norm_w, float eps,
                int64_t dv, float* __restrict y) {
  float ss = 0.0f;
  for (int64_t j = 0; j < dv; ++j) ss += o[j] * o[j];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(dv) + eps);
  for (int64_t j = 0; j < dv; ++j) y[j] = ((o[j] * r) * norm_w[j]) * silu1(z[j]);
}

}  // namespace

extern "C" {

// The mixer of a step's rows: sequence s's rows qsl[s] .. qsl[s + 1] continue from slot slots[s] of windows
// [slots, C, K - 1] and states [slots, v_heads, k_dim, v_dim] (both updated in place). qkv [T, C], z [T, v_heads *
// v_dim], beta and alpha [T, v_heads] (before sigmoid / softplus) are columns of in_proj's output rows, row stride
// ld; conv_w [C, K], a, dt [v_heads], norm_w [v_dim]; value head h reads key head h % k_heads (the converter's
// tiled order) -> out [T, v_heads * v_dim] (row stride ld_out). 0, or -1 for dims it does not take.
int hk_delta_net(const float* qkv, const float* z, const float* beta, const float* alpha, int64_t ld, int64_t S,
                 const int64_t* qsl, const int64_t* slots, float* windows, float* states, const float* conv_w,
                 const float* a, const float* dt, const float* norm_w, float eps, int64_t k_heads, int64_t v_heads,
                 int64_t k_dim, int64_t v_dim, int64_t kernel, float* out, int64_t ld_out) {
  const DeltaDims d{k_heads, v_heads, k_dim, v_dim, kernel};
  if (k_heads <= 0 || v_heads % k_heads != 0 || kernel < 1 || k_dim <= 0 || v_dim <= 0) return -1;
  const int64_t C = d.channels(), K = kernel, kd = k_heads * k_dim, rep = v_heads / k_heads;
  const int64_t width = 2 * k_dim + rep * v_dim;  // a task's channels: its q and k head, its value heads
  const float scale = 1.0f / std::sqrt(static_cast<float>(k_dim));
  // one task per (sequence, key head): the conv of its own channels (each channel's window has one owner), q
  // and k normed, then its value heads' rows in order. One parallel loop: no barrier inside a call.
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < S * k_heads; ++task) {
    const int64_t s = task / k_heads, kh = task % k_heads, r0 = qsl[s], n = qsl[s + 1] - r0;
    std::vector<int64_t> first = {kh * k_dim, kd + kh * k_dim};  // the task's channel ranges: q, k, each value head
    std::vector<int64_t> size = {k_dim, k_dim};
    for (int64_t m = 0; m < rep; ++m) {
      first.push_back(2 * kd + (kh + m * k_heads) * v_dim);  // value head kh + m k_heads: tiled
      size.push_back(v_dim);
    }
    std::vector<float> mixed(n * width), w_t(K * std::max(k_dim, v_dim));  // mixed [n, width]
    for (size_t part = 0, col = 0; part < first.size(); col += size[part], ++part) {
      const int64_t c0 = first[part], cn = size[part];
      for (int64_t c = 0; c < cn; ++c)
        for (int64_t j = 0; j < K; ++j) w_t[j * cn + c] = conv_w[(c0 + c) * K + j];
      delta_conv(qkv + r0 * ld + c0, ld, n, windows + (slots[s] * C + c0) * (K - 1), w_t.data(), cn, cn, K,
                 mixed.data() + col, width);
    }
    for (int64_t t = 0; t < n; ++t) {
      l2_rows(mixed.data() + t * width, 1, k_dim, eps, scale, true);
      l2_rows(mixed.data() + t * width + k_dim, 1, k_dim, eps, 1.0f, false);
    }
    std::vector<float> ks(v_dim), o(v_dim);
    for (int64_t m = 0; m < rep; ++m) {
      const int64_t h = kh + m * k_heads;
      float* state = states + ((slots[s] * v_heads) + h) * k_dim * v_dim;
      for (int64_t t = 0; t < n; ++t) {
        const float* row = mixed.data() + t * width;
        const int64_t tr = (r0 + t) * ld;
        const float decay = a[h] * softplus1(alpha[tr + h] + dt[h]);
        const float b = 1.0f / (1.0f + std::exp(-beta[tr + h]));
        delta_token(state, row, row + k_dim, row + 2 * k_dim + m * v_dim, decay, b, k_dim, v_dim, ks.data(), o.data());
        gated_norm(o.data(), z + tr + h * v_dim, norm_w, eps, v_dim, out + (r0 + t) * ld_out + h * v_dim);
      }
    }
  }
  return 0;
}

}  // extern "C"
