// The GGUF block formats (gguf_formats.h) unpacked with AVX2 for the avx2 tier: per 256-weight
// superblock 16 scales and offsets (one per 16 weights, as two 8-lane vectors), per 32 weights their
// codes in natural order; the 8-bit activations; and built on them the GEMV's per-row dot product
// (gemv_avx2.h, included inside this file's namespace) and dequantization (bit-exact with gguf-py).
// Included once, by gguf_kernels_avx2.cpp, compiled with -mavx2 -mfma -mf16c -mbmi2.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gguf_formats.h"
#include "simd_avx2.h"

namespace {

inline __m256i low4() { return _mm256_set1_epi8(0x0F); }

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i nibbles32(const uint8_t* qs) {  // 16 bytes -> 32 codes: low nibbles, then high
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), low4());
}

inline __m256i bits32(uint32_t h) {  // byte l = 0xFF where bit l of h is set
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// bit j of each byte of v, moved to bit `to` (j < 8, to < 8): bits from the neighbouring byte that a
// 16-bit shift brings in are masked off
inline __m256i bit_of_bytes(__m256i v, int j, int to) {
  const __m256i b = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_sll_epi16(b, _mm_cvtsi32_si128(to));
}

inline __m256i field2(const uint8_t* qs, int j) {  // the 2-bit field (j % 4) of qs[32 (j / 4) + l], l < 32
  const __m256i x = _mm256_srl_epi16(load256(qs + 32 * (j >> 2)), _mm_cvtsi32_si128(2 * (j & 3)));
  return _mm256_and_si256(x, _mm256_set1_epi8(3));
}

// dot_row's lane order: a superblock's 16 group sums come out of its hadd tree as two vectors of
// groups 0, 2, 4, 6, 1, 3, 5, 7 and the same + 8; v (8 consecutive groups' values) -> that order
inline __m256 to_lanes(__m256 v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)); }

// per-32-weight values v (8 of them) -> the lane order's two vectors: groups 2i and 2i + 1 share v[i],
// so vector 0 is v[0..3] twice, vector 1 v[4..7] twice
inline void pairs_to_lanes(__m256 v, __m256* out) {
  out[0] = _mm256_permute2f128_ps(v, v, 0x00), out[1] = _mm256_permute2f128_ps(v, v, 0x11);
}

inline __m256 dup2_lo(__m256 v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3)); }
inline __m256 dup2_hi(__m256 v) { return _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7)); }

inline __m256 bytes8_ps(uint64_t b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(b)))); }

// ---- 32-wide block types: a superblock is 8 consecutive blocks, chunk j is block 8 sb + j ----
// The last superblock of a row may be short: scales() returns how many chunks it has.
template <class F>
struct B32 {
  static constexpr bool SIGNED = F::LEVELS == 256;  // Q8_0: int8 codes, read signed
  static constexpr int QMAX = SIGNED ? 128 : F::LEVELS - 1;  // largest |code| codes() gives (gemm_avx2.h's int16 sums)
  static constexpr int C = SIGNED ? 0 : F::C, TS = F::TS;
  static constexpr bool sym = F::sym;
  static int scales(const uint8_t* row, int64_t sb, int64_t nb, __m256* s, __m256* o) {
    const int64_t b0 = sb * 8;
    const int n = static_cast<int>(std::min<int64_t>(8, nb - b0));
    const uint8_t* b = row + b0 * TS;
    // f16 d (and m) of each block: scalar loads (gathers are microcoded on CPUs with the GDS fix)
    auto half = [&](int i, int at) { return i < n ? static_cast<short>(u32(b + i * TS) >> at) : short{0}; };
    const __m256 d8 = _mm256_cvtph_ps(_mm_setr_epi16(half(0, 0), half(1, 0), half(2, 0), half(3, 0), half(4, 0),
                                                     half(5, 0), half(6, 0), half(7, 0)));
    s[0] = dup2_lo(d8), s[1] = dup2_hi(d8);
    if (sym) {
      const __m256 c = _mm256_set1_ps(-static_cast<float>(C));
      o[0] = _mm256_mul_ps(s[0], c), o[1] = _mm256_mul_ps(s[1], c);
    } else {
      const __m256 m8 = _mm256_cvtph_ps(_mm_setr_epi16(half(0, 16), half(1, 16), half(2, 16), half(3, 16),
                                                       half(4, 16), half(5, 16), half(6, 16), half(7, 16)));
      o[0] = dup2_lo(m8), o[1] = dup2_hi(m8);
    }
    return n;
  }
  static constexpr bool WORDS = false;  // dot_row takes lanes(), not words()
  static constexpr int OFFSETS = 32;  // lanes(): one offset per 32 weights
  static int lanes(const uint8_t* row, int64_t sb, int64_t nb, __m256* s, __m256* o) {  // dot_row's order
    const int64_t b0 = sb * 8;
    const int n = static_cast<int>(std::min<int64_t>(8, nb - b0));
    const uint8_t* b = row + b0 * TS;
    // each block's first 4 bytes (f16 d, and m where the type has it) as dwords, their halves split
    // by a byte shuffle: 16-bit scalar inserts (scales()) spilled at 2 x 2 rows (Q4_1, 1.18x the time)
    auto head = [&](int i) { return i < n ? static_cast<int>(u32(b + i * TS)) : 0; };
    const __m128i split = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    const __m128i h0 = _mm_shuffle_epi8(_mm_setr_epi32(head(0), head(1), head(2), head(3)), split);
    const __m128i h1 = _mm_shuffle_epi8(_mm_setr_epi32(head(4), head(5), head(6), head(7)), split);
    const __m256 d8 = _mm256_cvtph_ps(_mm_unpacklo_epi64(h0, h1));
    pairs_to_lanes(d8, s);
    if (sym)
      o[0] = _mm256_mul_ps(d8, _mm256_set1_ps(-static_cast<float>(C)));
    else
      o[0] = _mm256_cvtph_ps(_mm_unpackhi_epi64(h0, h1));
    return n;
  }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + (sb * 8 + j) * TS;
    if constexpr (SIGNED) {
      return load256(b + F::QS);
    } else if constexpr (F::QH >= 0) {
      return _mm256_or_si256(nibbles32(b + F::QS), _mm256_and_si256(bits32(u32(b + F::QH)), _mm256_set1_epi8(0x10)));
    } else {
      return nibbles32(b + F::QS);
    }
  }
};

// ---- k-quants: one block per superblock (layouts: gguf_formats.h) ----

inline int k4_scales(const uint8_t* b, __m256* s, __m256* o) {  // Q4_K/Q5_K: one scale and min per 32
  uint64_t sc, mn;
  k4_scale_bytes(b, sc, mn);
  const __m256 s8 = _mm256_mul_ps(_mm256_set1_ps(f16(b)), bytes8_ps(sc));
  const __m256 o8 = _mm256_mul_ps(_mm256_set1_ps(-f16(b + 2)), bytes8_ps(mn));
  s[0] = dup2_lo(s8), s[1] = dup2_hi(s8), o[0] = dup2_lo(o8), o[1] = dup2_hi(o8);
  return 8;
}

// Q4_K/Q5_K's scales and mins as dot_row's words_dot takes them: per half h the int16 words sc[4h + 0, 0,
// 1, 1, 2, 2, 3, 3] in both 128-bit lanes (groups 2j, 2j + 1 share block j's scale), d the superblock's,
// and the offsets -dmin x mn[0..7] (one per 32 weights, in order). The 16-byte head (d, dmin, the 12
// scale bytes q) in both lanes is unpacked as k4_scale_bytes does by one byte shuffle to P = q[4..11],
// q[0..3], q[8..11]: mn[i] = q[4 + i] & 63, mn[4 + i] = q[8 + i] >> 4, sc[i] = q[i] & 63, sc[4 + i] =
// q[8 + i] & 15 (one variable shift, one mask), and the high 2 bits of mn[4 + i], sc[4 + i] (bits 6-7
// of q[4 + i], q[i]: P's bytes 0-3, 8-11) by P's qwords << 30 and one mask: 6 vector uops a row and
// superblock where k4_scale_bytes took ~20 in general registers plus 2 moves (the loop is bound by its
// uops: ~180 per pass of 2 rows, 6 a cycle). Zen 4, one thread: Q4_K matrices 0.92-0.94x the time from
// L3, 0.95-0.97x from DRAM (docs/performance.md, twelfth session)
inline int k4_words(const uint8_t* b, __m256i* w, __m256* d, __m256* o) {
  const char Z = -128;  // pshufb: a zero byte
  const __m256i H = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m256i P = _mm256_shuffle_epi8(H, _mm256_setr_epi8(8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15,  //
                                                            8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15));
  const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(P, _mm256_setr_epi32(0, 4, 0, 0, 0, 4, 0, 0)),
                                      _mm256_setr_epi32(0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F, 0x3F3F3F3F,
                                                        0x0F0F0F0F, 0x3F3F3F3F, 0x0F0F0F0F));
  // bytes 0-7: mn[0..7], 8-15: sc[0..7], in both lanes
  const __m256i v = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi64(P, 30), _mm256_set1_epi8(0x30)));
  w[0] = _mm256_shuffle_epi8(v, _mm256_setr_epi8(8, Z, 8, Z, 9, Z, 9, Z, 10, Z, 10, Z, 11, Z, 11, Z,  //
                                                 8, Z, 8, Z, 9, Z, 9, Z, 10, Z, 10, Z, 11, Z, 11, Z));
  w[1] = _mm256_shuffle_epi8(v, _mm256_setr_epi8(12, Z, 12, Z, 13, Z, 13, Z, 14, Z, 14, Z, 15, Z, 15, Z,  //
                                                 12, Z, 12, Z, 13, Z, 13, Z, 14, Z, 14, Z, 15, Z, 15, Z));
  const __m128 dm = _mm_cvtph_ps(_mm256_castsi256_si128(H));  // d, dmin: one convert
  *d = _mm256_broadcastss_ps(dm);
  *o = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(_mm_xor_ps(dm, _mm_set1_ps(-0.0f)))),
                     _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm256_castsi256_si128(v))));
  return 8;
}

// The same with the 12 scale bytes unpacked in general registers (k4_scale_bytes): where 2 activation
// rows share the pass (words_dot's MT > 1) the vector unpacking's registers spill (1.02-1.03x the time)
inline int k4_words_gpr(const uint8_t* b, __m256i* w, __m256* d, __m256* o) {
  uint64_t sc, mn;
  k4_scale_bytes(b, sc, mn);
  const char Z = -128;  // pshufb: a zero byte
  const __m256i v = _mm256_set1_epi64x(static_cast<int64_t>(sc));
  w[0] = _mm256_shuffle_epi8(v, _mm256_setr_epi8(0, Z, 0, Z, 1, Z, 1, Z, 2, Z, 2, Z, 3, Z, 3, Z,  //
                                                 0, Z, 0, Z, 1, Z, 1, Z, 2, Z, 2, Z, 3, Z, 3, Z));
  w[1] = _mm256_shuffle_epi8(v, _mm256_setr_epi8(4, Z, 4, Z, 5, Z, 5, Z, 6, Z, 6, Z, 7, Z, 7, Z,  //
                                                 4, Z, 4, Z, 5, Z, 5, Z, 6, Z, 6, Z, 7, Z, 7, Z));
  const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(u32(b))));  // d, dmin: one convert
  *d = _mm256_broadcastss_ps(dm);
  *o = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(_mm_xor_ps(dm, _mm_set1_ps(-0.0f)))), bytes8_ps(mn));
  return 8;
}

struct KQuant {  // unsigned codes (Q8_0's are the signed ones)
  static constexpr bool SIGNED = false;
};

// Q4_K/Q5_K: scales and mins per 32 weights, to words_dot as int16 words; the codes are each type's
template <class F>
struct K45 : KQuant, F {
  static constexpr bool WORDS = true;
  static constexpr int QMAX = F::LEVELS - 1;
  static constexpr int OFFSETS = 32;  // words(): one offset (min) per 32 weights
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) {
    return k4_scales(row + sb * F::TS, s, o);
  }
  template <bool VEC>  // words_dot's choice: vector registers at one activation row, else general ones
  static int words(const uint8_t* row, int64_t sb, int64_t, __m256i* w, __m256* d, __m256* o) {
    return VEC ? k4_words(row + sb * F::TS, w, d, o) : k4_words_gpr(row + sb * F::TS, w, d, o);
  }
};

struct K4 : K45<FQ4_K> {
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const __m256i x = load256(row + sb * TS + QS + 32 * (j >> 1));
    return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(x, 4) : x, low4());
  }
};

struct K5 : K45<FQ5_K> {
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    const __m256i x = load256(b + QS + 32 * (j >> 1));
    const __m256i lo = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(x, 4) : x, low4());
    return _mm256_or_si256(lo, bit_of_bytes(load256(b + QH), j, 4));
  }
};

struct K6 : KQuant, FQ6_K {
  static constexpr bool WORDS = true;
  static constexpr int OFFSETS = 0;  // words(): none, code - C (32) is taken in the integer sums (Act::z8)
  static constexpr int QMAX = 63;
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) {
    const uint8_t* b = row + sb * TS;
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + SC));
    const __m256 d = _mm256_set1_ps(f16(b + D)), c = _mm256_set1_ps(-32.0f);
    s[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
    s[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
    o[0] = _mm256_mul_ps(s[0], c), o[1] = _mm256_mul_ps(s[1], c);
    return 8;
  }
  // the 16 int8 scales as int16 words in the order of dot_row's last int16 sums (words_dot): half h's
  // vector sc[8h + 0, 0, 2, 2, 4, 4, 6, 6 | 1, 1, 3, 3, 5, 5, 7, 7]; d the superblock's f16 scale
  template <bool VEC>  // the same either way
  static int words(const uint8_t* row, int64_t sb, int64_t, __m256i* w, __m256* d, __m256*) {
    const uint8_t* b = row + sb * TS;
    // each scale byte to a word's high byte, then an arithmetic shift (vpmovsxbw: 2 uops on Zen)
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + SC)));
    const char Z = -128;  // pshufb: a zero byte
    w[0] = _mm256_srai_epi16(_mm256_shuffle_epi8(sc, _mm256_setr_epi8(Z, 0, Z, 0, Z, 2, Z, 2, Z, 4, Z, 4, Z, 6, Z, 6,  //
                                                                      Z, 1, Z, 1, Z, 3, Z, 3, Z, 5, Z, 5, Z, 7, Z, 7)),
                             8);
    w[1] = _mm256_srai_epi16(_mm256_shuffle_epi8(sc, _mm256_setr_epi8(Z, 8, Z, 8, Z, 10, Z, 10, Z, 12, Z, 12, Z, 14, Z, 14,  //
                                                                      Z, 9, Z, 9, Z, 11, Z, 11, Z, 13, Z, 13, Z, 15, Z, 15)),
                             8);
    *d = _mm256_set1_ps(f16(b + D));
    return 8;
  }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    const int h = j >> 2, sub = j & 3;
    __m256i ql = load256(b + QL + 64 * h + 32 * (sub & 1));
    if (sub >> 1) ql = _mm256_srli_epi16(ql, 4);
    // bits 2 sub, 2 sub + 1 of qh's bytes to bits 4-5: masked first, then one shift (none for sub 2)
    const __m256i qh = _mm256_and_si256(load256(b + QH + 32 * h), _mm256_set1_epi8(static_cast<char>(3 << (2 * sub))));
    const __m256i hi = sub < 2 ? _mm256_slli_epi16(qh, 4 - 2 * sub) : sub > 2 ? _mm256_srli_epi16(qh, 2) : qh;
    return _mm256_or_si256(_mm256_and_si256(ql, low4()), hi);
  }
};

// Q2_K/Q3_K: a scale and an offset per 16 weights (T::scales), to lanes_dot in the lane order by
// permutes (no shorter way for them)
template <class T>
struct ByPermute : KQuant {
  static constexpr bool WORDS = false;
  static constexpr int OFFSETS = 16;  // lanes(): one offset per 16 weights, in lane order
  static int lanes(const uint8_t* row, int64_t sb, int64_t nb, __m256* s, __m256* o) {
    const int n = T::scales(row, sb, nb, s, o);
    for (int h = 0; h < 2; ++h) s[h] = to_lanes(s[h]), o[h] = to_lanes(o[h]);
    return n;
  }
};

struct K2 : ByPermute<K2>, FQ2_K {
  static constexpr int QMAX = 3;
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) {
    const uint8_t* b = row + sb * TS;
    uint64_t lo8, hi8;
    std::memcpy(&lo8, b, 8), std::memcpy(&hi8, b + 8, 8);
    const uint64_t m4 = 0x0F0F0F0F0F0F0F0Full;
    const __m256 d = _mm256_set1_ps(f16(b + D)), dmin = _mm256_set1_ps(-f16(b + D + 2));
    s[0] = _mm256_mul_ps(d, bytes8_ps(lo8 & m4)), s[1] = _mm256_mul_ps(d, bytes8_ps(hi8 & m4));
    o[0] = _mm256_mul_ps(dmin, bytes8_ps((lo8 >> 4) & m4)), o[1] = _mm256_mul_ps(dmin, bytes8_ps((hi8 >> 4) & m4));
    return 8;
  }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) { return field2(row + sb * TS + QS, j); }
};

struct K3 : ByPermute<K3>, FQ3_K {
  static constexpr int QMAX = 7;
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) {
    const uint8_t* b = row + sb * TS;
    alignas(32) float sc[16];
    q3k_scales(b + SC, sc);
    const __m256 d = _mm256_set1_ps(f16(b + D)), c = _mm256_set1_ps(-4.0f);
    s[0] = _mm256_mul_ps(d, _mm256_load_ps(sc)), s[1] = _mm256_mul_ps(d, _mm256_load_ps(sc + 8));
    o[0] = _mm256_mul_ps(s[0], c), o[1] = _mm256_mul_ps(s[1], c);
    return 8;
  }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    return _mm256_or_si256(field2(b + QS, j), bit_of_bytes(load256(b + HM), j, 2));
  }
};

#include "codebooks_avx2.h"  // IQ4_NL, IQ4_XS, MXFP4: codes through a 16-value codebook

// ---- activations: each row padded with zeros to Kp = K rounded up to 256 (AVX-512's natural layout) ----

struct Act {
  int64_t M = 0, K = 0, Kp = 0;
  int8_t* q = nullptr;  // [M][Kp]
  float* d16 = nullptr;  // [M][Kp/16]: the scale of each 16 codes
  float* a16 = nullptr;  // [M][Kp/16]: d * (sum of those 16 codes)
  float* d16l = nullptr;  // [M][Kp/16]: d16 and a16 in dot_row's lane order (to_lanes), per superblock
  float* a16l = nullptr;
  float* a32 = nullptr;  // [M][Kp/32]: a16 of each 32 codes' halves added, for offsets per 32 (T::OFFSETS)
  int16_t* z8 = nullptr;  // [M][Kp/8]: 32 x the sum of each 8 codes, in words_dot's order (Q6_K's code - 32)
};

thread_local std::vector<uint8_t> act_buf;

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline int hsum8i(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

// rows of x -> q8 with a scale per 16 values (ggml's quantize_row_q8_0 rule, d = max|x| / 127 and
// q = round-to-even(x / d), on halves of its 32-blocks: less rounding, and dot_row applies d16 per 16
// anyway): the same bytes as the AVX-512 GEMV's quantize(..., scale16) in its natural layout
Act quantize(const float* x, int64_t M, int64_t K, int64_t ldx) {
  Act a;
  a.M = M, a.K = K, a.Kp = (K + SB - 1) / SB * SB;
  const int64_t g = a.Kp / 16;
  const size_t need = static_cast<size_t>(M) * (a.Kp + 5 * g * sizeof(float) + a.Kp / 8 * sizeof(int16_t)) + 64;
  if (act_buf.size() < need) act_buf.resize(need);
  a.d16 = reinterpret_cast<float*>(act_buf.data());
  a.a16 = a.d16 + M * g;
  a.d16l = a.a16 + M * g;
  a.a16l = a.d16l + M * g;
  a.a32 = a.a16l + M * g;  // M * g / 2 floats, the rest of its M * g unused
  a.q = reinterpret_cast<int8_t*>(a.a32 + M * g);
  a.z8 = reinterpret_cast<int16_t*>(a.q + M * a.Kp);
  std::memset(act_buf.data(), 0, need);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    for (int64_t b = 0; b < K / 32; ++b) {
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xr + 32 * b + 8 * i);
      float d[2];
      __m256i iq[4];
      for (int h = 0; h < 2; ++h) {  // half h: values 16h .. 16h + 15 of the block, v[2h], v[2h + 1]
        const float amax = hmax8(_mm256_max_ps(_mm256_andnot_ps(sign, v[2 * h]), _mm256_andnot_ps(sign, v[2 * h + 1])));
        const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        d[h] = amax / 127.0f;
        for (int i = 2 * h; i < 2 * h + 2; ++i) iq[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // nearest even
      }
      // int32 -> int8 with saturation; packs interleave 128-bit lanes, the permute restores the order
      const __m256i p16a = _mm256_packs_epi32(iq[0], iq[1]), p16b = _mm256_packs_epi32(iq[2], iq[3]);
      const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q + m * a.Kp + 32 * b), p8);
      for (int h = 0; h < 2; ++h) {
        a.d16[m * g + 2 * b + h] = d[h];
        a.a16[m * g + 2 * b + h] = d[h] * static_cast<float>(hsum8i(_mm256_add_epi32(iq[2 * h], iq[2 * h + 1])));
      }
    }
    for (int64_t i = 0; i < g; i += 8) {
      _mm256_storeu_ps(a.d16l + m * g + i, to_lanes(_mm256_loadu_ps(a.d16 + m * g + i)));
      _mm256_storeu_ps(a.a16l + m * g + i, to_lanes(_mm256_loadu_ps(a.a16 + m * g + i)));
    }
    for (int64_t i = 0; i < g / 2; ++i) a.a32[m * g / 2 + i] = a.a16[m * g + 2 * i] + a.a16[m * g + 2 * i + 1];
    for (int64_t i = 0; i < a.Kp / 128; ++i) {  // each half superblock: words_dot's sums of codes all 32
      __m256i p[4];
      const uint8_t* x = reinterpret_cast<const uint8_t*>(a.q + m * a.Kp + 128 * i);
      for (int j = 0; j < 4; ++j) p[j] = _mm256_maddubs_epi16(_mm256_set1_epi8(32), load256(x + 32 * j));
      const __m256i z = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));  // <= 32 x 8 x 127
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.z8 + m * a.Kp / 8 + 16 * i), z);
    }
  }
  return a;
}

#include "gemv_avx2.h"  // after the block types and Act: dot_row, rows_dot

// ---- dequantization (bit-exact with gguf-py: s * q, then + o, two roundings; -ffp-contract=off) ----

inline void store8(float* out, __m256 v) { _mm256_storeu_ps(out, v); }
inline void store8(uint16_t* out, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out), to_bf16(v)); }

// a row of K weights -> out: f32, or bf16 (rounded to nearest even)
template <class T, class Out>
void dequant_row(const uint8_t* row, int64_t K, int64_t nb, Out* out) {
  alignas(32) float s16[16], o16[16];
  const __m256 cz = _mm256_set1_ps(static_cast<float>(T::C));
  for (int64_t sb = 0; sb < (K + SB - 1) / SB; ++sb) {
    __m256 s[2], o[2];
    const int nch = T::scales(row, sb, nb, s, o);
    _mm256_store_ps(s16, s[0]), _mm256_store_ps(s16 + 8, s[1]);
    _mm256_store_ps(o16, o[0]), _mm256_store_ps(o16 + 8, o[1]);
    for (int j = 0; j < nch; ++j) {
      alignas(32) uint8_t q[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(q), T::codes(row, sb, j));
      for (int k = 0; k < 4; ++k) {  // 8 weights at a time; group 2j + k / 2
        const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * k));
        __m256 v = _mm256_cvtepi32_ps(T::SIGNED ? _mm256_cvtepi8_epi32(q8) : _mm256_cvtepu8_epi32(q8));
        const __m256 sv = _mm256_set1_ps(s16[2 * j + k / 2]);
        v = T::sym ? _mm256_mul_ps(sv, _mm256_sub_ps(v, cz)) : _mm256_add_ps(_mm256_mul_ps(sv, v), _mm256_set1_ps(o16[2 * j + k / 2]));
        store8(out + sb * SB + 32 * j + 8 * k, v);
      }
    }
  }
}

}  // namespace
