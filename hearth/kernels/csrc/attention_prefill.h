// Attention of one sequence's long chunk (a prefill) over the paged f16/bf16 cache, on AMX bf16
// tiles (flash attention), computed transposed so that the softmax runs down vectors whose lanes
// are query rows (no horizontal sums): S^T = K . Q^T, O^T = V^T . P^T. Per kv head the context's keys
// and values are packed once into A tiles (K: per 16 keys, [d / 32] tiles of 32 dims; V^T: per 32
// keys, [d / 16] tiles of 16 dims); each task (kv head, 16 query rows) packs its heads' Q^T into B
// tiles and walks 32-key blocks up to its last row: S^T into two C tiles, the causal / window mask
// and an online softmax in f32 vectors, P^T (bf16, pairs of keys) as a B tile, O^T accumulated in
// memory. q, k, v and p are rounded to bf16, as in the SDPA path it replaces; sums are f32. P is
// e^(s - max) = 2^((s - max) log2 e) by exp2_bf16, precise to P's bf16 rounding.
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

constexpr int PENDING = 4;  // key blocks whose P^T waits for one pass of O^T += V^T . P^T

// O^T (oh: [d][16 rows] f32) += V^T . P^T of N key blocks (V^T: vts[i], P^T tiles: pts, 512 apart).
// Each C tile of O^T is loaded and stored once per N blocks: once per block, that traffic (three
// tile loads and stores per product) held the products back. Two C tiles in flight: a C tile's
// load waits for its previous store.
template <int N>
void flush_pv(float* oh, int64_t d, const uint16_t* const* vts, const uint16_t* pts, bool fresh) {
  _tile_loadd(4, pts, 64);
  if constexpr (N > 1) _tile_loadd(5, pts + 512, 64);
  if constexpr (N > 2) _tile_loadd(6, pts + 1024, 64);
  if constexpr (N > 3) _tile_loadd(7, pts + 1536, 64);
  for (int64_t cc = 0; cc < d / 16; cc += 2) {
    if (fresh) {  // O^T holds nothing yet
      _tile_zero(0);
      _tile_zero(1);
    } else {
      _tile_loadd(0, oh + 256 * cc, 64);
      _tile_loadd(1, oh + 256 * (cc + 1), 64);
    }
#define HK_PV(I, P)                                         \
  _tile_loadd(2, vts[I] + cc * 512, 64);                    \
  _tile_loadd(3, vts[I] + (cc + 1) * 512, 64);              \
  _tile_dpbf16ps(0, 2, P);                                  \
  _tile_dpbf16ps(1, 3, P);
    HK_PV(0, 4)
    if constexpr (N > 1) { HK_PV(1, 5) }
    if constexpr (N > 2) { HK_PV(2, 6) }
    if constexpr (N > 3) { HK_PV(3, 7) }
#undef HK_PV
    _tile_stored(0, oh + 256 * cc, 64);
    _tile_stored(1, oh + 256 * (cc + 1), 64);
  }
}

constexpr float LAZY_MAX = 8.0f;  // how far scores may pass the running max before it moves (P <= e^8)
constexpr float LOG2E = 1.44269504f;
const __m512 P_FLOOR = _mm512_set1_ps(-100.0f);  // 2^-100: no subnormal P (an assist per use), ~0 beside 1

// The pieces of a task both flash kernels share (this file's on tiles, attention_prefill_avx512.h's
// on vdpbf16ps): Q^T packing, the masks, the online softmax's step and the output rows.

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

// One task: query rows t0 .. t0 + rows (rows <= 16; positions pos0 + i) of heads g G .. g G + G; rows
// from .. rows of the output are stored, from out's first row. With `packed` instead (from = 0), the
// task's rows go as bf16 straight into the B tiles of the output projection's matmul (pack_b's layout
// for [T, heads * d], packed at this task's 16 rows; padding rows zero): O^T is already dims by rows,
// so each tile row is two dims' rows paired, with no transpose and no f32 rows to pack again.
void prefill_task(const AttnShape& a, const PrefillPacks& p, const float* q, int64_t ldq, int64_t rows, int64_t pos0,
                  int64_t window, int64_t g, int64_t G, int64_t from, float* out, int64_t ldo, uint16_t* packed) {
  const int64_t d = a.d, ksn = d / 32;
  thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> qb_buf;
  thread_local std::vector<float, AlignedAlloc<float>> o_buf, rows_buf;
  qb_buf.resize(G * ksn * 512);
  o_buf.resize(G * d * 16);  // O^T per head: [d][16 rows], written by its first flush
  rows_buf.resize(16 * d);
  uint16_t* qb = qb_buf.data();
  float* ot = o_buf.data();
  for (int64_t h = 0; h < G; ++h) pack_q_head(a, q, ldq, rows, (g * G + h) * d, rows_buf.data(), qb + h * ksn * 512);
  const RowSpan span(rows, pos0, window);
  __m512 m[16], l[16];
  for (int64_t h = 0; h < G; ++h) m[h] = _mm512_set1_ps(-INFINITY), l[h] = _mm512_setzero_ps();
  const int64_t last = pos0 + rows - 1, first_key = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0;
  thread_local std::vector<float, AlignedAlloc<float>> st_buf;
  thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> pt_buf;
  st_buf.resize(G * 32 * 16);
  pt_buf.resize(G * PENDING * 512);
  int pending[16] = {};                 // per head: key blocks waiting, their V^T in vts[h]
  bool fresh[16];                       // per head: O^T not written yet
  std::fill(fresh, fresh + G, true);
  const uint16_t* vts[16][PENDING];
  auto flush = [&](int64_t h) {
    const uint16_t* pts = pt_buf.data() + h * PENDING * 512;
    float* oh = ot + h * d * 16;
    switch (pending[h]) {
      case 1: flush_pv<1>(oh, d, vts[h], pts, fresh[h]); break;
      case 2: flush_pv<2>(oh, d, vts[h], pts, fresh[h]); break;
      case 3: flush_pv<3>(oh, d, vts[h], pts, fresh[h]); break;
      case 4: flush_pv<4>(oh, d, vts[h], pts, fresh[h]); break;
      default: return;
    }
    pending[h] = 0;
    fresh[h] = false;
  };
  for (int64_t kb = first_key / 32; kb <= last / 32; ++kb) {
    const uint16_t* kt = p.k.data() + p.at(g, kb);
    const uint16_t* vt = p.v.data() + p.at(g, kb);
    // S^T of every head: [h][32 keys][16 rows], two heads at a time so that four C tiles accumulate
    // side by side (one C tile's products wait for its previous ones)
    for (int64_t h = 0; h < G; h += 2) {
      const bool pair = h + 1 < G;
      // A: keys 0-15 and 16-31, B: the two heads' Q^T
      tile_products_2x2(kt, kt + ksn * 512, qb + h * ksn * 512, pair ? qb + (h + 1) * ksn * 512 : nullptr, ksn);
      float* sh = st_buf.data() + h * 512;
      _tile_stored(0, sh, 64);        // head h, keys 0-15
      _tile_stored(2, sh + 256, 64);  // head h, keys 16-31
      if (pair) {
        _tile_stored(1, sh + 512, 64);
        _tile_stored(3, sh + 768, 64);
      }
    }
    __mmask16 ok[32];
    span.key_masks(kb, ok);
    for (int64_t h = 0; h < G; ++h) {
      float* st = st_buf.data() + h * 512;  // [32 keys][16 rows]
      const SoftmaxStep step(st, ok, 32, a.softcap, m[h]);
      // O^T accumulates in memory through tiles alone while the max stays
      if (step.move && step.seen) flush(h);  // the waiting blocks' P^T used the old max, as O^T so far
      uint16_t (*pt)[32] = reinterpret_cast<uint16_t (*)[32]>(pt_buf.data() + (h * PENDING + pending[h]) * 512);
      step.update(step.probs(st, ok, pt), ot + h * d * 16, d, m[h], l[h]);
      vts[h][pending[h]++] = vt;
      if (pending[h] == PENDING) flush(h);
    }
  }
  for (int64_t h = 0; h < G; ++h) flush(h);
  if (packed) {
    const __mmask16 real = tail_mask(rows);  // padding rows saw no key: l = 0
    for (int64_t h = 0; h < G; ++h) {
      const __m512 inv = _mm512_maskz_div_ps(real, _mm512_set1_ps(1.0f), l[h]);
      const float* oh = ot + h * d * 16;
      uint16_t* tiles = packed + (g * G + h) * d * 16;  // this head's d / 32 tiles
      for (int64_t i = 0; i < d; i += 2)
        _mm512_store_si512(tiles + (i / 32) * 512 + 16 * (i % 32),
                           pair_rows_bf16(_mm512_mul_ps(_mm512_load_ps(oh + 16 * i), inv),
                                          _mm512_mul_ps(_mm512_load_ps(oh + 16 * (i + 1)), inv)));
    }
    return;
  }
  for (int64_t h = 0; h < G; ++h) store_rows(ot + h * d * 16, d, l[h], from, rows, out, ldo, (g * G + h) * d);
}

}  // namespace
