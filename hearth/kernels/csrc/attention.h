// Attention straight over the paged f16/bf16 KV cache (hearth.kernels.attention's layout:
// [2 (k, v), num_blocks * block_size slots, kv_heads, head_dim]), for rows of many sequences at once.
//
// Work is split into tasks of (query row, key range), every head of the row in one task: a key's
// slot holds all kv heads side by side, so a task reads its blocks front to back (measured 1.8x
// faster at 16 sequences x 320 keys than one task per kv head reading every third 128-byte row),
// and a long context is cut into key ranges so that one sequence decoding still keeps every thread
// busy. A task computes exact scores for its keys, then a softmax and p.V; split rows are merged by
// their maxima and sums (flash-decoding).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attention_rows.h"
#include "attention_tasks.h"
#include "blocks.h"
#include "simd.h"

namespace {

template <bool BF16>
inline __m512 load_half(const uint8_t* p) {  // 16 f16 or bf16 values -> f32
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

// [sum(v[0]), sum(v[1]), ..., sum(v[15])]: pairwise adds that halve the vectors and double the
// rows they cover at each of 4 levels (45 shuffles and adds for 16 horizontal sums)
inline __m512 sum16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  for (int i = 0; i < 8; ++i)  // 128-bit lane L: [v2i(0+2), v2i+1(0+2), v2i(1+3), v2i+1(1+3)]
    a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // lane L: [v4i, v4i+1, v4i+2, v4i+3] partial over lane L
    const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
    b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  for (int i = 0; i < 2; ++i)  // [b2i L0+L2, b2i L1+L3, b2i+1 L0+L2, b2i+1 L1+L3]
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x44), _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
}

inline __m512 softcap_ps(__m512 v, float cap) {  // cap * tanh(v / cap), tanh(z) = 1 - 2 / (1 + e^2z)
  const __m512 z = _mm512_mul_ps(v, _mm512_set1_ps(2.0f / cap));
  const __m512 t = _mm512_sub_ps(_mm512_set1_ps(1.0f),
                                 _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(z))));
  return _mm512_mul_ps(t, _mm512_set1_ps(cap));
}

// Prefetch the block after `next` (a block's keys take ~the memory latency to process): blocks sit
// anywhere in the pool, so no hardware prefetcher guesses the jump. dims [16 c0, 16 c0 + width).
inline void prefetch_ahead(const AttnShape& a, int plane, int64_t g, int64_t next, int64_t k1, int c0, int64_t width) {
  const int64_t key = (next / a.bs + 1) * a.bs;
  if (key >= k1) return;
  const uint8_t* p = slot_row(a, plane, g, key) + 32 * c0;
  const int64_t n = std::min(a.bs, k1 - key), stride = a.kvh * a.d * 2;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < width * 2; b += 64) _mm_prefetch(reinterpret_cast<const char*>(p + j * stride + b), _MM_HINT_T0);
}

// acc[h][c0 .. c0 + CV) += sum_j p[h][j] v_j for HB heads from h0, over keys [k0, k1) (values of kv
// head g): the accumulators stay in registers (HB x CV <= 16)
template <int HB, int CV, bool BF16>
void weighted_values(const AttnShape& a, int64_t g, int64_t k0, int64_t k1, const float* p, int64_t ld, int64_t h0,
                     int c0, float* acc, const uint8_t* (*slot)(const AttnShape&, int, int64_t, int64_t)) {
  __m512 o[HB][CV];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) o[h][c] = _mm512_setzero_ps();
  const int64_t stride = a.kvh * a.d * 2;
  for (int64_t key = k0; key < k1;) {
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* vp = slot(a, 1, g, key) + 32 * c0;  // 16 halves per vector
    prefetch_ahead(a, 1, g, key + run, k1, c0, CV * 16);
    for (int64_t j = 0; j < run; ++j, vp += stride) {
      // a tree row's remapped keys are not consecutive slots: the same keys in the same order
      const uint8_t* vj = remapped(a, key + j) ? slot(a, 1, g, key + j) + 32 * c0 : vp;
      __m512 vf[CV];
      for (int c = 0; c < CV; ++c) vf[c] = load_half<BF16>(vj + 32 * c);
      for (int h = 0; h < HB; ++h) {
        const __m512 w = _mm512_set1_ps(p[(h0 + h) * ld + key - k0 + j]);
        for (int c = 0; c < CV; ++c) o[h][c] = _mm512_fmadd_ps(w, vf[c], o[h][c]);
      }
    }
    key += run;
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) _mm512_storeu_ps(acc + (h0 + h) * a.d + 16 * (c0 + c), o[h][c]);
}

// sh[0 .. n) <- exp(sh - mx) in place; returns their sum. Weights below e^-80 are dropped: exp_ps
// would make them denormals, which slow p.V ~30x.
inline float exp_in_place(float* sh, int64_t n, float mx) {
  const __m512 vmx = _mm512_set1_ps(mx);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = tail_mask(n - j);
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, sh + j), vmx);
    const __mmask16 live = _mm512_mask_cmp_ps_mask(k, x, _mm512_set1_ps(-80.0f), _CMP_GT_OQ);
    const __m512 p = _mm512_maskz_mov_ps(live, exp_ps(x));
    _mm512_mask_storeu_ps(sh + j, k, p);
    sum = _mm512_add_ps(sum, p);
  }
  return _mm512_reduce_add_ps(sum);
}

// p . V in register tiles of up to 4 heads x 4 vectors (64 dims): tile(hb, cv, h0, c0) for heads
// h0 .. h0 + hb and vectors c0 .. c0 + cv, hb and cv as integral constants (template arguments)
template <int DV, class Tile>
void for_value_tiles(int64_t G, const Tile& tile) {
  for (int64_t h0 = 0; h0 < G; h0 += 4)
    for (int c0 = 0; c0 < DV; c0 += 4)
      with_const<4>(static_cast<int>(std::min<int64_t>(4, G - h0)), [&](auto hb) {
        with_const<4>(std::min(4, DV - c0), [&](auto cv) { tile(hb, cv, h0, c0); });
      });
}

// One task: every query head of one row (q: [kvh][G][D] f32) against keys [k0, k1). Leaves per head
// the running max m, the sum of exp(s - m) l, and acc = sum exp(s - m) v (unnormalized). Each key's
// slot (all kv heads, contiguous) is read whole, front to back through a block, so that the
// hardware prefetchers and whole cache lines serve every head; the next block is prefetched by
// software while this one is converted (blocks sit anywhere in the pool).
template <int DV, bool BF16>
void attend_range(const AttnShape& a, const float* q, int64_t k0, int64_t k1, float* m, float* l, float* acc,
                  AttnScratch& buf) {
  const int64_t n = k1 - k0, D = a.d, H = a.heads, G = H / a.kvh, W = a.kvh * DV;  // W: vectors per slot
  // every scratch row starts a cache line: a vector load from a vector's default (16-byte) alignment
  // straddles two lines every time
  const int64_t slot_bytes = a.kvh * D * 2, ld = (n + 31) / 16 * 16;
  float* s = aligned64(buf.scores, H * ld);
  float* qs = aligned64(buf.qs, H * D);  // q * scale
  float* vmax = aligned64(buf.vmax, H * 16);
  float* kt = aligned64(buf.kt, 16 * W * 16);  // 16 slots' keys in f32: [key][kv head][DV vectors]
  for (int64_t i = 0; i < H * D; ++i) qs[i] = q[i] * a.scale;
  for (int64_t h = 0; h < H; ++h) _mm512_storeu_ps(vmax + 16 * h, _mm512_set1_ps(-INFINITY));
  // the next block's keys into L1 where rows_dot.h prefetches in software (Intel), else (AMD) into L2:
  // on Zen 4 the core stalled at the L1 prefetches (~19% of this function's samples) and into L2 a
  // 16-sequence decode step of SmolLM2 took 0.94-0.95x the CPU time (attention alone 0.72-0.80x at 16
  // x 330 and 1 x 4096 keys); without them 16 sequences gained alike, but one long sequence took 1.4-1.8x
  const bool keys_l1 = software_prefetch();
  // scores, 16 keys at a time: their K rows converted to f32 once, then per head 16 dot products
  // summed across lanes together (one transpose-add tree instead of 16 horizontal sums)
  for (int64_t key = k0; key < k1;) {
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const int64_t ahead = key + run < k1 ? std::min(a.bs, k1 - key - run) : 0;  // keys of the next block
    const uint8_t* kp = slot_row(a, 0, 0, key);
    const uint8_t* np = ahead ? slot_row(a, 0, 0, key + run) : kp;
    for (int64_t t0 = 0; t0 < run; t0 += 16) {
      const int r = static_cast<int>(std::min<int64_t>(16, run - t0));
      for (int j = 0; j < r; ++j, kp += slot_bytes) {
        const uint8_t* kj = remapped(a, key + t0 + j) ? slot_row(a, 0, 0, key + t0 + j) : kp;  // a tree row's path
        for (int64_t i = t0 + j; i < ahead; i += run)  // the next block's slot i, spread over this block's keys
          for (int64_t b = 0; b < slot_bytes; b += 64) {
            const char* line = reinterpret_cast<const char*>(np + i * slot_bytes + b);
            if (keys_l1) _mm_prefetch(line, _MM_HINT_T0);
            else _mm_prefetch(line, _MM_HINT_T1);
          }
        for (int64_t b = 0; b < slot_bytes; b += 64)  // this key's values, into L2 for p.V
          _mm_prefetch(reinterpret_cast<const char*>(kj + a.plane * 2 + b), _MM_HINT_T1);
        for (int64_t c = 0; c < W; ++c) _mm512_store_ps(kt + (j * W + c) * 16, load_half<BF16>(kj + 32 * c));
      }
      const __mmask16 k = tail_mask(r);
      for (int64_t h = 0; h < H; ++h) {
        __m512 t[16], qv[DV];
        const float* kh = kt + h / G * DV * 16;
        // the head's q in registers: loads from qs could alias the kt stores, so the compiler
        // would reload them for every key (two loads per fma instead of one)
        for (int c = 0; c < DV; ++c) qv[c] = _mm512_loadu_ps(qs + h * D + 16 * c);
        for (int j = 0; j < 16; ++j) {
          if (j >= r) { t[j] = _mm512_setzero_ps(); continue; }
          t[j] = _mm512_mul_ps(qv[0], _mm512_load_ps(kh + j * W * 16));
          for (int c = 1; c < DV; ++c) t[j] = _mm512_fmadd_ps(qv[c], _mm512_load_ps(kh + (j * W + c) * 16), t[j]);
        }
        __m512 v = sum16(t);
        if (a.softcap > 0.0f) v = softcap_ps(v, a.softcap);
        _mm512_mask_storeu_ps(s + h * ld + key - k0 + t0, k, v);
        _mm512_storeu_ps(vmax + 16 * h, _mm512_mask_max_ps(_mm512_loadu_ps(vmax + 16 * h), k, _mm512_loadu_ps(vmax + 16 * h), v));
      }
    }
    key += run;
  }
  for (int64_t h = 0; h < H; ++h) {  // probabilities in place
    m[h] = _mm512_reduce_max_ps(_mm512_loadu_ps(vmax + 16 * h));
    l[h] = exp_in_place(s + h * ld, n, m[h]);
  }
  for (int64_t g = 0; g < a.kvh; ++g)  // acc = p . V, per kv head
    for_value_tiles<DV>(G, [&](auto hb, auto cv, int64_t h0, int c0) {
      weighted_values<decltype(hb)::value, decltype(cv)::value, BF16>(a, g, k0, k1, s + g * G * ld, ld, h0, c0,
                                                                      acc + g * G * D, slot_row);
    });
}

using AttendFn = void (*)(const AttnShape&, const float*, int64_t, int64_t, float*, float*, float*, AttnScratch&);

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
    case 32: return attend_for<32>(bf16);  // gemma4's global layers (512)
    default: return nullptr;
  }
}

// attention_rows.h's vector work on this tier: attend_range's operations, row by row
template <int DV_, bool BF16>
struct RowOps {
  static constexpr int L = 16, DV = DV_;
  static void convert(const AttnShape& a, int plane, int64_t k, int64_t n, int64_t end, float* dst, bool values) {
    const int64_t bytes = a.kvh * a.d * 2, W = a.kvh * DV;
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* src = slot_row(a, plane, 0, k + j);
      if (k + n + j < end) {
        const uint8_t* nx = slot_row(a, plane, 0, k + n + j);
        for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(nx + b), _MM_HINT_T0);
      }
      if (values)
        for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(src + a.plane * 2 + b), _MM_HINT_T1);
      for (int64_t c = 0; c < W; ++c) _mm512_store_ps(dst + (j * W + c) * 16, load_half<BF16>(src + 32 * c));
    }
  }
  static void scores(const AttnShape& a, const float* kt, int nk, const float* qs, float* s, int64_t ld, int lo, int hi) {
    const int64_t H = a.heads, G = H / a.kvh, W = a.kvh * DV;
    const __mmask16 live = static_cast<__mmask16>(tail_mask(hi) & ~tail_mask(lo));
    for (int64_t h = 0; h < H; ++h) {
      __m512 t[16], qv[DV];
      const float* kh = kt + h / G * DV * 16;
      for (int c = 0; c < DV; ++c) qv[c] = _mm512_loadu_ps(qs + h * a.d + 16 * c);
      for (int j = 0; j < 16; ++j) {
        if (j >= nk) { t[j] = _mm512_setzero_ps(); continue; }
        t[j] = _mm512_mul_ps(qv[0], _mm512_load_ps(kh + j * W * 16));
        for (int c = 1; c < DV; ++c) t[j] = _mm512_fmadd_ps(qv[c], _mm512_load_ps(kh + (j * W + c) * 16), t[j]);
      }
      __m512 v = sum16(t);
      if (a.softcap > 0.0f) v = softcap_ps(v, a.softcap);
      _mm512_mask_storeu_ps(s + h * ld, live, v);
    }
  }
  static void softmax(float* s, int64_t n, float& m, float& l) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 k = tail_mask(n - j);
      mx = _mm512_mask_max_ps(mx, k, mx, _mm512_maskz_loadu_ps(k, s + j));
    }
    m = _mm512_reduce_max_ps(mx);
    l = exp_in_place(s, n, m);
  }
  template <int HB, int CV>  // weighted_values' register tile and order
  static void tile(const float* v, int64_t ldv, int64_t nk, const float* p, int64_t ldp, float* acc, int64_t D, bool start) {
    __m512 o[HB][CV];
    for (int h = 0; h < HB; ++h)
      for (int c = 0; c < CV; ++c) o[h][c] = start ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + h * D + 16 * c);
    for (int64_t j = 0; j < nk; ++j) {
      __m512 vf[CV];
      for (int c = 0; c < CV; ++c) vf[c] = _mm512_load_ps(v + j * ldv + 16 * c);
      for (int h = 0; h < HB; ++h) {
        const __m512 w = _mm512_set1_ps(p[h * ldp + j]);
        for (int c = 0; c < CV; ++c) o[h][c] = _mm512_fmadd_ps(w, vf[c], o[h][c]);
      }
    }
    for (int h = 0; h < HB; ++h)
      for (int c = 0; c < CV; ++c) _mm512_storeu_ps(acc + h * D + 16 * c, o[h][c]);
  }
  static void values(const AttnShape& a, const float* v, int64_t ldv, int64_t nk, const float* p, int64_t ld, float* acc,
                     bool start) {
    const int64_t G = a.heads / a.kvh, D = a.d;
    for (int64_t g = 0; g < a.kvh; ++g)
      for_value_tiles<DV>(G, [&](auto hb, auto cv, int64_t h0, int c0) {
        tile<decltype(hb)::value, decltype(cv)::value>(v + (g * DV + c0) * 16, ldv, nk, p + (g * G + h0) * ld, ld,
                                                       acc + (g * G + h0) * D + 16 * c0, D, start);
      });
  }
};

using AttendRowsFn = void (*)(const AttnShape&, const RowJob*, int64_t, RowsScratch&);

template <int DV>
AttendRowsFn attend_rows_for(bool bf16) {
  return bf16 ? attend_rows<RowOps<DV, true>, AttnShape> : attend_rows<RowOps<DV, false>, AttnShape>;
}

AttendRowsFn pick_attend_rows(int64_t dv, bool bf16) {  // dv = head_dim / 16
  switch (dv) {
    case 2: return attend_rows_for<2>(bf16);
    case 4: return attend_rows_for<4>(bf16);
    case 5: return attend_rows_for<5>(bf16);
    case 6: return attend_rows_for<6>(bf16);
    case 8: return attend_rows_for<8>(bf16);
    case 16: return attend_rows_for<16>(bf16);
    case 32: return attend_rows_for<32>(bf16);
    default: return nullptr;
  }
}

thread_local std::vector<float> attn_scores;

}  // namespace
