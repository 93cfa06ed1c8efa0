// The GGUF block formats (gguf_formats.h) unpacked with NEON for the neon tier, blocks_avx2.h's
// structure lane for lane: per 256-weight superblock 16 scales and offsets (one per 16 weights, as two
// vf8), per 32 weights their codes in natural order (int8: Q8_0's and the codebook formats' are signed,
// every other type's fit in 0..63); the 8-bit activations (the same bytes as the avx2 tier's); the per-row dot product (an
// int8 dot per 4 weights: vdotq_s32 where the compiler targets the dot-product extension, else
// widening multiplies and pairwise adds, exact either way) and dequantization (bit-exact with gguf-py).
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gguf_formats.h"
#include "simd_neon.h"

namespace {

using codes32 = int8x16x2_t;  // 32 codes, weights 0-15 then 16-31

inline codes32 pair(uint8x16_t lo, uint8x16_t hi) { return {{vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)}}; }
inline uint8x16_t low4(uint8x16_t v) { return vandq_u8(v, vdupq_n_u8(0x0F)); }

inline codes32 nibbles32(const uint8_t* qs) {  // 16 bytes -> 32 codes: low nibbles, then high
  const uint8x16_t x = vld1q_u8(qs);
  return pair(low4(x), vshrq_n_u8(x, 4));
}

inline uint8x16_t bits16(uint16_t h) {  // byte l = 0x01 where bit l of h is set
  const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t spread = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(h)), vdup_n_u8(static_cast<uint8_t>(h >> 8)));
  return vandq_u8(vtstq_u8(spread, vld1q_u8(bit)), vdupq_n_u8(1));
}

// bit j of each byte of v, moved to bit `to`
inline uint8x16_t bit_of_bytes(uint8x16_t v, int j, int to) {
  return vshlq_u8(vandq_u8(vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-j))), vdupq_n_u8(1)), vdupq_n_s8(static_cast<int8_t>(to)));
}

inline uint8x16_t shr(uint8x16_t v, int n) { return vshlq_u8(v, vdupq_n_s8(static_cast<int8_t>(-n))); }

inline codes32 field2(const uint8_t* qs, int j) {  // the 2-bit field (j % 4) of qs[32 (j / 4) + l], l < 32
  const uint8_t* p = qs + 32 * (j >> 2);
  const uint8x16_t three = vdupq_n_u8(3);
  return pair(vandq_u8(shr(vld1q_u8(p), 2 * (j & 3)), three), vandq_u8(shr(vld1q_u8(p + 16), 2 * (j & 3)), three));
}

inline vf8 halves8(const uint16_t* h) {  // 8 f16 bit patterns -> f32
  const float16x8_t v = vreinterpretq_f16_u16(vld1q_u16(h));
  return {vcvt_f32_f16(vget_low_f16(v)), vcvt_high_f32_f16(v)};
}

inline vf8 bytes8_ps(uint64_t b) {  // 8 unsigned bytes -> f32
  const uint16x8_t w = vmovl_u8(vcreate_u8(b));
  return {vcvtq_f32_u32(vmovl_u16(vget_low_u16(w))), vcvtq_f32_u32(vmovl_high_u16(w))};
}

inline vf8 dup2_lo(vf8 v) { return {vzip1q_f32(v.lo, v.lo), vzip2q_f32(v.lo, v.lo)}; }  // [v0 v0 v1 v1 v2 v2 v3 v3]
inline vf8 dup2_hi(vf8 v) { return {vzip1q_f32(v.hi, v.hi), vzip2q_f32(v.hi, v.hi)}; }

// ---- 32-wide block types: a superblock is 8 consecutive blocks, chunk j is block 8 sb + j ----
template <class F>
struct B32 {
  static constexpr bool SIGNED = F::LEVELS == 256;  // Q8_0: int8 codes
  static constexpr int C = SIGNED ? 0 : F::C, TS = F::TS;
  static constexpr bool sym = F::sym;
  static int scales(const uint8_t* row, int64_t sb, int64_t nb, vf8* s, vf8* o) {
    const int64_t b0 = sb * 8;
    const int n = static_cast<int>(std::min<int64_t>(8, nb - b0));
    const uint8_t* b = row + b0 * TS;
    uint16_t d[8] = {}, m[8] = {};
    for (int i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(u32(b + i * TS)), m[i] = static_cast<uint16_t>(u32(b + i * TS) >> 16);
    const vf8 d8 = halves8(d);
    s[0] = dup2_lo(d8), s[1] = dup2_hi(d8);
    if (sym) {
      const vf8 c = vset1(-static_cast<float>(C));
      o[0] = vmul(s[0], c), o[1] = vmul(s[1], c);
    } else {
      const vf8 m8 = halves8(m);
      o[0] = dup2_lo(m8), o[1] = dup2_hi(m8);
    }
    return n;
  }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + (sb * 8 + j) * TS;
    if constexpr (SIGNED) {
      return {{vld1q_s8(reinterpret_cast<const int8_t*>(b + F::QS)), vld1q_s8(reinterpret_cast<const int8_t*>(b + F::QS + 16))}};
    } else if constexpr (F::QH >= 0) {
      const uint32_t h = u32(b + F::QH);
      const uint8x16_t x = vld1q_u8(b + F::QS);
      return pair(vorrq_u8(low4(x), vshlq_n_u8(bits16(static_cast<uint16_t>(h)), 4)),
                  vorrq_u8(vshrq_n_u8(x, 4), vshlq_n_u8(bits16(static_cast<uint16_t>(h >> 16)), 4)));
    } else {
      return nibbles32(b + F::QS);
    }
  }
};

// ---- k-quants: one block per superblock (layouts: gguf_formats.h) ----

inline int k4_scales(const uint8_t* b, vf8* s, vf8* o) {  // Q4_K/Q5_K: one scale and min per 32
  uint64_t sc, mn;
  k4_scale_bytes(b, sc, mn);
  const vf8 s8 = vmul(vset1(f16(b)), bytes8_ps(sc));
  const vf8 o8 = vmul(vset1(-f16(b + 2)), bytes8_ps(mn));
  s[0] = dup2_lo(s8), s[1] = dup2_hi(s8), o[0] = dup2_lo(o8), o[1] = dup2_hi(o8);
  return 8;
}

inline codes32 half_nibbles(const uint8_t* p, bool high) {  // 32 bytes -> their low (or high) nibbles
  const uint8x16_t a = vld1q_u8(p), b = vld1q_u8(p + 16);
  return high ? pair(vshrq_n_u8(a, 4), vshrq_n_u8(b, 4)) : pair(low4(a), low4(b));
}

inline codes32 or_bits(codes32 c, const uint8_t* p, int j, int to) {  // c | bit j of p[l] at bit `to`, l < 32
  c.val[0] = vorrq_s8(c.val[0], vreinterpretq_s8_u8(bit_of_bytes(vld1q_u8(p), j, to)));
  c.val[1] = vorrq_s8(c.val[1], vreinterpretq_s8_u8(bit_of_bytes(vld1q_u8(p + 16), j, to)));
  return c;
}

struct K4 : FQ4_K {
  static constexpr bool SIGNED = false;
  static int scales(const uint8_t* row, int64_t sb, int64_t, vf8* s, vf8* o) { return k4_scales(row + sb * TS, s, o); }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) { return half_nibbles(row + sb * TS + QS + 32 * (j >> 1), j & 1); }
};

struct K5 : FQ5_K {
  static constexpr bool SIGNED = false;
  static int scales(const uint8_t* row, int64_t sb, int64_t, vf8* s, vf8* o) { return k4_scales(row + sb * TS, s, o); }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    return or_bits(half_nibbles(b + QS + 32 * (j >> 1), j & 1), b + QH, j, 4);
  }
};

struct K6 : FQ6_K {
  static constexpr bool SIGNED = false;
  static int scales(const uint8_t* row, int64_t sb, int64_t, vf8* s, vf8* o) {
    const uint8_t* b = row + sb * TS;
    const int16x8_t lo = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(b + SC)));
    const int16x8_t hi = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(b + SC + 8)));
    auto ps = [](int16x8_t v) -> vf8 { return {vcvtq_f32_s32(vmovl_s16(vget_low_s16(v))), vcvtq_f32_s32(vmovl_high_s16(v))}; };
    const vf8 d = vset1(f16(b + D)), c = vset1(-32.0f);
    s[0] = vmul(d, ps(lo)), s[1] = vmul(d, ps(hi));
    o[0] = vmul(s[0], c), o[1] = vmul(s[1], c);
    return 8;
  }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    const int h = j >> 2, sub = j & 3;
    const codes32 ql = half_nibbles(b + QL + 64 * h + 32 * (sub & 1), sub >> 1);
    codes32 out;
    for (int i = 0; i < 2; ++i) {
      const uint8x16_t qh = vandq_u8(shr(vld1q_u8(b + QH + 32 * h + 16 * i), 2 * sub), vdupq_n_u8(3));
      out.val[i] = vorrq_s8(ql.val[i], vreinterpretq_s8_u8(vshlq_n_u8(qh, 4)));
    }
    return out;
  }
};

struct K2 : FQ2_K {
  static constexpr bool SIGNED = false;
  static int scales(const uint8_t* row, int64_t sb, int64_t, vf8* s, vf8* o) {
    const uint8_t* b = row + sb * TS;
    uint64_t lo8, hi8;
    std::memcpy(&lo8, b, 8), std::memcpy(&hi8, b + 8, 8);
    const uint64_t m4 = 0x0F0F0F0F0F0F0F0Full;
    const vf8 d = vset1(f16(b + D)), dmin = vset1(-f16(b + D + 2));
    s[0] = vmul(d, bytes8_ps(lo8 & m4)), s[1] = vmul(d, bytes8_ps(hi8 & m4));
    o[0] = vmul(dmin, bytes8_ps((lo8 >> 4) & m4)), o[1] = vmul(dmin, bytes8_ps((hi8 >> 4) & m4));
    return 8;
  }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) { return field2(row + sb * TS + QS, j); }
};

struct K3 : FQ3_K {
  static constexpr bool SIGNED = false;
  static int scales(const uint8_t* row, int64_t sb, int64_t, vf8* s, vf8* o) {
    const uint8_t* b = row + sb * TS;
    float sc[16];
    q3k_scales(b + SC, sc);
    const vf8 d = vset1(f16(b + D)), c = vset1(-4.0f);
    s[0] = vmul(d, vload(sc)), s[1] = vmul(d, vload(sc + 8));
    o[0] = vmul(s[0], c), o[1] = vmul(s[1], c);
    return 8;
  }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) {
    const uint8_t* b = row + sb * TS;
    return or_bits(field2(b + QS, j), b + HM, j, 2);
  }
};

// ---- codebook formats (IQ4_NL, IQ4_XS, MXFP4; codebooks_avx2.h's way): each 4-bit index becomes its
// int8 codebook value by one vqtbl1q_s8, read as signed codes with C = 0 (B32's Q8_0 way), so no offsets ----

inline int8x16_t iq4_book() {  // kvalues_iq4nl (ggml-common.h)
  static const int8_t v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return vld1q_s8(v);
}

inline int8x16_t mxfp4_book() {  // kvalues_mxfp4: the E2M1 values doubled
  static const int8_t v[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return vld1q_s8(v);
}

inline codes32 book_codes(int8x16_t book, const uint8_t* qs) {  // 16 bytes of indices -> 32 values
  const uint8x16_t x = vld1q_u8(qs);
  return {{vqtbl1q_s8(book, low4(x)), vqtbl1q_s8(book, vshrq_n_u8(x, 4))}};
}

struct IQ4NL32 : B32<FIQ4_NL> {
  static codes32 codes(const uint8_t* row, int64_t sb, int j) { return book_codes(iq4_book(), row + (sb * 8 + j) * TS + FIQ4_NL::QS); }
};

struct MX32 : B32<FMXFP4> {  // IQ4_NL's layout under 2^(e - 128), e the E8M0 byte (ggml_e8m0_to_fp32_half)
  static int scales(const uint8_t* row, int64_t sb, int64_t nb, vf8* s, vf8* o) {
    const int64_t b0 = sb * 8;
    const int n = static_cast<int>(std::min<int64_t>(8, nb - b0));
    float d[8] = {};
    for (int i = 0; i < n; ++i) {
      const uint32_t e = row[(b0 + i) * TS];  // e < 2: the f32 subnormals 2^-128, 2^-127
      const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
      std::memcpy(&d[i], &bits, 4);
    }
    const vf8 d8 = vload(d);
    s[0] = dup2_lo(d8), s[1] = dup2_hi(d8), o[0] = o[1] = vzero();
    return n;
  }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) { return book_codes(mxfp4_book(), row + (sb * 8 + j) * TS + FMXFP4::QS); }
};

struct IQ4XS : FIQ4_XS {  // 8 groups of 32: d * (ls_j - 32) (as gguf-py rounds it), IQ4_NL's codes at QS + 16 j
  static constexpr bool SIGNED = true;
  static constexpr int C = 0;
  static int scales(const uint8_t* row, int64_t sb, int64_t, vf8* s, vf8* o) {
    const uint8_t* b = row + sb * TS;
    const int h = b[2] | (b[3] << 8);
    float sc[8];
    for (int j = 0; j < 8; ++j) sc[j] = static_cast<float>((((b[4 + j / 2] >> (4 * (j & 1))) & 0x0F) | (((h >> (2 * j)) & 3) << 4)) - 32);
    const vf8 s8 = vmul(vset1(f16(b)), vload(sc));
    s[0] = dup2_lo(s8), s[1] = dup2_hi(s8), o[0] = o[1] = vzero();
    return 8;
  }
  static codes32 codes(const uint8_t* row, int64_t sb, int j) { return book_codes(iq4_book(), row + sb * TS + QS + 16 * j); }
};

// ---- activations: each row padded with zeros to Kp = K rounded up to 256 (blocks_avx2.h's layout) ----

struct Act {
  int64_t M = 0, K = 0, Kp = 0;
  int8_t* q = nullptr;  // [M][Kp]
  float* d16 = nullptr;  // [M][Kp/16]: the scale of each 16 codes
  float* a16 = nullptr;  // [M][Kp/16]: d * (sum of those 16 codes)
};

thread_local std::vector<uint8_t> act_buf;

// rows of x -> q8 with a scale per 16 values (ggml's quantize_row_q8_0 rule on halves of its
// 32-blocks, as blocks_avx2.h: d = max|x| / 127, q = round-to-even(x * (127 / max|x|))): the same bytes
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
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    for (int64_t h = 0; h < K / 16; ++h) {  // 16 values: 4 vectors
      float32x4_t v[4];
      for (int i = 0; i < 4; ++i) v[i] = vld1q_f32(xr + 16 * h + 4 * i);
      const float amax = vmaxvq_f32(vmaxq_f32(vmaxq_f32(vabsq_f32(v[0]), vabsq_f32(v[1])), vmaxq_f32(vabsq_f32(v[2]), vabsq_f32(v[3]))));
      const float32x4_t id = vdupq_n_f32(amax > 0.0f ? 127.0f / amax : 0.0f);
      int32x4_t iq[4];
      for (int i = 0; i < 4; ++i) iq[i] = vcvtnq_s32_f32(vmulq_f32(v[i], id));  // nearest even
      const int16x8_t p0 = vcombine_s16(vqmovn_s32(iq[0]), vqmovn_s32(iq[1]));
      const int16x8_t p1 = vcombine_s16(vqmovn_s32(iq[2]), vqmovn_s32(iq[3]));
      vst1q_s8(a.q + m * a.Kp + 16 * h, vcombine_s8(vqmovn_s16(p0), vqmovn_s16(p1)));
      const float d = amax / 127.0f;
      a.d16[m * g + h] = d;
      a.a16[m * g + h] = d * static_cast<float>(vaddvq_s32(vaddq_s32(vaddq_s32(iq[0], iq[1]), vaddq_s32(iq[2], iq[3]))));
    }
  }
  return a;
}

// 4 int32 sums of 4 products each (bytes 4i .. 4i + 3): vdotq_s32's lanes, or the same sums by
// widening multiplies (|products| <= 128 * 127 fit int16) and two pairwise adds
inline int32x4_t dot16(int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(vdupq_n_s32(0), a, b);
#else
  const int32x4_t lo = vpaddlq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  const int32x4_t hi = vpaddlq_s16(vmull_high_s8(a, b));
  return vpaddq_s32(lo, hi);
#endif
}

// y[m] for rows m0 .. m0 + MT of the activations and one weight row: gemv_avx2.h's dot_row (per 32
// weights the integer dot, times weight scale x activation scale; offsets on the side)
template <class T, int MT>
void dot_row(const uint8_t* row, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy) {
  vf8 acc[MT], off[MT];
  for (int m = 0; m < MT; ++m) acc[m] = off[m] = vzero();
  const int64_t g = a.Kp / 16;
  for (int64_t sb = 0; sb < a.Kp / SB; ++sb) {
    vf8 s[2], o[2];
    float cs[MT][16];
    const int nch = T::scales(row, sb, nb, s, o);
    for (int m = 0; m < MT; ++m) {
      const int64_t at = (m0 + m) * g + 16 * sb;
      vstore(cs[m], vmul(s[0], vload(a.d16 + at)));
      vstore(cs[m] + 8, vmul(s[1], vload(a.d16 + at + 8)));
      off[m] = vfma(o[0], vload(a.a16 + at), off[m]);
      off[m] = vfma(o[1], vload(a.a16 + at + 8), off[m]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      if (j >= nch) break;
      const codes32 c = T::codes(row, sb, j);
      for (int m = 0; m < MT; ++m) {
        const int8_t* qa = a.q + (m0 + m) * a.Kp + sb * SB + 32 * j;
        const int32x4_t d0 = dot16(c.val[0], vld1q_s8(qa)), d1 = dot16(c.val[1], vld1q_s8(qa + 16));
        acc[m].lo = vfmaq_n_f32(acc[m].lo, vcvtq_f32_s32(d0), cs[m][2 * j]);
        acc[m].hi = vfmaq_n_f32(acc[m].hi, vcvtq_f32_s32(d1), cs[m][2 * j + 1]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) y[(m0 + m) * ldy] = hsum(vadd(acc[m], off[m]));
}

// Activation rows per pass of dot_row
constexpr int GEMV_ROWS = 4;
constexpr int GEMV_PAIR_ROWS = 0;  // no two-row pass (rows_dot.h)
constexpr int64_t GEMV_PAIR_UPTO = 0;
// No wide passes here (the AVX-512 library's gemv_wide.h): rows_dot's own passes at every row count
template <class T>
bool rows_dot_wide(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const Act&, float*, int64_t) {
  return false;
}
#include "rows_dot.h"  // after dot_row and Act: the row loop every library shares

// ---- dequantization (bit-exact with gguf-py: s * q, then + o, two roundings; -ffp-contract=off) ----

inline void store8(float* out, vf8 v) { vstore(out, v); }
inline void store8(uint16_t* out, vf8 v) { store_half(out, v, true); }

// a row of K weights -> out: f32, or bf16 (rounded to nearest even)
template <class T, class Out>
void dequant_row(const uint8_t* row, int64_t K, int64_t nb, Out* out) {
  float s16[16], o16[16];
  const float32x4_t cz = vdupq_n_f32(static_cast<float>(T::C));
  for (int64_t sb = 0; sb < (K + SB - 1) / SB; ++sb) {
    vf8 s[2], o[2];
    const int nch = T::scales(row, sb, nb, s, o);
    vstore(s16, s[0]), vstore(s16 + 8, s[1]), vstore(o16, o[0]), vstore(o16 + 8, o[1]);
    for (int j = 0; j < nch; ++j) {
      int8_t q[32];
      const codes32 c = T::codes(row, sb, j);
      vst1q_s8(q, c.val[0]), vst1q_s8(q + 16, c.val[1]);
      for (int k = 0; k < 4; ++k) {  // 8 weights at a time; group 2j + k / 2
        const int16x8_t w = vmovl_s8(vld1_s8(q + 8 * k));
        float32x4_t v[2] = {vcvtq_f32_s32(vmovl_s16(vget_low_s16(w))), vcvtq_f32_s32(vmovl_high_s16(w))};
        const float32x4_t sv = vdupq_n_f32(s16[2 * j + k / 2]), ov = vdupq_n_f32(o16[2 * j + k / 2]);
        for (float32x4_t& x : v) x = T::sym ? vmulq_f32(sv, vsubq_f32(x, cz)) : vaddq_f32(vmulq_f32(sv, x), ov);
        store8(out + sb * SB + 32 * j + 8 * k, vf8{v[0], v[1]});
      }
    }
  }
}

}  // namespace
