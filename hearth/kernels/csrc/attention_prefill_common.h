// The flash prefill kernels' shared pieces (attention_prefill.h's on AMX tiles, attention_prefill_avx512.h's
// on AVX512-BF16): per kv head the context's keys and values packed once (K: per 16 keys, [d / 32] groups
// of 32 dims; V^T: per 32 keys, [d / 16] groups of 16 dims), and a task's walk computed transposed so
// that the softmax runs down vectors whose lanes are query rows: Q^T packing, the causal / window masks,
// the online softmax's step (P = e^(s - max) = 2^((s - max) log2 e) by exp2_bf16, precise to P's bf16
// rounding) and the output rows.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "gemm_bf16.h"

namespace {

struct PrefillPacks {
  int64_t kb0 = 0, nkb = 0, d = 0;  // 32-key blocks kb0 .. kb0 + nkb of the context
  std::vector<uint16_t, AlignedAlloc<uint16_t>> k, v;  // [kvh][nkb][d * 32] each
  int64_t at(int64_t g, int64_t kb) const { return (g * nkb + kb - kb0) * d * 32; }  // block kb of kv head g
};

// K and V of 32-key block kb of kv head g (keys at or past ctx are zeros) into their A tiles:
// K [2 halves][d / 32][16 keys][32 dims], V^T [d / 16][16 dims][32 keys]
template <bool BF16>
void pack_kv_block(const AttnShape& a, int64_t ctx, int64_t g, int64_t kb, PrefillPacks& p) {
  const int64_t d = a.d, ksn = d / 32;
  uint16_t* kt = p.k.data() + p.at(g, kb);
  uint16_t* vt = p.v.data() + p.at(g, kb);
  for (int64_t j = 0; j < 32; ++j) {
    const int64_t key = 32 * kb + j;
    const uint8_t* kr = key < ctx ? slot_row(a, 0, g, key) : nullptr;
    for (int64_t ks = 0; ks < ksn; ++ks) {
      const __m512 lo = kr ? load_half<BF16>(kr + 64 * ks) : _mm512_setzero_ps();
      const __m512 hi = kr ? load_half<BF16>(kr + 64 * ks + 32) : _mm512_setzero_ps();
      _mm512_store_si512(kt + ((j / 16) * ksn + ks) * 512 + 32 * (j % 16), join(to_bf16(lo), to_bf16(hi)));
    }
  }
  for (int64_t c = 0; c < d / 16; ++c) {  // V^T: 16 keys x 16 dims transposed in registers, twice
    __m256i half[2][16];
    for (int h = 0; h < 2; ++h) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) {
        const int64_t key = 32 * kb + 16 * h + j;
        r[j] = _mm512_castps_si512(key < ctx ? load_half<BF16>(slot_row(a, 1, g, key) + 32 * c) : _mm512_setzero_ps());
      }
      transpose16(r);  // r[dim] = that dim of the 16 keys
      for (int i = 0; i < 16; ++i) half[h][i] = to_bf16(_mm512_castsi512_ps(r[i]));
    }
    for (int i = 0; i < 16; ++i)
      _mm512_store_si512(vt + c * 512 + 32 * i, join(half[0][i], half[1][i]));
  }
}

constexpr float LAZY_MAX = 8.0f;  // how far scores may pass the running max before it moves (P <= e^8)
constexpr float LOG2E = 1.44269504f;
const __m512 P_FLOOR = _mm512_set1_ps(-100.0f);  // 2^-100: no subnormal P (an assist per use), ~0 beside 1

// A task's pieces: Q^T packing, the masks, the online softmax's step and the output rows.

// Head column col's Q^T (q * scale, rows padded to 16) into qb's B tiles; rows_buf keeps the scaled rows
inline void pack_q_head(const AttnShape& a, const float* q, int64_t ldq, int64_t rows, int64_t col, float* rows_buf,
                        uint16_t* qb) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < a.d; c += 16)
      _mm512_store_ps(rows_buf + i * a.d + c, _mm512_mul_ps(_mm512_loadu_ps(q + i * ldq + col + c), _mm512_set1_ps(a.scale)));
  pack_rows16(rows_buf, a.d, rows, a.d, qb);
}

struct RowSpan {  // per lane (query row): its position (-1: a padding row) and the first key it sees
  __m512i pos, lo;
  RowSpan(int64_t rows, int64_t pos0, int64_t window) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    pos = _mm512_mask_add_epi32(_mm512_set1_epi32(-1), tail_mask(rows), lane, _mm512_set1_epi32(static_cast<int>(pos0)));
    lo = window > 0 ? _mm512_sub_epi32(pos, _mm512_set1_epi32(static_cast<int>(window - 1))) : _mm512_setzero_si512();
  }
  void key_masks(int64_t kb, __mmask16 ok[32]) const {  // which rows see each key of 32-key block kb
    for (int j = 0; j < 32; ++j) {
      const __m512i key = _mm512_set1_epi32(static_cast<int>(32 * kb + j));
      ok[j] = _mm512_cmple_epi32_mask(key, pos) & _mm512_cmpge_epi32_mask(key, lo);
    }
  }
};

// One head's online-softmax step over a key block's scores st ([keys][16 rows], the first `keys`
// softcapped in place): the block max, and whether the running max m moves. It moves only when some
// row's block max passes it by more than LAZY_MAX: the exponents stay <= e^LAZY_MAX (harmless in f32
// sums and bf16 P), and most blocks skip the rescale of O^T.
struct SoftmaxStep {
  __mmask16 seen;  // rows that had keys before this block
  bool move;
  __m512 mn, base2;  // the new running max; it (0 for rows without keys yet) times log2 e
  SoftmaxStep(float* st, const __mmask16* ok, int keys, float softcap, __m512 m) {
    __m512 bm = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < keys; ++j) {
      __m512 v = _mm512_load_ps(st + 16 * j);
      if (softcap > 0.0f) _mm512_store_ps(st + 16 * j, v = softcap_ps(v, softcap));
      bm = _mm512_mask_max_ps(bm, ok[j], bm, v);
    }
    seen = _mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ);
    move = _mm512_cmp_ps_mask(bm, _mm512_add_ps(m, _mm512_set1_ps(LAZY_MAX)), _CMP_GT_OQ) != 0;
    mn = move ? _mm512_max_ps(m, bm) : m;
    const __mmask16 any = _mm512_cmp_ps_mask(mn, _mm512_set1_ps(-INFINITY), _CMP_GT_OQ);
    base2 = _mm512_mul_ps(_mm512_maskz_mov_ps(any, mn), _mm512_set1_ps(LOG2E));
  }
  // P^T rows (keys 2r, 2r + 1, bf16 pairs) of the 32 keys into pt; keys a row does not see are zeros
  // (their scores are not read). Returns the rows' sums of P.
  __m512 probs(const float* st, const __mmask16* ok, uint16_t (*pt)[32]) const {
    __m512 sum = _mm512_setzero_ps();
    for (int r = 0; r < 16; ++r) {
      __m512 e[2];
      for (int t = 0; t < 2; ++t) {
        const int j = 2 * r + t;
        const __m512 x = _mm512_max_ps(_mm512_fmsub_ps(_mm512_maskz_load_ps(ok[j], st + 16 * j), _mm512_set1_ps(LOG2E), base2), P_FLOOR);
        e[t] = _mm512_maskz_mov_ps(ok[j], exp2_bf16(x));
        sum = _mm512_add_ps(sum, e[t]);
      }
      _mm512_store_si512(pt[r], pair_rows_bf16(e[0], e[1]));
    }
    return sum;
  }
  // Where the max moved, rows that had keys scale O^T (oh: [d][16 rows]) and l by e^(old max - new max);
  // then l takes the block's sum and m the new max.
  void update(__m512 sum, float* oh, int64_t d, __m512& m, __m512& l) const {
    if (move && seen) {
      const __m512 alpha = _mm512_maskz_mov_ps(seen, exp2_bf16(_mm512_max_ps(_mm512_fmsub_ps(m, _mm512_set1_ps(LOG2E), base2), P_FLOOR)));
      l = _mm512_mul_ps(l, alpha);
      for (int64_t i = 0; i < d; ++i) _mm512_store_ps(oh + 16 * i, _mm512_mul_ps(_mm512_load_ps(oh + 16 * i), alpha));
    }
    l = _mm512_add_ps(l, sum);
    m = mn;
  }
};

// Output rows from .. rows (from out's first row, head column col) = (O^T / l)^T, O^T oh: [d][16 rows]
inline void store_rows(const float* oh, int64_t d, __m512 l, int64_t from, int64_t rows, float* out, int64_t ldo,
                       int64_t col) {
  const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), l);
  for (int64_t cc = 0; cc < d / 16; ++cc) {
    __m512i r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(_mm512_mul_ps(_mm512_load_ps(oh + (16 * cc + i) * 16), inv));
    transpose16(r);  // r[row] = its 16 dims
    for (int64_t i = from; i < rows; ++i) _mm512_storeu_ps(out + (i - from) * ldo + col + 16 * cc, _mm512_castsi512_ps(r[i]));
  }
}

}  // namespace
