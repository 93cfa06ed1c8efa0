// Attention straight over quantized KV blocks (fp8_e4m3, q8_0, q4_0, KVarN; hearth/kvstore/paged.py)
// and the f16 staging rows beside them, for rows of many sequences at once.
//
// A query at position p sees the blocks before its own as stored (encoded; KVarN's first block from
// its f16 sink copy when there is one) and its own block in f16 (the block being filled, or the block
// this step sealed, before encoding): the torch path's rule (hearth.kernels.attention._paged_quantized).
// Keys and values are decoded 16 tokens at a time into an L1 scratch of f32 rows (kv_decode.h: the
// torch decode's exact operations, so both paths see bit-identical K/V), then scored and summed like
// the f16 kernel (attention.h): tasks of (query row, kv head, key range), flash-decoding merge.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "kv_decode.h"
#include "kv_encode.h"
#include "simd.h"

namespace {

// x [16 DV] <- H x * norm, H the Sylvester-order Hadamard matrix (kvarn.hadamard(16 DV) = H / sqrt(16 DV)):
// butterflies between vectors, then inside each vector (lane i pairs with lane i ^ s)
template <int DV>
void hadamard_rows(float* x, float norm) {
  __m512 v[DV];
  for (int c = 0; c < DV; ++c) v[c] = _mm512_loadu_ps(x + 16 * c);
  for (int s = 1; s < DV; s *= 2)
    for (int c = 0; c < DV; ++c)
      if (!(c & s) && c + s < DV) {  // (DV is a power of two where this runs)
        const __m512 a = v[c], b = v[c + s];
        v[c] = _mm512_add_ps(a, b);
        v[c + s] = _mm512_sub_ps(a, b);
      }
  const __m512i pair[4] = {_mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14),
                           _mm512_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13),
                           _mm512_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11),
                           _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)};
  const __mmask16 upper[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
  for (int c = 0; c < DV; ++c) {
    for (int i = 0; i < 4; ++i) {  // lower lane: x + partner; upper lane: partner - x
      const __m512 p = _mm512_permutexvar_ps(pair[i], v[c]);
      v[c] = _mm512_mask_sub_ps(_mm512_add_ps(v[c], p), upper[i], p, v[c]);
    }
    _mm512_storeu_ps(x + 16 * c, _mm512_mul_ps(v[c], _mm512_set1_ps(norm)));
  }
}

// One layer's cache as the kernel sees it
struct KvqCache {
  KvqLayout L;
  Fields k, v;  // encoded blocks
  DecodeRows dk, dv, dh;  // decoders of K, V and f16 rows
  const uint8_t* staging;  // f16 [2, slots, bs, kvh, d]
  const uint8_t* fresh;  // f16 [2, m, bs, kvh, d]: the blocks sealed this step, before encoding
  int64_t staging_plane, fresh_plane;  // bytes from K to V
  float scale, softcap;
  bool rotate;  // K/V stored rotated (KVarN): queries are rotated here, outputs rotated back after
};

struct KvqSeq {
  const int64_t* table;  // block ids
  int64_t sink;  // staging slot of the first block's f16 copy, or -1
  int64_t first;  // block of the first new token
  const int64_t* fresh;  // [j - first]: f16 block of queries in block j (slot >= 0, or -1 - index into fresh)
};

struct BlockRows {
  DecodeRows fn;
  Fields f;
  int64_t b;
};

// Where block j's K (plane 0) or V (plane 1) rows come from, for a query whose own block is `own`
inline BlockRows block_rows(const KvqCache& a, const KvqSeq& s, int64_t j, int64_t own, int plane) {
  const int64_t ref = j == own ? s.fresh[j - s.first] : (j == 0 ? s.sink : -1);
  if (j != own && ref < 0) return {plane ? a.dv : a.dk, plane ? a.v : a.k, s.table[j]};
  const int64_t blk = a.L.bs * a.L.kvh * a.L.d * 2;
  const uint8_t* p = ref >= 0 ? a.staging + plane * a.staging_plane + ref * blk
                              : a.fresh + plane * a.fresh_plane + (-1 - ref) * blk;
  return {a.dh, {{p, nullptr, nullptr, nullptr}}, 0};
}

// Scores of HB <= 4 heads (qs: [HB][16 DV], pre-scaled) against r <= 16 decoded key rows, into
// s[h * ld + j], softcapped. Register tiles of HB heads x 4 keys share each load (2 loads per 2 FMAs
// would bound a per-head loop); one transpose-add tree (sum16) sums 16 of them across lanes at once.
template <int DV, int HB>
void score_heads(const float* qs, const float* rows, int r, float softcap, float* s, int64_t ld) {
  for (int j0 = 0; j0 < r; j0 += 4) {
    __m512 t[16];
    for (int i = 0; i < 16; ++i) t[i] = _mm512_setzero_ps();
    for (int c = 0; c < DV; ++c) {
      __m512 k[4];
      for (int j = 0; j < 4; ++j) k[j] = _mm512_load_ps(rows + ((j0 + j) * DV + c) * 16);
      for (int h = 0; h < HB; ++h) {
        const __m512 qv = _mm512_loadu_ps(qs + h * 16 * DV + 16 * c);
        for (int j = 0; j < 4; ++j) t[h * 4 + j] = _mm512_fmadd_ps(qv, k[j], t[h * 4 + j]);
      }
    }
    __m512 v = sum16(t);  // lane 4h + j: head h, key j0 + j
    if (softcap > 0.0f) v = softcap_ps(v, softcap);
    alignas(64) float x[16];
    _mm512_store_ps(x, v);
    for (int h = 0; h < HB; ++h)
      for (int j = 0; j < 4 && j0 + j < r; ++j) s[h * ld + j0 + j] = x[4 * h + j];
  }
}

template <int DV>
void score_rows(const float* qs, int64_t G, const float* rows, int r, float softcap, float* s, int64_t ld) {
  for (int64_t h0 = 0; h0 < G; h0 += 4) {
    const float* q = qs + h0 * 16 * DV;
    float* o = s + h0 * ld;
    switch (std::min<int64_t>(4, G - h0)) {
      case 1: score_heads<DV, 1>(q, rows, r, softcap, o, ld); break;
      case 2: score_heads<DV, 2>(q, rows, r, softcap, o, ld); break;
      case 3: score_heads<DV, 3>(q, rows, r, softcap, o, ld); break;
      default: score_heads<DV, 4>(q, rows, r, softcap, o, ld);
    }
  }
}

// acc[h][16 c0 .. 16 (c0 + CV)) += sum_t p[h][t] rows[t] for HB heads from h0: the tile stays in registers
template <int HB, int CV, int DV>
void pv_tile(const float* rows, int r, const float* p, int64_t ld, int64_t h0, int c0, float* acc) {
  __m512 o[HB][CV];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) o[h][c] = _mm512_loadu_ps(acc + (h0 + h) * 16 * DV + 16 * (c0 + c));
  for (int t = 0; t < r; ++t) {
    __m512 vf[CV];
    for (int c = 0; c < CV; ++c) vf[c] = _mm512_load_ps(rows + (t * DV + c0 + c) * 16);
    for (int h = 0; h < HB; ++h) {
      const __m512 w = _mm512_set1_ps(p[(h0 + h) * ld + t]);
      for (int c = 0; c < CV; ++c) o[h][c] = _mm512_fmadd_ps(w, vf[c], o[h][c]);
    }
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) _mm512_storeu_ps(acc + (h0 + h) * 16 * DV + 16 * (c0 + c), o[h][c]);
}

template <int DV>
void pv_rows(const float* rows, int r, const float* p, int64_t ld, int64_t G, float* acc) {
  for_value_tiles<DV>(G, [&](auto hb, auto cv, int64_t h0, int c0) {
    pv_tile<decltype(hb)::value, decltype(cv)::value, DV>(rows, r, p, ld, h0, c0, acc);
  });
}

// One task: heads of kv head g (q: [G][16 DV] f32) of a query in block `own`, over keys [k0, k1).
// Leaves per head the max m, the sum l of exp(s - m) and acc = sum exp(s - m) v (unnormalized).
template <int DV>
void attend_kvq(const KvqCache& a, const KvqSeq& s, const float* q, int64_t g, int64_t G, int64_t own, int64_t k0,
                int64_t k1, float* m, float* l, float* acc, std::vector<float>& scores) {
  constexpr int64_t D = 16 * DV;
  const int64_t n = k1 - k0, bs = a.L.bs, ld = n + 16;
  if (static_cast<int64_t>(scores.size()) < G * ld) scores.resize(G * ld);
  float* sc = scores.data();
  float qs[16 * D];
  for (int64_t i = 0; i < G * D; ++i) qs[i] = q[i] * a.scale;
  if (a.rotate)
    for (int64_t h = 0; h < G; ++h) hadamard_rows<DV>(qs + h * D, 1.0f / std::sqrt(static_cast<float>(D)));
  alignas(64) float rows[16 * D];  // decoded K or V rows of up to 16 tokens
  auto each_rows = [&](int plane, const auto& use) {  // use(r, offset) for every 16 decoded rows of keys [k0, k1)
    for (int64_t key = k0; key < k1;) {
      const int64_t j = key / bs, run = std::min(k1, (j + 1) * bs) - key;
      const BlockRows src = block_rows(a, s, j, own, plane);
      for (int64_t t0 = 0; t0 < run; t0 += 16) {
        const int r = static_cast<int>(std::min<int64_t>(16, run - t0));
        src.fn(src.f, a.L, src.b, g, key % bs + t0, r, rows);
        use(r, key - k0 + t0);
      }
      key += run;
    }
  };
  each_rows(0, [&](int r, int64_t off) {
    std::fill(rows + r * D, rows + (r + 3) / 4 * 4 * D, 0.0f);  // score tiles are 4 keys: no stale (denormal) rows
    score_rows<DV>(qs, G, rows, r, a.softcap, sc + off, ld);
  });
  for (int64_t h = 0; h < G; ++h) {  // probabilities in place
    float* sh = sc + h * ld;
    __m512 vmx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16)
      vmx = _mm512_mask_max_ps(vmx, tail_mask(n - j), vmx, _mm512_maskz_loadu_ps(tail_mask(n - j), sh + j));
    m[h] = _mm512_reduce_max_ps(vmx);
    l[h] = exp_in_place(sh, n, m[h]);
  }
  std::fill(acc, acc + G * D, 0.0f);
  each_rows(1, [&](int r, int64_t off) { pv_rows<DV>(rows, r, sc + off, ld, G, acc); });
}

using AttendKvq = void (*)(const KvqCache&, const KvqSeq&, const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                           float*, float*, float*, std::vector<float>&);
using RotateFn = void (*)(float*, float);

// The kernel and decoders for head_dim 16 DV; false when a format does not take this head_dim
template <int DV>
bool pick_kvq_dv(int kfmt, int vfmt, KvqCache& a, AttendKvq& fn, RotateFn& rot) {
  a.dk = pick_decoder<DV>(kfmt);
  a.dv = pick_decoder<DV>(vfmt);
  a.dh = pick_decoder<DV>(KVQ_F16);
  fn = attend_kvq<DV>;
  rot = hadamard_rows<DV>;
  return a.dk && a.dv && (!a.rotate || !(DV & (DV - 1)));
}

bool pick_kvq(int64_t dv, int kfmt, int vfmt, KvqCache& a, AttendKvq& fn, RotateFn& rot) {
  switch (dv) {
    case 2: return pick_kvq_dv<2>(kfmt, vfmt, a, fn, rot);
    case 4: return pick_kvq_dv<4>(kfmt, vfmt, a, fn, rot);
    case 5: return pick_kvq_dv<5>(kfmt, vfmt, a, fn, rot);
    case 6: return pick_kvq_dv<6>(kfmt, vfmt, a, fn, rot);
    case 8: return pick_kvq_dv<8>(kfmt, vfmt, a, fn, rot);
    case 16: return pick_kvq_dv<16>(kfmt, vfmt, a, fn, rot);
    case 32: return pick_kvq_dv<32>(kfmt, vfmt, a, fn, rot);  // gemma4's global layers (512), as attention.h
    default: return false;
  }
}

}  // namespace

extern "C" {

// Attention of S sequences' query rows over one layer's quantized KV cache, into out; -1 (out untouched)
// for a head_dim, grouping or format the kernel does not cover.
// q, out: f32 [rows, heads, d], heads and dims contiguous, row strides ldq, ldo; with `rotate` (K/V
// stored rotated by kvarn.hadamard(d)) q is rotated into the cache's space and out back from it.
// kfmt / vfmt: KvqFormat of the encoded K / V; fields: their fields' addresses (each [num_blocks, ...], the
// codec's order), K's 4 then V's 4.
// staging: f16 [2, slots, bs, kvh, d]; fresh: f16 [2, m, bs, kvh, d], the blocks sealed this step before encoding.
// Sequence s: rows q_start[s] .. + q_len[s] end its seq_lens[s] tokens; block ids tables[s * ldt ..];
// sink[s]: staging slot of its first block's f16 copy or -1; fresh_refs[s * ldf + j - first]: the f16
// block that its queries in block j see of their own block (first: the block of its first new token):
// a staging slot >= 0, or -1 - k for block k of fresh.
int hk_kvq_attention(const float* q, int64_t ldq, int kfmt, int vfmt, const int64_t* fields,
                     const void* staging, int64_t slots, const void* fresh, int64_t m, int64_t bs, int64_t heads,
                     int64_t kvh, int64_t d, int64_t S, const int64_t* q_start, const int64_t* q_len,
                     const int64_t* seq_lens, const int64_t* tables, int64_t ldt, const int64_t* sink,
                     const int64_t* fresh_refs, int64_t ldf, int rotate, float scale, int64_t window, float softcap,
                     float* out, int64_t ldo) {
  const int64_t G = heads / kvh;
  if (d % 16 || heads % kvh || G > 16) return -1;
  KvqCache a{};
  a.L = {bs, kvh, d};
  for (int i = 0; i < 4; ++i) {
    a.k.f[i] = reinterpret_cast<const uint8_t*>(fields[i]);
    a.v.f[i] = reinterpret_cast<const uint8_t*>(fields[4 + i]);
  }
  a.staging = static_cast<const uint8_t*>(staging);
  a.fresh = static_cast<const uint8_t*>(fresh);
  a.staging_plane = slots * bs * kvh * d * 2;
  a.fresh_plane = m * bs * kvh * d * 2;
  a.scale = scale;
  a.softcap = softcap;
  a.rotate = rotate != 0;
  AttendKvq fn = nullptr;
  RotateFn rot = nullptr;
  if (!pick_kvq(d / 16, kfmt, vfmt, a, fn, rot)) return -1;
  run_attention(S, q_start, q_len, seq_lens, kvh, G, d, window, out, ldo,
                [&](const AttnTask& k, float* mx, float* l, float* acc) {
                  const int64_t pos = seq_lens[k.seq] - (q_start[k.seq] + q_len[k.seq] - k.row);
                  const KvqSeq s{tables + k.seq * ldt, sink[k.seq], (seq_lens[k.seq] - q_len[k.seq]) / bs,
                                 fresh_refs + k.seq * ldf};
                  fn(a, s, q + k.row * ldq + k.g * G * d, k.g, G, pos / bs, k.k0, k.k1, mx, l, acc, attn_scores);
                });
  if (a.rotate)  // the hadamard matrix is symmetric: out @ rot = rot @ out
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = q_start[s]; t < q_start[s] + q_len[s]; ++t)
        for (int64_t h = 0; h < heads; ++h) rot(out + t * ldo + h * d, 1.0f / std::sqrt(static_cast<float>(d)));
  return 0;
}

// T rows (row stride ldx) of width f32 values, each width / d vectors of d -> out [T, width] (row
// stride ldo; out may be x): every vector times kvarn.hadamard(d) (x @ H / sqrt(d), H symmetric), d a
// power of two from 32 to 512.
int hk_hadamard(const float* x, int64_t ldx, int64_t T, int64_t width, int64_t d, float* out, int64_t ldo) {
  KvqCache a{};
  a.rotate = true;
  AttendKvq fn = nullptr;
  RotateFn rot = nullptr;
  if (width % d || !pick_kvq(d / 16, KVQ_F16, KVQ_F16, a, fn, rot)) return -1;
  const float norm = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * ldo;
    if (o != x + t * ldx) std::copy(x + t * ldx, x + t * ldx + width, o);
    for (int64_t c = 0; c < width; c += d) rot(o + c, norm);
  }
  return 0;
}

}  // extern "C"
