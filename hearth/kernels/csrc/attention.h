// Attention straight over the paged f16/bf16 KV cache (hearth.kernels.attention's layout:
// [2 (k, v), num_blocks * block_size slots, kv_heads, head_dim]), for rows of many sequences at once.
//
// Work is split into tasks of (query row, kv head, key range): the grouped query heads of one kv
// head share every key and value they load, and a long context is cut into key ranges so that one
// sequence decoding still keeps every thread busy. A task computes exact scores for its keys, then a
// softmax and p.V; split rows are merged by their maxima and sums (flash-decoding).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "blocks.h"
#include "simd.h"

namespace {

struct AttnShape {
  const uint8_t* kv;  // plane 0 = keys, plane 1 = values, 2 bytes per element
  int64_t plane;  // elements per plane: num_slots * kvh * d
  int64_t bs, heads, kvh, d;
  const int64_t* table;  // the row's sequence's block ids
  float scale, softcap;
};

template <bool BF16>
inline __m512 load_half(const uint8_t* p) {  // 16 f16 or bf16 values -> f32
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

// One task: query heads h0 .. h0 + G of one row (q: [G][D] f32) against keys [k0, k1) of kv head g.
// Leaves per head the running max m, the sum of exp(s - m) l, and acc = sum exp(s - m) v (unnormalized).
template <int DV, bool BF16>
void attend_range(const AttnShape& a, const float* q, int64_t g, int64_t G, int64_t k0, int64_t k1, float* m,
                  float* l, float* acc, std::vector<float>& scores) {
  const int64_t n = k1 - k0, D = a.d, stride = a.kvh * D * 2;  // bytes from one slot to the next
  if (static_cast<int64_t>(scores.size()) < G * (n + 16)) scores.resize(G * (n + 16));
  float* s = scores.data();
  const int64_t ld = n + 16;
  auto slot_ptr = [&](int plane, int64_t key) {
    const int64_t slot = a.table[key / a.bs] * a.bs + key % a.bs;
    return a.kv + (plane * a.plane + (slot * a.kvh + g) * D) * 2;
  };
  __m512 qv[16][DV];
  for (int64_t h = 0; h < G; ++h)
    for (int c = 0; c < DV; ++c) qv[h][c] = _mm512_mul_ps(_mm512_loadu_ps(q + h * D + 16 * c), _mm512_set1_ps(a.scale));
  for (int64_t h = 0; h < G; ++h) m[h] = -INFINITY;
  // scores: keys walked block by block (consecutive slots inside a block)
  for (int64_t key = k0; key < k1;) {
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* kp = slot_ptr(0, key);
    for (int64_t j = 0; j < run; ++j, kp += stride) {
      __m512 kf[DV];
      for (int c = 0; c < DV; ++c) kf[c] = load_half<BF16>(kp + 32 * c);
      for (int64_t h = 0; h < G; ++h) {
        __m512 t = _mm512_mul_ps(qv[h][0], kf[0]);
        for (int c = 1; c < DV; ++c) t = _mm512_fmadd_ps(qv[h][c], kf[c], t);
        float v = _mm512_reduce_add_ps(t);
        if (a.softcap > 0.0f) v = std::tanh(v / a.softcap) * a.softcap;
        s[h * ld + key - k0 + j] = v;
        m[h] = std::max(m[h], v);
      }
    }
    key += run;
  }
  // probabilities in place
  for (int64_t h = 0; h < G; ++h) {
    const __m512 mx = _mm512_set1_ps(m[h]);
    __m512 sum = _mm512_setzero_ps();
    float* sh = s + h * ld;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask(n - j);
      const __m512 p = _mm512_maskz_mov_ps(k, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sh + j), mx)));
      _mm512_mask_storeu_ps(sh + j, k, p);
      sum = _mm512_add_ps(sum, p);
    }
    l[h] = _mm512_reduce_add_ps(sum);
  }
  // acc = p . V
  __m512 o[16][DV];
  for (int64_t h = 0; h < G; ++h)
    for (int c = 0; c < DV; ++c) o[h][c] = _mm512_setzero_ps();
  for (int64_t key = k0; key < k1;) {
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* vp = slot_ptr(1, key);
    for (int64_t j = 0; j < run; ++j, vp += stride) {
      __m512 vf[DV];
      for (int c = 0; c < DV; ++c) vf[c] = load_half<BF16>(vp + 32 * c);
      for (int64_t h = 0; h < G; ++h) {
        const __m512 p = _mm512_set1_ps(s[h * ld + key - k0 + j]);
        for (int c = 0; c < DV; ++c) o[h][c] = _mm512_fmadd_ps(p, vf[c], o[h][c]);
      }
    }
    key += run;
  }
  for (int64_t h = 0; h < G; ++h)
    for (int c = 0; c < DV; ++c) _mm512_storeu_ps(acc + h * D + 16 * c, o[h][c]);
}

using AttendFn = void (*)(const AttnShape&, const float*, int64_t, int64_t, int64_t, int64_t, float*, float*, float*,
                          std::vector<float>&);

template <int DV>
AttendFn attend_for(bool bf16) {
  return bf16 ? attend_range<DV, true> : attend_range<DV, false>;
}

AttendFn pick_attend(int64_t dv, bool bf16) {
  switch (dv) {
    case 2: return attend_for<2>(bf16);
    case 4: return attend_for<4>(bf16);
    case 5: return attend_for<5>(bf16);
    case 6: return attend_for<6>(bf16);
    case 8: return attend_for<8>(bf16);
    case 16: return attend_for<16>(bf16);
    default: return nullptr;
  }
}

struct AttnTask {
  int64_t row, seq, g, k0, k1, part;  // part: its slot in the partials buffer, -1 when it writes out directly
};

thread_local std::vector<float> attn_scores;

}  // namespace
