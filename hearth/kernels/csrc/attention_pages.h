// Attention over the paged f16/bf16 KV cache for the decode-tier libraries (avx2, neon), written on
// the vf8 interface of simd_avx2.h / simd_neon.h (included before this file): attention.h's structure
// in 8-wide vectors (hearth.kernels.attention's layout: [2 (k, v), num_slots, kv_heads, head_dim]).
//
// Tasks are (query row, key range) with every head of the row; a key's slot (all kv heads) is
// converted to f32 once and read by every head. Exact scores, softmax, p.V per task; rows split
// into key ranges are merged by their maxima and sums (flash-decoding). The split depends on the
// number of sequences only, so a row has the same bits whether its sequence decodes one token or
// verifies drafts in 1 + k rows. The task plan, thread loop and merge are attention_tasks.h's; a
// sequence's rows in one step run as a row group (attention_rows.h) over RowOps below.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attention_rows.h"
#include "attention_tasks.h"

namespace {

inline vf8 softcap_ps(vf8 v, float cap) {  // cap * tanh(v / cap), tanh(z) = 1 - 2 / (1 + e^2z)
  const vf8 z = vmul(v, vset1(2.0f / cap));
  const vf8 t = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(vset1(1.0f), exp_ps(z))));
  return vmul(t, vset1(cap));
}

// acc[h][8 c0 .. 8 (c0 + CV)) = sum_j p[h][j] v_j for HB heads from h0 over keys [k0, k1) (kv head g)
template <int HB, int CV, bool BF16>
void weighted_values(const AttnShape& a, int64_t g, int64_t k0, int64_t k1, const float* p, int64_t ld, int64_t h0,
                     int c0, float* acc) {
  vf8 o[HB][CV];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) o[h][c] = vzero();
  const int64_t stride = a.kvh * a.d * 2;
  for (int64_t key = k0; key < k1;) {
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* vp = slot_row(a, 1, g, key) + 16 * c0;  // 8 halves per vector
    for (int64_t j = 0; j < run; ++j, vp += stride) {
      // a tree row's remapped keys are not consecutive slots: the same keys in the same order
      const uint8_t* vj = remapped(a, key + j) ? slot_row(a, 1, g, key + j) + 16 * c0 : vp;
      vf8 vf[CV];
      for (int c = 0; c < CV; ++c) vf[c] = load_half<BF16>(vj + 16 * c);
      for (int h = 0; h < HB; ++h) {
        const vf8 w = vset1(p[(h0 + h) * ld + key - k0 + j]);
        for (int c = 0; c < CV; ++c) o[h][c] = vfma(w, vf[c], o[h][c]);
      }
    }
    key += run;
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) vstore(acc + (h0 + h) * a.d + 8 * (c0 + c), o[h][c]);
}

// sh[0 .. n) <- exp(sh - mx) in place; returns their sum. Weights below e^-80 are dropped (denormals
// would slow p.V)
inline float exp_in_place(float* sh, int64_t n, float mx) {
  const vf8 vmx = vset1(mx), lim = vset1(-80.0f);
  vf8 sum = vzero();
  for (int64_t j = 0; j < n; j += 8) {
    const vf8 x = vsub(load8(sh + j, n - j), vmx);
    const vf8 p = keep_first(keep_where_gt(exp_ps(x), x, lim), n - j);
    store8(sh + j, p, n - j);
    sum = vadd(sum, p);
  }
  return hsum(sum);
}

// One task: every query head of one row (q: [kvh][G][D] f32) against keys [k0, k1): per head the
// running max m, the sum of exp(s - m) l, and acc = sum exp(s - m) v (unnormalized)
template <int DV, bool BF16>
void attend_range(const AttnShape& a, const float* q, int64_t k0, int64_t k1, float* m, float* l, float* acc,
                  AttnScratch& buf) {
  const int64_t n = k1 - k0, D = a.d, H = a.heads, G = H / a.kvh, W = a.kvh * DV;  // W: vectors per slot
  const int64_t slot_bytes = a.kvh * D * 2, ld = n + 8;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(size);
    return v.data();
  };
  float* s = grow(buf.scores, H * ld);
  float* qs = grow(buf.qs, H * D);  // q * scale
  float* vmax = grow(buf.vmax, H * 8);
  float* kt = grow(buf.kt, 8 * W * 8 + 8);  // 8 slots' keys in f32: [key][kv head][DV vectors]
  kt += (32 - reinterpret_cast<uintptr_t>(kt) % 32) % 32 / sizeof(float);
  for (int64_t i = 0; i < H * D; ++i) qs[i] = q[i] * a.scale;
  for (int64_t h = 0; h < H; ++h) vstore(vmax + 8 * h, vset1(-INFINITY));
  for (int64_t key = k0; key < k1;) {  // scores, 8 keys at a time
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* kp = slot_row(a, 0, 0, key);
    for (int64_t t0 = 0; t0 < run; t0 += 8) {
      const int r = static_cast<int>(std::min<int64_t>(8, run - t0));
      for (int j = 0; j < r; ++j, kp += slot_bytes) {
        const uint8_t* kj = remapped(a, key + t0 + j) ? slot_row(a, 0, 0, key + t0 + j) : kp;  // a tree row's path
        for (int64_t b = 0; b < slot_bytes; b += 64)  // this key's values, into L2 for p.V
          prefetch_l2(kj + a.plane * 2 + b);
        for (int64_t c = 0; c < W; ++c) vstore(kt + (j * W + c) * 8, load_half<BF16>(kj + 16 * c));
      }
      for (int64_t h = 0; h < H; ++h) {
        vf8 t[8];
        const float* qh = qs + h * D;
        const float* kh = kt + h / G * DV * 8;
        for (int j = 0; j < 8; ++j) {
          if (j >= r) { t[j] = vzero(); continue; }
          t[j] = vmul(vload(qh), vload(kh + j * W * 8));
          for (int c = 1; c < DV; ++c) t[j] = vfma(vload(qh + 8 * c), vload(kh + (j * W + c) * 8), t[j]);
        }
        vf8 v = sum8(t);
        if (a.softcap > 0.0f) v = softcap_ps(v, a.softcap);
        store8(s + h * ld + key - k0 + t0, v, r);
        vstore(vmax + 8 * h, max_first(vload(vmax + 8 * h), v, r));
      }
    }
    key += run;
  }
  for (int64_t h = 0; h < H; ++h) {  // probabilities in place
    float mx = -INFINITY;
    for (int i = 0; i < 8; ++i) mx = std::max(mx, vmax[8 * h + i]);
    m[h] = mx;
    l[h] = exp_in_place(s + h * ld, n, mx);
  }
  for (int64_t g = 0; g < a.kvh; ++g)  // acc = p . V per kv head, in register tiles of 2 heads x 4 vectors
    for (int64_t h0 = 0; h0 < G; h0 += 2)
      for (int c0 = 0; c0 < DV; c0 += 4)
        with_const<2>(static_cast<int>(std::min<int64_t>(2, G - h0)), [&](auto hb) {
          with_const<4>(std::min(4, DV - c0), [&](auto cv) {
            weighted_values<decltype(hb)::value, decltype(cv)::value, BF16>(a, g, k0, k1, s + g * G * ld, ld, h0, c0,
                                                                            acc + g * G * D);
          });
        });
}

using AttendFn = void (*)(const AttnShape&, const float*, int64_t, int64_t, float*, float*, float*, AttnScratch&);

template <int DV>
AttendFn attend_for(bool bf16) {
  return bf16 ? attend_range<DV, true> : attend_range<DV, false>;
}

AttendFn pick_attend(int64_t dv, bool bf16) {  // dv = head_dim / 8
  switch (dv) {
    case 4: return attend_for<4>(bf16);
    case 8: return attend_for<8>(bf16);
    case 10: return attend_for<10>(bf16);
    case 12: return attend_for<12>(bf16);
    case 16: return attend_for<16>(bf16);
    case 32: return attend_for<32>(bf16);
    case 64: return attend_for<64>(bf16);  // gemma4's global layers (512)
    default: return nullptr;
  }
}

// attention_rows.h's vector work on this tier (vf8): attend_range's operations, row by row
template <int DV_, bool BF16>
struct RowOps {
  static constexpr int L = 8, DV = DV_;
  static void convert(const AttnShape& a, int plane, int64_t k, int64_t n, int64_t end, float* dst, bool values) {
    const int64_t bytes = a.kvh * a.d * 2, W = a.kvh * DV;
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* src = slot_row(a, plane, 0, k + j);
      if (k + n + j < end) {
        const uint8_t* nx = slot_row(a, plane, 0, k + n + j);
        for (int64_t b = 0; b < bytes; b += 64) prefetch_l1(nx + b);
      }
      if (values)
        for (int64_t b = 0; b < bytes; b += 64) prefetch_l2(src + a.plane * 2 + b);
      for (int64_t c = 0; c < W; ++c) vstore(dst + (j * W + c) * 8, load_half<BF16>(src + 16 * c));
    }
  }
  static void scores(const AttnShape& a, const float* kt, int nk, const float* qs, float* s, int64_t ld, int lo, int hi) {
    const int64_t H = a.heads, G = H / a.kvh, W = a.kvh * DV;
    for (int64_t h = 0; h < H; ++h) {
      vf8 t[8];
      const float* qh = qs + h * a.d;
      const float* kh = kt + h / G * DV * 8;
      for (int j = 0; j < 8; ++j) {
        if (j >= nk) { t[j] = vzero(); continue; }
        t[j] = vmul(vload(qh), vload(kh + j * W * 8));
        for (int c = 1; c < DV; ++c) t[j] = vfma(vload(qh + 8 * c), vload(kh + (j * W + c) * 8), t[j]);
      }
      vf8 v = sum8(t);
      if (a.softcap > 0.0f) v = softcap_ps(v, a.softcap);
      store_lanes(s + h * ld, v, lo, hi);
    }
  }
  static void softmax(float* s, int64_t n, float& m, float& l) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    m = mx;
    l = exp_in_place(s, n, mx);
  }
  template <int HB, int CV>  // weighted_values' register tile and order
  static void tile(const float* v, int64_t ldv, int64_t nk, const float* p, int64_t ldp, float* acc, int64_t D, bool start) {
    vf8 o[HB][CV];
    for (int h = 0; h < HB; ++h)
      for (int c = 0; c < CV; ++c) o[h][c] = start ? vzero() : vload(acc + h * D + 8 * c);
    for (int64_t j = 0; j < nk; ++j) {
      vf8 vf[CV];
      for (int c = 0; c < CV; ++c) vf[c] = vload(v + j * ldv + 8 * c);
      for (int h = 0; h < HB; ++h) {
        const vf8 w = vset1(p[h * ldp + j]);
        for (int c = 0; c < CV; ++c) o[h][c] = vfma(w, vf[c], o[h][c]);
      }
    }
    for (int h = 0; h < HB; ++h)
      for (int c = 0; c < CV; ++c) vstore(acc + h * D + 8 * c, o[h][c]);
  }
  static void values(const AttnShape& a, const float* v, int64_t ldv, int64_t nk, const float* p, int64_t ld, float* acc,
                     bool start) {  // attend_range's tiles: 2 heads x 4 vectors
    const int64_t G = a.heads / a.kvh, D = a.d;
    for (int64_t g = 0; g < a.kvh; ++g)
      for (int64_t h0 = 0; h0 < G; h0 += 2)
        for (int c0 = 0; c0 < DV; c0 += 4)
          with_const<2>(static_cast<int>(std::min<int64_t>(2, G - h0)), [&](auto hb) {
            with_const<4>(std::min(4, DV - c0), [&](auto cv) {
              tile<decltype(hb)::value, decltype(cv)::value>(v + (g * DV + c0) * 8, ldv, nk, p + (g * G + h0) * ld, ld,
                                                             acc + (g * G + h0) * D + 8 * c0, D, start);
            });
          });
  }
};

using AttendRowsFn = void (*)(const AttnShape&, const RowJob*, int64_t, RowsScratch&);

template <int DV>
AttendRowsFn attend_rows_for(bool bf16) {
  return bf16 ? attend_rows<RowOps<DV, true>, AttnShape> : attend_rows<RowOps<DV, false>, AttnShape>;
}

AttendRowsFn pick_attend_rows(int64_t dv, bool bf16) {  // dv = head_dim / 8
  switch (dv) {
    case 4: return attend_rows_for<4>(bf16);
    case 8: return attend_rows_for<8>(bf16);
    case 10: return attend_rows_for<10>(bf16);
    case 12: return attend_rows_for<12>(bf16);
    case 16: return attend_rows_for<16>(bf16);
    case 32: return attend_rows_for<32>(bf16);
    case 64: return attend_rows_for<64>(bf16);
    default: return nullptr;
  }
}

}  // namespace
