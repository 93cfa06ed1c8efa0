// attention_prefill.h's flash attention without AMX, on attention_prefill_common.h's packs (K as A
// tiles, V^T, Q^T as B tiles), transposed walk (lanes = 16 query rows, the softmax down vectors) and
// roundings (q, k, v, p to bf16; f32 sums), its products on AVX512-BF16 vdpbf16ps instead of tiles:
// each product takes one bf16 pair broadcast (a key's two dims, a dim's two keys) against a vector of
// the 16 rows' pairs. Zen 4 has it without AMX; an AVX-512 CPU without it (Skylake-X, Ice Lake) keeps
// torch's f32 SDPA (avx512_bf16_usable() false: an f32-FMA flash kernel would gain there only what
// SDPA's own f32 GEMMs leave, and f32 K/V packs double the traffic).
#pragma once

#include <cstring>

#include "attention_prefill_common.h"

namespace {

bool avx512_bf16_usable() {  // CPUID.(7, 1):EAX[5], AVX512_BF16
  static const bool ok = [] {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (a < 1) return false;  // no subleaf 1
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    return ((a >> 5) & 1) != 0;
  }();
  return ok;
}

inline __m512bh pair_at(const uint16_t* p) {  // the bf16 pair at p, in every lane
  int32_t v;
  std::memcpy(&v, p, 4);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(v));
}

inline __m512 bf16_round(__m512 x) {  // x rounded to bf16 (nearest even), as f32
  const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// S^T of 16 keys against one head's 16 rows: kt, the keys' half of an A pack ([d / 32][16 keys][32
// dims]); qb, the head's Q^T ([d / 2 pairs][16 rows][2]) -> st [16 keys][16 rows]. 16 sums side by
// side: each waits only on its own previous product. PARTS > 1 (PRECISE_SCORES' layers): k = kt + klo
// and q = qb + qlo, each a bf16 high part and the bf16 rounding of the rest; q.k takes hi.hi + hi.lo +
// lo.hi (PARTS 3), ~16 mantissa bits instead of 8 (a k bias every key shares no longer moves the
// scores); PARTS 2 leaves out lo.hi, whose k low parts are zeros where the cache is bf16.
template <int PARTS>
inline void scores16(const uint16_t* kt, const uint16_t* klo, const uint16_t* qb, const uint16_t* qlo, int64_t d,
                     float* st) {
  __m512 acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d / 2; ++c) {
    const __m512bh qv = reinterpret_cast<__m512bh>(_mm512_load_si512(qb + 32 * c));
    const int64_t at = (c / 16) * 512 + 2 * (c % 16);  // key j's dims 2c, 2c + 1 at at + 32 j
    if constexpr (PARTS > 1) {
      const __m512bh ql = reinterpret_cast<__m512bh>(_mm512_load_si512(qlo + 32 * c));
      for (int j = 0; j < 16; ++j) {
        const __m512bh kh = pair_at(kt + at + 32 * j);
        acc[j] = _mm512_dpbf16_ps(acc[j], kh, qv);
        if constexpr (PARTS > 2) acc[j] = _mm512_dpbf16_ps(acc[j], pair_at(klo + at + 32 * j), qv);
        acc[j] = _mm512_dpbf16_ps(acc[j], kh, ql);
      }
    } else {
      for (int j = 0; j < 16; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], pair_at(kt + at + 32 * j), qv);
    }
  }
  for (int j = 0; j < 16; ++j) _mm512_store_ps(st + 16 * j, acc[j]);
}

// The low parts of an f16 cache's 32-key block kb's keys (key - bf16(key), rounded to bf16), in
// pack_kv_block's K layout at klo (keys at or past ctx: zeros). A bf16 cache's are zeros: none packed.
void pack_k_lo_block(const AttnShape& a, int64_t ctx, int64_t g, int64_t kb, uint16_t* klo) {
  const int64_t ksn = a.d / 32;
  for (int64_t j = 0; j < 32; ++j) {
    const int64_t key = 32 * kb + j;
    const uint8_t* kr = key < ctx ? slot_row(a, 0, g, key) : nullptr;
    for (int64_t ks = 0; ks < ksn; ++ks) {
      __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
      if (kr) {
        lo = load_half<false>(kr + 64 * ks), hi = load_half<false>(kr + 64 * ks + 32);
        lo = _mm512_sub_ps(lo, bf16_round(lo)), hi = _mm512_sub_ps(hi, bf16_round(hi));
      }
      _mm512_store_si512(klo + ((j / 16) * ksn + ks) * 512 + 32 * (j % 16), join(to_bf16(lo), to_bf16(hi)));
    }
  }
}

// O^T (oh: [d][16 rows] f32) += V^T . P^T over 32 keys: vt [d][16 key pairs][2] (the V^T pack), pt
// [16 key pairs][16 rows][2]. 16 dims' sums in registers at a time, each P^T vector used 16 times.
inline void values32(const uint16_t* vt, const uint16_t* pt, int64_t d, float* oh) {
  for (int64_t c0 = 0; c0 < d; c0 += 16) {
    __m512 acc[16];
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_load_ps(oh + 16 * (c0 + i));
    for (int r = 0; r < 16; ++r) {
      const __m512bh pv = reinterpret_cast<__m512bh>(_mm512_load_si512(pt + 32 * r));
      for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], pair_at(vt + (c0 + i) * 32 + 2 * r), pv);
    }
    for (int i = 0; i < 16; ++i) _mm512_store_ps(oh + 16 * (c0 + i), acc[i]);
  }
}

// prefill_task's rows, heads and arguments (no packed output: that layout feeds AMX tiles), on
// vdpbf16ps, with its softmax steps (SoftmaxStep).
// split: split scores (scores16's PARTS 2, or 3 with klo: the keys' low parts, pack_k_lo_block at
// p.at's blocks; null for a bf16 cache).
void prefill_task_avx512(const AttnShape& a, const PrefillPacks& p, bool split, const uint16_t* klo, const float* q,
                         int64_t ldq, int64_t rows, int64_t pos0, int64_t window, int64_t g, int64_t G, int64_t from, float* out,
                         int64_t ldo) {
  const int64_t d = a.d, ksn = d / 32;
  thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> qb_buf, ql_buf, pt_buf;
  ql_buf.resize(split ? G * ksn * 512 : 0);
  thread_local std::vector<float, AlignedAlloc<float>> o_buf, rows_buf, st_buf;
  qb_buf.resize(G * ksn * 512);
  o_buf.assign(G * d * 16, 0.0f);  // O^T per head: [d][16 rows]
  rows_buf.resize(16 * d);
  st_buf.resize(32 * 16);
  pt_buf.resize(512);
  uint16_t* qb = qb_buf.data();
  float* ot = o_buf.data();
  float* st = st_buf.data();  // [32 keys][16 rows]
  uint16_t (*pt)[32] = reinterpret_cast<uint16_t (*)[32]>(pt_buf.data());
  for (int64_t h = 0; h < G; ++h) {
    pack_q_head(a, q, ldq, rows, (g * G + h) * d, rows_buf.data(), qb + h * ksn * 512);
    if (!split) continue;
    for (int64_t i = 0; i < rows * d; i += 16) {  // the low parts, q * scale - bf16(q * scale)
      const __m512 x = _mm512_load_ps(rows_buf.data() + i);
      _mm512_store_ps(rows_buf.data() + i, _mm512_sub_ps(x, bf16_round(x)));
    }
    pack_rows16(rows_buf.data(), d, rows, d, ql_buf.data() + h * ksn * 512);
  }
  const RowSpan span(rows, pos0, window);
  __m512 m[16], l[16];
  for (int64_t h = 0; h < G; ++h) m[h] = _mm512_set1_ps(-INFINITY), l[h] = _mm512_setzero_ps();
  const int64_t last = pos0 + rows - 1, first_key = window > 0 ? std::max<int64_t>(0, pos0 - window + 1) : 0;
  for (int64_t kb = first_key / 32; kb <= last / 32; ++kb) {
    const uint16_t* kt = p.k.data() + p.at(g, kb);
    const uint16_t* vt = p.v.data() + p.at(g, kb);
    const uint16_t* kl = klo ? klo + p.at(g, kb) : nullptr;
    __mmask16 ok[32];
    span.key_masks(kb, ok);
    const bool second = 32 * kb + 16 <= last;  // keys 16-31 seen by some row
    for (int64_t h = 0; h < G; ++h) {
      const uint16_t* qh = qb + h * ksn * 512;
      const uint16_t* qlh = split ? ql_buf.data() + h * ksn * 512 : nullptr;
      for (int half = 0; half < (second ? 2 : 1); ++half) {  // keys 0-15, 16-31
        const int64_t at = half * ksn * 512;
        if (kl) scores16<3>(kt + at, kl + at, qh, qlh, d, st + 256 * half);
        else if (split) scores16<2>(kt + at, nullptr, qh, qlh, d, st + 256 * half);
        else scores16<1>(kt + at, nullptr, qh, nullptr, d, st + 256 * half);
      }
      const SoftmaxStep step(st, ok, second ? 32 : 16, a.softcap, m[h]);  // keys not scored: no row sees them
      float* oh = ot + h * d * 16;
      step.update(step.probs(st, ok, pt), oh, d, m[h], l[h]);  // O^T updated in memory every block
      values32(vt, pt[0], d, oh);
    }
  }
  for (int64_t h = 0; h < G; ++h) store_rows(ot + h * d * 16, d, l[h], from, rows, out, ldo, (g * G + h) * d);
}

}  // namespace
