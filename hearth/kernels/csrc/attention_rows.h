// Several rows of one sequence in one step (a verify step's chain, a token tree's nodes) over the
// paged f16/bf16 cache (attention.h's layout), as one row group (attention_tasks.h): each K/V block is
// read and converted to f32 once for every row and head of the group, not once per row. Every row
// keeps attend_range's arithmetic: a key's score is its own sum (the same products, fma chain and
// transpose-add tree, whatever lane it lands in), the max and the sum of exp run over the row's own
// range from its own first key, and p.V adds the keys of its range in order into the same register
// tiles (stored and reloaded between key chunks, which is exact). So each row gets its one-row bits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention.h"

namespace {

struct RowJob {  // one task of a row group
  const float* q;  // the row's q: [heads][d] f32
  int64_t k0, k1;  // its key range
  const int64_t* remap;  // a tree row's path slots from remap_from on (null: none)
  int64_t remap_from;
  float *m, *l, *acc;  // per head: max, sum of exp, unnormalized p.V [heads][d]
};

struct RowsScratch {
  std::vector<float> scores, qs, kv;
  std::vector<int64_t> off;
  std::vector<char> started;
};

inline float* aligned64(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n + 16) v.resize(n + 16);
  float* p = v.data();
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64 / sizeof(float);
}

// keys [k, k + n) of plane `plane` (all kv heads: W vectors a key) -> dst [n][W][16] f32; the keys of
// the next chunk (k + n .. k + 2n, below `end`) are prefetched, and with `values` this chunk's values
// into L2 for p.V
template <bool BF16>
void convert_keys(const AttnShape& a, int plane, int64_t k, int64_t n, int64_t end, int64_t W, float* dst, bool values) {
  const int64_t bytes = a.kvh * a.d * 2;
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

// scores of nk <= 16 keys (kt: [16][W][16] f32) for every head of one row (qs: q * scale, [heads][d]),
// attend_range's operations: stored at s + h * ld + lane where `live`
template <int DV>
void chunk_scores(const AttnShape& a, const float* kt, int nk, const float* qs, float* s, int64_t ld, __mmask16 live) {
  const int64_t H = a.heads, G = H / a.kvh, W = a.kvh * DV;
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

// acc[h][16 c .. ] (+)= sum_j p[h][j] v_j over nk keys (v: f32, ldv floats a key) for HB heads x CV
// vectors: weighted_values' register tile and order; start: from zero, else on from acc
template <int HB, int CV>
void pv_tile(const float* v, int64_t ldv, int64_t nk, const float* p, int64_t ldp, float* acc, int64_t D, bool start) {
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

inline AttnShape row_shape(const AttnShape& a, const RowJob& r) {
  AttnShape s = a;
  s.remap = r.remap;
  s.remap_from = r.remap_from;
  return s;
}

// The group's rows: scores for keys [K0, B) (every row's ordinary slots) from one conversion, then
// each row's own keys from B on (a tree row's path); softmax per row; p.V likewise.
template <int DV, bool BF16>
void attend_rows(const AttnShape& a, const RowJob* rows, int64_t R, RowsScratch& buf) {
  const int64_t D = a.d, H = a.heads, G = H / a.kvh, W = a.kvh * DV;
  int64_t K0 = rows[0].k0, K1 = rows[0].k1, B = INT64_MAX;
  for (int64_t r = 0; r < R; ++r) {
    K0 = std::min(K0, rows[r].k0);
    K1 = std::max(K1, rows[r].k1);
    if (rows[r].remap) B = std::min(B, rows[r].remap_from);
  }
  B = std::max(K0, std::min(B, K1));
  buf.off.resize(R);
  int64_t total = 0;
  for (int64_t r = 0; r < R; ++r) {  // each row's scores [heads][n + 16] after 16 floats of front pad
    buf.off[r] = total + 16;
    total += 16 + H * (rows[r].k1 - rows[r].k0 + 16);
  }
  float* sc = aligned64(buf.scores, total);
  float* qs = aligned64(buf.qs, R * H * D);
  const int64_t CH = std::max<int64_t>(16, 8192 / (W * 16)) / 16 * 16;  // keys a V chunk: ~32 KB of f32
  float* kv = aligned64(buf.kv, CH * W * 16);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < H * D; ++i) qs[r * H * D + i] = rows[r].q[i] * a.scale;
  auto ld = [&](int64_t r) { return rows[r].k1 - rows[r].k0 + 16; };
  auto srow = [&](int64_t r) { return sc + buf.off[r]; };
  for (int64_t c0 = K0; c0 < B; c0 += 16) {  // shared keys, 16 at a time, for every row they are in
    const int nk = static_cast<int>(std::min<int64_t>(16, B - c0));
    convert_keys<BF16>(a, 0, c0, nk, B, W, kv, true);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t lo = std::max(c0, rows[r].k0), hi = std::min(c0 + nk, rows[r].k1);
      if (lo >= hi) continue;
      const __mmask16 live = static_cast<__mmask16>(tail_mask(hi - c0) & ~tail_mask(lo - c0));
      chunk_scores<DV>(a, kv, nk, qs + r * H * D, srow(r) + (c0 - rows[r].k0), ld(r), live);
    }
  }
  for (int64_t r = 0; r < R; ++r) {  // each row's own keys from B on
    const AttnShape ar = row_shape(a, rows[r]);
    for (int64_t c0 = std::max(B, rows[r].k0); c0 < rows[r].k1; c0 += 16) {
      const int nk = static_cast<int>(std::min<int64_t>(16, rows[r].k1 - c0));
      convert_keys<BF16>(ar, 0, c0, nk, 0, W, kv, false);
      chunk_scores<DV>(a, kv, nk, qs + r * H * D, srow(r) + (c0 - rows[r].k0), ld(r), tail_mask(nk));
    }
  }
  for (int64_t r = 0; r < R; ++r) {  // probabilities in place
    const int64_t n = rows[r].k1 - rows[r].k0;
    for (int64_t h = 0; h < H; ++h) {
      float* s = srow(r) + h * ld(r);
      __m512 mx = _mm512_set1_ps(-INFINITY);
      for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = tail_mask(n - j);
        mx = _mm512_mask_max_ps(mx, k, mx, _mm512_maskz_loadu_ps(k, s + j));
      }
      rows[r].m[h] = _mm512_reduce_max_ps(mx);
      rows[r].l[h] = exp_in_place(s, n, rows[r].m[h]);
    }
  }
  buf.started.assign(R, 0);
  // p.V over keys [v0, v0 + nk) (converted in kv) for row r's part of them, every head
  auto values = [&](int64_t r, int64_t v0, int64_t nk) {
    const int64_t lo = std::max(v0, rows[r].k0), hi = std::min(v0 + nk, rows[r].k1);
    if (lo >= hi) return;
    const bool start = !buf.started[r];
    buf.started[r] = 1;
    const float* p = srow(r) + (lo - rows[r].k0);
    for (int64_t g = 0; g < a.kvh; ++g)
      for_value_tiles<DV>(G, [&](auto hb, auto cv, int64_t h0, int c0) {
        pv_tile<decltype(hb)::value, decltype(cv)::value>(kv + ((lo - v0) * W + g * DV + c0) * 16, W * 16, hi - lo,
                                                          p + (g * G + h0) * ld(r), ld(r),
                                                          rows[r].acc + (g * G + h0) * D + 16 * c0, D, start);
      });
  };
  for (int64_t v0 = K0; v0 < B; v0 += CH) {  // shared values, CH at a time
    const int64_t nk = std::min(CH, B - v0);
    convert_keys<BF16>(a, 1, v0, nk, B, W, kv, false);
    for (int64_t r = 0; r < R; ++r) values(r, v0, nk);
  }
  for (int64_t r = 0; r < R; ++r) {
    const AttnShape ar = row_shape(a, rows[r]);
    for (int64_t v0 = std::max(B, rows[r].k0); v0 < rows[r].k1; v0 += CH) {
      const int64_t nk = std::min(CH, rows[r].k1 - v0);
      convert_keys<BF16>(ar, 1, v0, nk, 0, W, kv, false);
      values(r, v0, nk);
    }
  }
}

using AttendRowsFn = void (*)(const AttnShape&, const RowJob*, int64_t, RowsScratch&);

inline AttendRowsFn pick_attend_rows(int64_t dv, bool bf16) {
  switch (dv) {
    case 2: return bf16 ? attend_rows<2, true> : attend_rows<2, false>;
    case 4: return bf16 ? attend_rows<4, true> : attend_rows<4, false>;
    case 5: return bf16 ? attend_rows<5, true> : attend_rows<5, false>;
    case 6: return bf16 ? attend_rows<6, true> : attend_rows<6, false>;
    case 8: return bf16 ? attend_rows<8, true> : attend_rows<8, false>;
    case 16: return bf16 ? attend_rows<16, true> : attend_rows<16, false>;
    default: return nullptr;
  }
}

thread_local RowsScratch rows_scratch;

}  // namespace
