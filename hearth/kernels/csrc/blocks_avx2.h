// The GGUF block formats (gguf_formats.h) unpacked with AVX2 for the avx2 tier: per 256-weight
// superblock 16 scales and offsets (one per 16 weights, as two 8-lane vectors), per 32 weights their
// codes in natural order; the 8-bit activations; the per-row dot product (u8 codes x s8 activations
// by vpmaddubsw + vpmaddwd, the classic AVX2 int8 dot) and dequantization (bit-exact with gguf-py)
// built on them. Included once, by gguf_kernels_avx2.cpp, compiled with -mavx2 -mfma -mf16c -mbmi2.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// [v0, v0, v0, v0, v1, v1, v1, v1] for v = per-16-weight values of groups 2j, 2j + 1 of a superblock
// (lo: groups 0-7, hi: 8-15): the 8 int32 sums of a 32-weight chunk cover its groups that way
inline __m256 chunk_lanes(__m256 lo, __m256 hi, int j) {
  const __m256i idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  return _mm256_permutevar8x32_ps(j < 4 ? lo : hi, _mm256_add_epi32(idx, _mm256_set1_epi32(2 * (j & 3))));
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

template <class F>
inline int k4_scales(const uint8_t* b, __m256* s, __m256* o) {  // Q4_K/Q5_K: one scale and min per 32
  uint64_t sc, mn;
  k4_scale_bytes(b, sc, mn);
  const __m256 s8 = _mm256_mul_ps(_mm256_set1_ps(f16(b)), bytes8_ps(sc));
  const __m256 o8 = _mm256_mul_ps(_mm256_set1_ps(-f16(b + 2)), bytes8_ps(mn));
  s[0] = dup2_lo(s8), s[1] = dup2_hi(s8), o[0] = dup2_lo(o8), o[1] = dup2_hi(o8);
  return 8;
}

struct K4 : FQ4_K {
  static constexpr bool SIGNED = false;
  static constexpr int QMAX = 15;
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) { return k4_scales<FQ4_K>(row + sb * TS, s, o); }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const __m256i x = load256(row + sb * TS + QS + 32 * (j >> 1));
    return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(x, 4) : x, low4());
  }
};

struct K5 : FQ5_K {
  static constexpr bool SIGNED = false;
  static constexpr int QMAX = 31;
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) { return k4_scales<FQ5_K>(row + sb * TS, s, o); }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    const __m256i x = load256(b + QS + 32 * (j >> 1));
    const __m256i lo = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(x, 4) : x, low4());
    return _mm256_or_si256(lo, bit_of_bytes(load256(b + QH), j, 4));
  }
};

struct K6 : FQ6_K {
  static constexpr bool SIGNED = false;
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
  static __m256i codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    const int h = j >> 2, sub = j & 3;
    __m256i ql = load256(b + QL + 64 * h + 32 * (sub & 1));
    if (sub >> 1) ql = _mm256_srli_epi16(ql, 4);
    const __m256i qh = _mm256_srl_epi16(load256(b + QH + 32 * h), _mm_cvtsi32_si128(2 * sub));
    return _mm256_or_si256(_mm256_and_si256(ql, low4()), _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4));
  }
};

struct K2 : FQ2_K {
  static constexpr bool SIGNED = false;
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

struct K3 : FQ3_K {
  static constexpr bool SIGNED = false;
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

// ---- activations: each row padded with zeros to Kp = K rounded up to 256 (AVX-512's natural layout) ----

struct Act {
  int64_t M = 0, K = 0, Kp = 0;
  int8_t* q = nullptr;  // [M][Kp]
  float* d16 = nullptr;  // [M][Kp/16]: the scale of each 16 codes
  float* a16 = nullptr;  // [M][Kp/16]: d * (sum of those 16 codes)
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
  const size_t need = static_cast<size_t>(M) * (a.Kp + 2 * g * sizeof(float)) + 64;
  if (act_buf.size() < need) act_buf.resize(need);
  a.d16 = reinterpret_cast<float*>(act_buf.data());
  a.a16 = a.d16 + M * g;
  a.q = reinterpret_cast<int8_t*>(a.a16 + M * g);
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
  }
  return a;
}

// y[m] for rows m0 .. m0 + MT of the activations and R weight rows (row + r * wstep -> y[.. + r * ystep]):
// per 32 weights the integer dot of codes and activations (4 int32 lanes per 16 weights), times weight
// scale x activation scale; the offsets o x d x sum(q) per 16 weights on the side. The R rows share
// each activation load; each row's arithmetic is the one-row pass's
template <class T, int MT, int R = 1>
void dot_row(const uint8_t* row, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy, int64_t wstep = 0,
             int64_t ystep = 0) {
  __m256 acc[R][MT], off[R][MT];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) acc[r][m] = off[r][m] = _mm256_setzero_ps();
  const int64_t g = a.Kp / 16;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t sb = 0; sb < a.Kp / SB; ++sb) {
    __m256 cs[R][MT][2];
    int nch = 8;
    for (int r = 0; r < R; ++r) {
      __m256 s[2], o[2];
      nch = T::scales(row + r * wstep, sb, nb, s, o);
      for (int m = 0; m < MT; ++m) {
        const int64_t at = (m0 + m) * g + 16 * sb;
        cs[r][m][0] = _mm256_mul_ps(s[0], _mm256_loadu_ps(a.d16 + at));
        cs[r][m][1] = _mm256_mul_ps(s[1], _mm256_loadu_ps(a.d16 + at + 8));
        off[r][m] = _mm256_fmadd_ps(o[0], _mm256_loadu_ps(a.a16 + at), off[r][m]);
        off[r][m] = _mm256_fmadd_ps(o[1], _mm256_loadu_ps(a.a16 + at + 8), off[r][m]);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {  // unrolled: each chunk's shifts and lane indices are constants
      if (j >= nch) break;  // a short superblock: the rows' last, the same in every row
      __m256i codes[R], ua[R];
      for (int r = 0; r < R; ++r) {
        codes[r] = T::codes(row + r * wstep, sb, j);
        ua[r] = T::SIGNED ? _mm256_sign_epi8(codes[r], codes[r]) : codes[r];  // |codes| for int8 codes
      }
      for (int m = 0; m < MT; ++m) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + (m0 + m) * a.Kp + sb * SB + 32 * j));
        for (int r = 0; r < R; ++r) {
          const __m256i qa = T::SIGNED ? _mm256_sign_epi8(x, codes[r]) : x;  // |w| x sign(w) x: the u8 x s8 product stays exact
          const __m256i dp = _mm256_madd_epi16(_mm256_maddubs_epi16(ua[r], qa), ones);
          acc[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), chunk_lanes(cs[r][m][0], cs[r][m][1], j), acc[r][m]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) y[(m0 + m) * ldy + r * ystep] = hsum(_mm256_add_ps(acc[r][m], off[r][m]));
}

// Activation rows per pass of dot_row: what 16 ymm registers hold beside the codes and scales
constexpr int GEMV_ROWS = 4;
// Two weight rows per pass (rows_dot.h) at up to 2 activation rows: at 3-4 in pairs the 1.5B's whole
// step is the same, at 8 1.07-1.10x the time (16 ymm registers)
constexpr int GEMV_PAIR_ROWS = 2;
constexpr int64_t GEMV_PAIR_UPTO = 2;
#include "rows_dot.h"  // after dot_row and Act: the row loop both libraries share

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
