// Attention of one sequence's long chunk (a prefill) over the paged f16/bf16 cache, on AMX bf16
// tiles (flash attention). Per kv head the context's keys and values are packed once into B tiles
// (K: per 16 keys, [d / 32] tiles of pairs of dims; V: per 32 keys, [d / 16] tiles of pairs of
// keys); then each task (kv head, 16 query rows) walks 32-key blocks up to its last row: Q.K^T of
// every head of the group into two C tiles, the causal / window mask and an online softmax in f32
// vectors, P (bf16) . V into C tiles added to O in memory. q, k, v and p are rounded to bf16, as in
// the SDPA path it replaces; sums and the softmax are f32.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "gemm_bf16.h"

namespace {

// two rows of 16 bf16 (keys 2r, 2r + 1 of one 16-dim chunk) -> one B-tile row: their pairs, interleaved
inline __m512i interleave_rows(__m256i a, __m256i b) {
  static const __m512i idx = [] {
    alignas(64) int16_t ix[32];
    for (int k = 0; k < 16; ++k) ix[2 * k] = static_cast<int16_t>(k), ix[2 * k + 1] = static_cast<int16_t>(32 + k);
    return _mm512_load_si512(ix);
  }();
  return _mm512_permutex2var_epi16(_mm512_castsi256_si512(a), idx, _mm512_castsi256_si512(b));
}

struct PrefillPacks {
  int64_t kb0 = 0, nkb = 0, d = 0;  // 32-key blocks kb0 .. kb0 + nkb of the context
  std::vector<uint16_t, AlignedAlloc<uint16_t>> k, v;  // [kvh][nkb][d * 32] each
  const uint16_t* k_tiles(int64_t g, int64_t kb) const { return k.data() + (g * nkb + kb - kb0) * d * 32; }
  const uint16_t* v_tiles(int64_t g, int64_t kb) const { return v.data() + (g * nkb + kb - kb0) * d * 32; }
};

// K and V of 32-key block kb of kv head g (keys at or past ctx are zeros) into their B tiles
template <bool BF16>
void pack_kv_block(const AttnShape& a, int64_t ctx, int64_t g, int64_t kb, PrefillPacks& p) {
  const int64_t d = a.d;
  uint16_t* kt = const_cast<uint16_t*>(p.k_tiles(g, kb));
  uint16_t* vt = const_cast<uint16_t*>(p.v_tiles(g, kb));
  alignas(64) float rows[16 * 256];
  for (int half = 0; half < 2; ++half) {  // K: 16 keys at a time, as vnni_half's weight rows
    for (int i = 0; i < 16; ++i) {
      const int64_t j = 32 * kb + 16 * half + i;
      for (int64_t c = 0; c < d; c += 16)
        _mm512_store_ps(rows + i * d + c, j < ctx ? load_half<BF16>(slot_row(a, 0, g, j) + 2 * c) : _mm512_setzero_ps());
    }
    vnni_half(rows, d, d, kt + half * (d / 32) * 512);
  }
  for (int r = 0; r < 16; ++r) {  // V: row r of chunk c's tile holds keys 2r, 2r + 1 over dims 16c ..
    const int64_t j0 = 32 * kb + 2 * r, j1 = j0 + 1;
    for (int64_t c = 0; c < d / 16; ++c) {
      const __m256i x0 = j0 < ctx ? to_bf16(load_half<BF16>(slot_row(a, 1, g, j0) + 32 * c)) : _mm256_setzero_si256();
      const __m256i x1 = j1 < ctx ? to_bf16(load_half<BF16>(slot_row(a, 1, g, j1) + 32 * c)) : _mm256_setzero_si256();
      _mm512_store_si512(vt + c * 512 + 32 * r, interleave_rows(x0, x1));
    }
  }
}

// One task: query rows t0 .. t0 + 16 (their positions pos0 + i) of heads g G .. g G + G.
void prefill_task(const AttnShape& a, const PrefillPacks& p, const float* q, int64_t ldq, int64_t rows, int64_t pos0,
                  int64_t window, int64_t g, int64_t G, float* out, int64_t ldo) {
  const int64_t d = a.d, ksn = d / 32;
  thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> qa_buf;
  thread_local std::vector<float, AlignedAlloc<float>> o_buf;
  qa_buf.resize(G * ksn * 512);
  o_buf.assign(G * 16 * d, 0.0f);
  uint16_t* qa = qa_buf.data();
  float* o = o_buf.data();
  float m[16 * 16], l[16 * 16];  // per head of the group (G <= 16) and row
  std::fill(m, m + G * 16, -INFINITY);
  std::fill(l, l + G * 16, 0.0f);
  for (int64_t h = 0; h < G; ++h)  // A tiles of q * scale: row i = 32 dims per K step
    for (int64_t i = 0; i < 16; ++i)
      for (int64_t ks = 0; ks < ksn; ++ks) {
        uint16_t* dst = qa + (h * ksn + ks) * 512 + 32 * i;
        if (i >= rows) {
          _mm512_store_si512(dst, _mm512_setzero_si512());
          continue;
        }
        const float* src = q + i * ldq + (g * G + h) * d + 32 * ks;
        const __m512 s = _mm512_set1_ps(a.scale);
        const __m256i lo = to_bf16(_mm512_mul_ps(_mm512_loadu_ps(src), s));
        const __m256i hi = to_bf16(_mm512_mul_ps(_mm512_loadu_ps(src + 16), s));
        _mm512_store_si512(dst, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      }
  const int64_t last = pos0 + rows - 1, first_key = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0;
  alignas(64) float s[16][32];
  alignas(64) float c[16][16];
  alignas(64) uint16_t pa[16][32];
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t kb = first_key / 32; kb <= last / 32; ++kb) {
    const uint16_t* kt = p.k_tiles(g, kb);
    const uint16_t* vt = p.v_tiles(g, kb);
    for (int64_t h = 0; h < G; ++h) {
      _tile_zero(0);
      _tile_zero(1);
      for (int64_t ks = 0; ks < ksn; ++ks) {
        _tile_loadd(4, qa + (h * ksn + ks) * 512, 64);
        _tile_loadd(6, kt + ks * 512, 64);
        _tile_loadd(7, kt + (ksn + ks) * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
      }
      _tile_stored(0, &s[0][0], 128);
      _tile_stored(1, &s[0][16], 128);
      float* mh = m + 16 * h;
      float* lh = l + 16 * h;
      float* oh = o + h * 16 * d;
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t pos = pos0 + i, lo = window > 0 ? pos - window + 1 : 0;
        __mmask16 k[2] = {0, 0};
        __m512 v[2];
        float bm = -INFINITY;
        for (int half = 0; half < 2 && i < rows; ++half) {
          const __m512i j = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(32 * kb + 16 * half)));
          k[half] = _mm512_cmple_epi32_mask(j, _mm512_set1_epi32(static_cast<int>(pos))) &
                    _mm512_cmpge_epi32_mask(j, _mm512_set1_epi32(static_cast<int>(lo)));
          v[half] = _mm512_load_ps(s[i] + 16 * half);
          if (a.softcap > 0.0f) v[half] = softcap_ps(v[half], a.softcap);
          if (k[half]) bm = std::max(bm, _mm512_mask_reduce_max_ps(k[half], v[half]));
        }
        const float mn = std::max(mh[i], bm);
        if (mn == -INFINITY) {  // no key yet (or a padding row): p = 0
          _mm512_store_si512(pa[i], _mm512_setzero_si512());
          continue;
        }
        const float alpha = std::exp(mh[i] - mn);  // 0 when mh was -inf
        __m512 pv[2];
        float sum = 0.0f;
        for (int half = 0; half < 2; ++half) {
          const __m512 x = _mm512_sub_ps(v[half], _mm512_set1_ps(mn));
          const __mmask16 live = k[half] & _mm512_cmp_ps_mask(x, _mm512_set1_ps(-80.0f), _CMP_GT_OQ);
          pv[half] = _mm512_maskz_mov_ps(live, exp_ps(x));
          sum += _mm512_reduce_add_ps(pv[half]);
        }
        lh[i] = lh[i] * alpha + sum;
        mh[i] = mn;
        if (alpha != 1.0f)
          for (int64_t cc = 0; cc < d; cc += 16)
            _mm512_store_ps(oh + i * d + cc, _mm512_mul_ps(_mm512_load_ps(oh + i * d + cc), _mm512_set1_ps(alpha)));
        _mm512_store_si512(pa[i], _mm512_inserti64x4(_mm512_castsi256_si512(to_bf16(pv[0])), to_bf16(pv[1]), 1));
      }
      _tile_loadd(4, &pa[0][0], 64);  // P . V, 16 dims (one C tile) at a time
      for (int64_t cc = 0; cc < d / 16; ++cc) {
        _tile_zero(0);
        _tile_loadd(6, vt + cc * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_stored(0, &c[0][0], 64);
        for (int64_t i = 0; i < rows; ++i) {
          float* dst = oh + i * d + 16 * cc;
          _mm512_store_ps(dst, _mm512_add_ps(_mm512_load_ps(dst), _mm512_load_ps(c[i])));
        }
      }
    }
  }
  for (int64_t h = 0; h < G; ++h)
    for (int64_t i = 0; i < rows; ++i) {
      const float inv = 1.0f / l[16 * h + i];
      float* dst = out + i * ldo + (g * G + h) * d;
      for (int64_t cc = 0; cc < d; cc += 16)
        _mm512_storeu_ps(dst + cc, _mm512_mul_ps(_mm512_load_ps(o + (h * 16 + i) * d + cc), _mm512_set1_ps(inv)));
    }
}

}  // namespace
