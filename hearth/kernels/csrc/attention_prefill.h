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

#include "attention_prefill_common.h"

namespace {

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
