// GGUF block formats as unsigned codes plus per-16-weight scales and offsets, and the 8-bit activation
// format; at its end, inside its namespace, what is built on them: the GEMV (gemv_groups.h,
// gemv_vnni.h, rows_dot.h) and dequantization (dequant.h). Included once, by gguf_kernels.cpp (one
// translation unit: one compiler run).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gguf_formats.h"

namespace {

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

const __m256i LOW4 = _mm256_set1_epi8(0x0F);

// The order in which a type's GEMV (gemv_vnni.h dot_row) lays a superblock's 16 scale groups along a
// vector's 16 dword lanes (gemv_groups.h): group order (lane g: group g), the lane order 4-bit nibbles
// fall into (Q4_K's, LANE_GROUP), or its transpose (Q6_K's: lane 4L + k holds group 4k + L). The
// activations are laid out once per call in each order a plan's parts read (Act's layouts).
enum class Order { groups, lanes, transposed };

inline __m256i nibbles32(const uint8_t* qs) {  // 16 bytes -> 32 codes: low nibbles, then high
  __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
  return _mm256_and_si256(y, LOW4);
}

// ---- 32-wide block types, read two blocks per 64-weight chunk ----
// A chunk holds blocks (b, b + 1) "paired": the first 16 weights of b, of b + 1, then the last 16 of
// b, of b + 1 -- the order the nibbles of two blocks fall into with one load and one shift. The
// activations are quantized into the same order (Act's paired layout). A superblock is 8 blocks;
// the last one of a row may be short (missing blocks read as ZERO_BLOCK: zero codes, zero scale).
// sym: w = s * (q - C) (gguf-py's expression for symmetric types); else w = s * q + o.

alignas(64) const uint8_t ZERO_BLOCK[64] = {};

inline __m512i paired_nibbles(const uint8_t* q0, const uint8_t* q1) {
  const __m256i y = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(q1), reinterpret_cast<const __m128i*>(q0));
  return join(_mm256_and_si256(y, LOW4), _mm256_and_si256(_mm256_srli_epi16(y, 4), LOW4));
}

inline __mmask64 paired_bits(uint32_t h0, uint32_t h1) {  // 32 high bits of each block, paired order
  return _pdep_u64(h0, 0x0000FFFF0000FFFFull) | _pdep_u64(h1, 0xFFFF0000FFFF0000ull);
}

struct TQ4_0 : FQ4_0 {
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return paired_nibbles(b0 + 2, b1 + 2); }
};
struct TQ4_1 : FQ4_1 {
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return paired_nibbles(b0 + 4, b1 + 4); }
};
struct TQ5_0 : FQ5_0 {
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_or_si512(paired_nibbles(b0 + 6, b1 + 6), _mm512_maskz_set1_epi8(paired_bits(u32(b0 + 2), u32(b1 + 2)), 0x10));
  }
};
struct TQ5_1 : FQ5_1 {
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_or_si512(paired_nibbles(b0 + 8, b1 + 8), _mm512_maskz_set1_epi8(paired_bits(u32(b0 + 4), u32(b1 + 4)), 0x10));
  }
};
struct TQ8_0 : FQ8_0 {  // int8 codes, shifted to 0..255 (flip the sign bit)
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    const __m512i a = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2)));
    const __m512i b = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2)));
    const __m512i v = _mm512_permutex2var_epi64(a, _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0), b);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

// IQ4's codebook (kvalues_iq4nl) + 128 in each 128-bit lane: one vpshufb turns 4-bit indices into codes
const __m512i IQ4_CODES = _mm512_broadcast_i32x4(_mm_setr_epi8(
    1, 24, 45, 63, 79, 93, 106, 118, static_cast<char>(129), static_cast<char>(141), static_cast<char>(153),
    static_cast<char>(166), static_cast<char>(181), static_cast<char>(197), static_cast<char>(217), static_cast<char>(241)));

struct TIQ4_NL : FIQ4_NL {
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_shuffle_epi8(IQ4_CODES, paired_nibbles(b0 + 2, b1 + 2));
  }
};

// MXFP4's doubled E2M1 values (kvalues_mxfp4: 0 1 2 3 4 6 8 12, then their negatives) + 128, as IQ4_CODES
const __m512i MXFP4_CODES = _mm512_broadcast_i32x4(_mm_setr_epi8(
    static_cast<char>(128), static_cast<char>(129), static_cast<char>(130), static_cast<char>(131),
    static_cast<char>(132), static_cast<char>(134), static_cast<char>(136), static_cast<char>(140),
    static_cast<char>(128), 127, 126, 125, 124, 122, 120, 116));

struct TMXFP4 : FMXFP4 {
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return _mm512_shuffle_epi8(MXFP4_CODES, paired_nibbles(b0 + 1, b1 + 1));
  }
};

// 8 blocks' first dwords -> their scales: f16 d in the low half, or from MXFP4's E8M0 exponent e in the low byte
// 2^(e - 128) built from its bits as ggml_e8m0_to_fp32_half (e < 2: the f32 subnormals 2^-128, 2^-127)
template <class F>
inline __m256 block_scales8(__m256i g) {
  if constexpr (std::is_base_of_v<FMXFP4, F>) {
    const __m256i e = _mm256_and_si256(g, _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_mask_blend_epi32(_mm256_cmplt_epu32_mask(e, _mm256_set1_epi32(2)), normal, tiny));
  } else {
    return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(g));
  }
}

template <class T>
struct Blocks32 {
  using Type = T;
  static constexpr bool sym = T::sym, paired = true;
  static constexpr Order order = Order::lanes;
  static constexpr int C = T::C;
  // the scales of superblock `sb` (in chunk order: group 4c + k is the k-th 16 weights of chunk c; LANES:
  // the GEMV's lane order, gemv_groups.h)
  template <bool LANES = false>
  static int scales(const uint8_t* row, int64_t sb, int64_t nb, __m512& s, __m512& o) {
    const int64_t b0 = sb * 8;
    const int n = static_cast<int>(std::min<int64_t>(8, nb - b0));
    // the first 4 bytes of each block: f16 d (and f16 m for the affine types). Scalar loads, not a
    // gather: gathers are microcoded on CPUs with the GDS (Downfall) fix, ~50 cycles each here
    const uint8_t* b = row + b0 * T::TS;
    auto head = [&](int i) { return i < n ? static_cast<int>(u32(b + i * T::TS)) : 0; };
    const __m256i g = _mm256_set_epi32(head(7), head(6), head(5), head(4), head(3), head(2), head(1), head(0));
    const __m512i pair = LANES ? _mm512_setr_epi32(0, 0, 4, 4, 1, 1, 5, 5, 2, 2, 6, 6, 3, 3, 7, 7)  // block of lane l's group
                               : _mm512_set_epi32(7, 6, 7, 6, 5, 4, 5, 4, 3, 2, 3, 2, 1, 0, 1, 0);
    const __m256 s8 = block_scales8<T>(g);
    s = _mm512_permutexvar_ps(pair, _mm512_castps256_ps512(s8));
    if (sym) {
      o = _mm512_mul_ps(s, _mm512_set1_ps(-static_cast<float>(C)));
    } else {
      const __m256 o8 = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(g, 16)));
      o = _mm512_permutexvar_ps(pair, _mm512_castps256_ps512(o8));
    }
    return (n + 1) / 2;
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t nb) {
    const int64_t b = sb * 8 + 2 * c;
    return T::codes(row + b * T::TS, b + 1 < nb ? row + (b + 1) * T::TS : ZERO_BLOCK);
  }
  static int pos(int c, int k) { return 64 * c + 32 * (k & 1) + 16 * (k >> 1); }  // natural offset
};

// ---- k-quants: one 256-weight block per superblock, chunks of 64 consecutive weights (layouts: gguf_formats.h) ----

inline __m512 bytes_to_ps(__m128i x) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x)); }

// Q4_K/Q5_K: d dmin scales[12] -> per 16-weight group g the scale d * sc[g / 2] and offset -dmin *
// mn[g / 2] (k4_scale_bytes' unpacking done by byte shuffles, each 6-bit value already doubled), in
// chunk order
inline int k4_scales(const uint8_t* b, __m512& s, __m512& o) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const char Z = -128;  // pshufb: a zero byte
  // sc[j]: j < 4 low 6 bits of byte 4 + j; else low nibble of byte 8 + j, and bits 6-7 of byte j as 4-5
  const __m128i sc = _mm_or_si128(
      _mm_and_si128(_mm_shuffle_epi8(x, _mm_setr_epi8(4, 4, 5, 5, 6, 6, 7, 7, 12, 12, 13, 13, 14, 14, 15, 15)),
                    _mm_setr_epi8(63, 63, 63, 63, 63, 63, 63, 63, 15, 15, 15, 15, 15, 15, 15, 15)),
      _mm_and_si128(_mm_srli_epi16(_mm_shuffle_epi8(x, _mm_setr_epi8(Z, Z, Z, Z, Z, Z, Z, Z, 4, 4, 5, 5, 6, 6, 7, 7)), 2),
                    _mm_set1_epi8(0x30)));
  // mn[j]: j < 4 low 6 bits of byte 8 + j; else high nibble of byte 8 + j, and bits 6-7 of byte 4 + j as 4-5
  const __m128i m8 = _mm_shuffle_epi8(x, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15));
  const __m128i lo6 = _mm_setr_epi8(63, 63, 63, 63, 63, 63, 63, 63, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i mn = _mm_or_si128(
      _mm_or_si128(_mm_and_si128(m8, lo6), _mm_andnot_si128(lo6, _mm_and_si128(_mm_srli_epi16(m8, 4), _mm_set1_epi8(0x0F)))),
      _mm_and_si128(_mm_srli_epi16(_mm_shuffle_epi8(x, _mm_setr_epi8(Z, Z, Z, Z, Z, Z, Z, Z, 8, 8, 9, 9, 10, 10, 11, 11)), 2),
                    _mm_set1_epi8(0x30)));
  const __m128 dd = _mm_cvtph_ps(x);  // d, dmin
  s = _mm512_mul_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sc)));
  const __m512 neg_dmin = _mm512_broadcastss_ps(_mm_xor_ps(_mm_movehdup_ps(dd), _mm_set1_ps(-0.0f)));
  o = _mm512_mul_ps(neg_dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mn)));
  return 4;
}

// The same values in the GEMV's lane order (lane l: group LANE_GROUP[l], gemv_groups.h), computed
// once per sub-scale: sc[0..7] and mn[0..7] side by side in 16 bytes, converted and scaled together
// ([d x 8, -dmin x 8]: each product as k4_scales rounds it), then spread to the lanes by two permutes
// (~16 instructions a superblock instead of ~26)
inline int k4_lane_scales(const uint8_t* b, __m512& s, __m512& o) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
  const char Z = -128;  // pshufb: a zero byte
  // low bits: sc[0-3] byte 4 + j & 63, sc[4-7] byte 8 + j & 15, mn[0-3] byte 8 + j & 63, mn[4-7] byte 8 + j >> 4
  const __m128i lo = _mm_shuffle_epi8(x, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m128i low = _mm_and_si128(_mm_mask_blend_epi8(0xF000, lo, _mm_srli_epi16(lo, 4)),
                                    _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  // bits 4-5 of sc[4-7], mn[4-7]: bits 6-7 of bytes 4 + (j - 4), 8 + (j - 4)
  const __m128i high = _mm_and_si128(
      _mm_srli_epi16(_mm_shuffle_epi8(x, _mm_setr_epi8(Z, Z, Z, Z, 4, 5, 6, 7, Z, Z, Z, Z, 8, 9, 10, 11)), 2), _mm_set1_epi8(0x30));
  const __m128 dm = _mm_xor_ps(_mm_cvtph_ps(x), _mm_setr_ps(0.0f, -0.0f, 0.0f, 0.0f));  // d, -dmin
  const __m512 f = _mm512_mul_ps(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), _mm512_castps128_ps512(dm)),
      _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_or_si128(low, high))));  // d sc[0..7], -dmin mn[0..7]
  s = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7), f);
  o = _mm512_permutexvar_ps(_mm512_setr_epi32(8, 9, 12, 13, 8, 9, 12, 13, 10, 11, 14, 15, 10, 11, 14, 15), f);
  return 4;
}

struct KQuant {
  static constexpr bool paired = false;
  static constexpr Order order = Order::groups;  // the GEMV reads the activations in group order (gemv_groups.h)
  static int pos(int c, int k) { return 64 * c + 16 * k; }
};

struct TQ4_K : KQuant, FQ4_K {  // 8 groups of 32
  static constexpr Order order = Order::lanes;  // in the GEMV's lane order (gemv_groups.h)
  template <bool LANES = false>
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m512& s, __m512& o) {
    return LANES ? k4_lane_scales(row + sb * TS, s, o) : k4_scales(row + sb * TS, s, o);
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + sb * TS + 16 + 32 * c));
    return join(_mm256_and_si256(x, LOW4), _mm256_and_si256(_mm256_srli_epi16(x, 4), LOW4));
  }
};

inline __mmask64 bit_pair(__m256i v, int c) {  // bits 2c (first 32 bytes) and 2c + 1 (next 32) of v's bytes
  return _mm256_test_epi8_mask(v, _mm256_set1_epi8(static_cast<char>(1 << (2 * c)))) |
         (static_cast<__mmask64>(_mm256_test_epi8_mask(v, _mm256_set1_epi8(static_cast<char>(2 << (2 * c))))) << 32);
}

struct TQ5_K : KQuant, FQ5_K {
  static constexpr Order order = Order::lanes;
  template <bool LANES = false>
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m512& s, __m512& o) {
    return LANES ? k4_lane_scales(row + sb * TS, s, o) : k4_scales(row + sb * TS, s, o);
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t) {
    const uint8_t* b = row + sb * TS;
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 48 + 32 * c));
    __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
    __m512i lo = join(_mm256_and_si256(x, LOW4), _mm256_and_si256(_mm256_srli_epi16(x, 4), LOW4));
    return _mm512_or_si512(lo, _mm512_maskz_set1_epi8(bit_pair(qh, c), 0x10));
  }
};

struct TQ6_K : KQuant, FQ6_K {  // 16 groups of 16
  static constexpr Order order = Order::transposed;  // the GEMV's (gemv_groups.h grouped_codes<TQ6_K>)
  // GEMV: in the transposed order (lane l: group 4 (l % 4) + l / 4), else group order; the same values
  template <bool GEMV = false>
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m512& s, __m512& o) {
    const uint8_t* b = row + sb * TS;
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    if (GEMV) x = _mm_shuffle_epi8(x, _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
    s = _mm512_mul_ps(_mm512_set1_ps(f16(b + 208)), sc);
    o = _mm512_mul_ps(s, _mm512_set1_ps(-32.0f));
    return 4;
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t) {
    // half h = c / 2 holds weights 128h + (0..127): low nibbles of ql[64h..] are 0..63, high 64..127;
    // the 2-bit highs of weight 128h + 32s + l sit at bits 2s of qh[32h + l]
    const uint8_t* b = row + sb * TS;
    const int h = c >> 1;
    __m512i ql = _mm512_loadu_si512(b + 64 * h);
    __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
    __m512i qh2 = join(qh, _mm256_srli_epi16(qh, 2));
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    if (c & 1) {
      ql = _mm512_srli_epi16(ql, 4);
      qh2 = _mm512_srli_epi16(qh2, 4);
    }
    return _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(qh2, m2), 4));
  }
};

struct TIQ4_XS : KQuant, FIQ4_XS {  // 8 groups of 32, codes through the codebook (TIQ4_NL)
  static constexpr Order order = Order::lanes;  // Q4_K's lane order (gemv_groups.h grouped_codes<TIQ4_XS>)
  // per 16 weights d * (ls - 32) (as gguf-py rounds it) in group order, or (LANES) in the GEMV's lane order:
  // lane l's group LANE_GROUP[l] is in 32-group LANE_GROUP[l] / 2
  template <bool LANES = false>
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m512& s, __m512& o) {
    const uint8_t* b = row + sb * TS;
    const __m512i j = LANES ? _mm512_setr_epi32(0, 1, 4, 5, 0, 1, 4, 5, 2, 3, 6, 7, 2, 3, 6, 7)
                            : _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(u32(b + 4))), _mm512_slli_epi32(j, 2)),
                                        _mm512_set1_epi32(0x0F));  // nibble j of scales_l
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(u32(b) >> 16)), _mm512_add_epi32(j, j)),
                                        _mm512_set1_epi32(3));  // bits 2j of scales_h
    const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    s = _mm512_mul_ps(_mm512_set1_ps(f16(b)), _mm512_cvtepi32_ps(ls));
    o = _mm512_mul_ps(s, _mm512_set1_ps(-static_cast<float>(C)));
    return 4;
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t) {  // groups 2c, 2c + 1
    const uint8_t* qs = row + sb * TS + QS + 32 * c;
    return _mm512_shuffle_epi8(IQ4_CODES, join(nibbles32(qs), nibbles32(qs + 16)));
  }
};

struct TQ2_K : KQuant, FQ2_K {
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m512& s, __m512& o) {
    const uint8_t* b = row + sb * TS;
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    s = _mm512_mul_ps(_mm512_set1_ps(f16(b + 80)), bytes_to_ps(_mm_and_si128(x, m4)));
    o = _mm512_mul_ps(_mm512_set1_ps(-f16(b + 82)), bytes_to_ps(_mm_and_si128(_mm_srli_epi16(x, 4), m4)));
    return 4;
  }
  static __m512i low2(const uint8_t* qs, int c) {
    __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (c >> 1)));
    x = _mm256_srli_epi16(x, 4 * (c & 1));
    const __m256i m2 = _mm256_set1_epi8(3);
    return join(_mm256_and_si256(x, m2), _mm256_and_si256(_mm256_srli_epi16(x, 2), m2));
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t) {
    return low2(row + sb * TS + 16, c);
  }
};

struct TQ3_K : KQuant, FQ3_K {
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m512& s, __m512& o) {
    const uint8_t* b = row + sb * TS;
    alignas(64) float sc[16];
    q3k_scales(b + SC, sc);
    s = _mm512_mul_ps(_mm512_set1_ps(f16(b + 108)), _mm512_load_ps(sc));
    o = _mm512_mul_ps(s, _mm512_set1_ps(-4.0f));
    return 4;
  }
  static __m512i codes(const uint8_t* row, int64_t sb, int c, int64_t) {
    const uint8_t* b = row + sb * TS;
    __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
    return _mm512_or_si512(TQ2_K::low2(b + 32, c), _mm512_maskz_set1_epi8(bit_pair(hm, c), 4));
  }
};

// ---- activations ----

struct Layout {  // M rows, each padded with zeros to Kp = K rounded up to 256
  int8_t* q = nullptr;  // [M][Kp]
  float* d16 = nullptr;  // [M][Kp/16]: the scale of each 16 codes (shared by a 32-block's halves unless scale16)
  float* a16 = nullptr;  // [M][Kp/16]: d * (sum of those 16 codes)
};

struct Act {
  int64_t M = 0, K = 0, Kp = 0;
  Layout natural, paired;  // paired: the chunk order of the 32-wide block types
  // natural's codes in the GEMV's group order and in its transposed order (Order), where natural holds its
  // lane order (group_codes: for the types that read them, beside Q4_K's lanes in one fused matrix)
  Layout grouped, transposed;
  // these four with the rows interleaved per superblock (codes [Kp / 256][M][256], d16 and a16 [Kp / 256][M][16]):
  // what the GEMV's wide passes read (gemv_wide.h by_superblock), else null
  Layout wide[4];
  const Layout& get(bool p) const { return p ? paired : natural; }
  // layout i (gemv_layout<T>(): the one T's GEMV reads) of the plain ones or of the wide ones
  const Layout& gemv(int i, bool wide_rows = false) const {
    const Layout* plain[4] = {&natural, &paired, &grouped, &transposed};
    return wide_rows ? wide[i] : *plain[i];
  }
};

thread_local std::vector<uint8_t> act_buf;

// Lane j = v[j]'s 16 lanes reduced by op (max or add: exact in any order): a 4-level tree of
// shuffles, 15 ops for 16 vectors where 16 reductions of their own take 64 shuffles and 64 ops
template <class Op>
inline __m512 reduce16(const __m512* v, Op op) {
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i)  // 128-bit chunks [a0 a2, a1 a3, b0 b2, b1 b3]: 8 partials of v[2i], then of v[2i + 1]
    t[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)  // chunk c: 4 partials of v[4i + c]
    u[i] = op(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i)  // chunk c: 2 partials of v[8i + c], 2 of v[8i + 4 + c]
    w[i] = op(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 r = op(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),  // lane 4c + k: v[4k + c]
                      _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

// 256 values of a row -> their 16 groups' codes, d16 and a16 (natural layout, a scale per 16): the
// scalar loop's values (the same divisions, roundings and exact sums), 16 groups at a time
inline void quantize256_scale16(const float* x, int8_t* q, float* d16, float* a16) {
  __m512 v[16], a[16];
  for (int j = 0; j < 16; ++j) v[j] = _mm512_loadu_ps(x + 16 * j), a[j] = _mm512_abs_ps(v[j]);
  const __m512 amax = reduce16(a, [](__m512 p, __m512 q) { return _mm512_max_ps(p, q); });
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ),
                                        _mm512_set1_ps(127.0f), amax);
  alignas(64) float ids[16];
  _mm512_store_ps(ids, id);
  __m512 iq[16];
  for (int j = 0; j < 16; ++j) {
    const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v[j], _mm512_set1_ps(ids[j])));  // nearest even
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * j), _mm512_cvtsepi32_epi8(qi));
    iq[j] = _mm512_castsi512_ps(qi);
  }
  const __m512 sums = reduce16(iq, [](__m512 p, __m512 q) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_castps_si512(q)));
  });
  _mm512_storeu_ps(d16, d);
  _mm512_storeu_ps(a16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_castps_si512(sums))));
}

// The buffers of M rows' q8 blocks in the layouts wanted (zeroed: the padding past K stays zero);
// quantize_row fills them a row at a time (on any thread: a row's values depend on that row alone)
Act quantize_layout(int64_t M, int64_t K, bool want_natural, bool want_paired) {
  Act a;
  a.M = M, a.K = K, a.Kp = (K + SB - 1) / SB * SB;
  const int64_t g = a.Kp / 16;
  const size_t per = static_cast<size_t>(M) * (a.Kp + 2 * g * sizeof(float));
  const size_t need = 2 * per + 64;
  if (act_buf.size() < need) act_buf.resize(need);
  // from a 64-byte boundary (the +64 above): malloc gives 16 (a prefill-sized buffer is mmap'd: 16 past a
  // page), and every 64-byte load of the codes would span two cache lines. Measured on the 1.5B's MLP
  // after a prefill-sized call, one thread: the GEMV at 4-8 rows 0.80-0.88x the time, 1 row ~0.97x
  uint8_t* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(act_buf.data()) + 63) & ~uintptr_t{63});
  Layout* outs[2] = {want_natural ? &a.natural : nullptr, want_paired ? &a.paired : nullptr};
  for (Layout* l : outs) {
    if (!l) continue;
    l->d16 = reinterpret_cast<float*>(p);
    l->a16 = l->d16 + M * g;
    l->q = reinterpret_cast<int8_t*>(l->a16 + M * g);
    p += per;
    std::memset(l->d16, 0, per);
  }
  return a;
}

// row m (xr: its K values) -> q8 blocks; half-block h (16 values) lands at 16 * dst(h) in each layout
// quantize_layout made (a.natural.q / a.paired.q set). scale16: a scale per 16 values (finer than
// ggml's per 32, so less rounding; the VNNI loop applies d16 per 16 either way), else one per 32 for
// both halves (what the AMX tile path's 32-wide K steps need)
inline void quantize_row(const Act& a, const float* xr, int64_t m, bool scale16) {
  const int64_t K = a.K, g = a.Kp / 16;
  const Layout* outs[2] = {a.natural.q ? &a.natural : nullptr, a.paired.q ? &a.paired : nullptr};
  int64_t b = 0;
  // the VNNI GEMM's and the GEMV's layout: 256 values at a time (Zen 4, K = 1536: 0.35 -> 0.20 ns a value)
  if (scale16 && outs[0] && !outs[1])
    for (; b + 8 <= K / 32; b += 8)
      quantize256_scale16(xr + 32 * b, a.natural.q + m * a.Kp + 32 * b, a.natural.d16 + m * g + 2 * b,
                          a.natural.a16 + m * g + 2 * b);
  for (; b < K / 32; ++b) {
    __m512 v[2] = {_mm512_loadu_ps(xr + 32 * b), _mm512_loadu_ps(xr + 32 * b + 16)};
    const __m512 a0 = _mm512_abs_ps(v[0]), a1 = _mm512_abs_ps(v[1]);
    const float both = scale16 ? 0.0f : _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    for (int h = 0; h < 2; ++h) {
      const float amax = scale16 ? _mm512_reduce_max_ps(h ? a1 : a0) : both;
      const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m512i iq = _mm512_cvtps_epi32(_mm512_mul_ps(v[h], _mm512_set1_ps(id)));  // nearest even
      const __m128i q8 = _mm512_cvtsepi32_epi8(iq);
      const float sum = d * static_cast<float>(_mm512_reduce_add_epi32(iq));
      // half-block index in each layout: natural 2b + h; paired (64-chunk of block pair b / 2)
      const int64_t idx[2] = {2 * b + h, 4 * (b >> 1) + 2 * h + (b & 1)};
      for (int li = 0; li < 2; ++li) {
        if (!outs[li]) continue;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(outs[li]->q + m * a.Kp + 16 * idx[li]), q8);
        outs[li]->d16[m * g + idx[li]] = d;
        outs[li]->a16[m * g + idx[li]] = sum;
      }
    }
  }
}

// rows of x -> q8 blocks (quantize_layout, then quantize_row for every row)
Act quantize(const float* x, int64_t M, int64_t K, int64_t ldx, bool want_natural, bool want_paired,
             bool scale16 = false) {
  const Act a = quantize_layout(M, K, want_natural, want_paired);
#pragma omp parallel for schedule(static) if (M >= 64)  // a prefill's rows (each row alone: same values)
  for (int64_t m = 0; m < M; ++m) quantize_row(a, x + m * ldx, m, scale16);
  return a;
}

#include "gemv_groups.h"  // after the block types and Act: the GEMV's group order
#include "gemv_vnni.h"  // after the block types, Act and the GEMV's order: dot_row, rows_dot
#include "dequant.h"

}  // namespace
