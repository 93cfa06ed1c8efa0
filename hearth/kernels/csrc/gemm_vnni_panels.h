// Half a VNNI panel (16 output features, gemm_vnni.h's layout) straight from 16 weight rows' blocks,
// instead of every row unpacked to a staging row and the codes and scales transposed 16 x 16
// (vnni_row + vnni_half): the packed bytes are transposed, a dword of each row per vector, and split
// into codes where they lie; the scales are computed for 16 rows at once. Half the bytes (or fewer) go
// through the shuffles, and nothing through a staging buffer. Every function here yields the same
// codes, scales and offsets as the staging path, value for value (blocks.h's unpackers, the same f32
// products): tests/kernels/test_native_gemm.py compares the two paths' outputs bit for bit.
// rows[i]: feature 16 h + i; nb: blocks per row.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "blocks.h"
#include "gemm_vnni.h"

namespace {

// t[q], lane i: dword q of the 16 bytes at rows[i] + off (q < 4)
inline void dwords16x4(const uint8_t* const rows[16], int64_t off, __m512i t[4]) {
  __m512i z[4];  // z[j]: the 16 bytes of rows 4j .. 4j + 3, one per 128-bit lane
  for (int j = 0; j < 4; ++j) {
    const uint8_t* const* r = rows + 4 * j;
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[1] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[2] + off)), 2);
    z[j] = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[3] + off)), 3);
  }
  for (int q = 0; q < 4; ++q) {  // lane i: 4 (i % 8) + q of z[0] | z[1], then of z[2] | z[3]
    const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
                                         _mm512_set1_epi32(q));
    t[q] = _mm512_mask_blend_epi32(0xFF00, _mm512_permutex2var_epi32(z[0], idx, z[1]),
                                   _mm512_permutex2var_epi32(z[2], idx, z[3]));
  }
}

// t[q], lane i: dword q of the 32 bytes at rows[i] + off (q < 8): 16 rows x 8 dwords transposed in
// three rounds of permutes (rows 4 at a time, then 8, then 16)
inline void dwords16x8(const uint8_t* const rows[16], int64_t off, __m512i t[8]) {
  const __m512i r8 = _mm512_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24);
  const __m512i q4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  __m512i z[8];  // z[j]: rows 2j, 2j + 1 (dwords 0-7 each)
  for (int j = 0; j < 8; ++j)
    z[j] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[2 * j] + off))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[2 * j + 1] + off)), 1);
  __m512i a[4][2];  // a[j][x]: rows 4j .. 4j + 3, dwords 4x .. 4x + 3, at 4 (dword % 4) + row % 4
  for (int j = 0; j < 4; ++j)
    for (int x = 0; x < 2; ++x)
      a[j][x] = _mm512_permutex2var_epi32(z[2 * j], _mm512_add_epi32(r8, _mm512_add_epi32(q4, _mm512_set1_epi32(4 * x))),
                                          z[2 * j + 1]);
  for (int x = 0; x < 2; ++x)
    for (int y = 0; y < 2; ++y) {  // lo, hi: rows 0-7, 8-15, dwords 4x + 2y + u (u = 0, 1) at 8u + row % 8
      const __m512i i2 = _mm512_setr_epi32(8 * y, 8 * y + 1, 8 * y + 2, 8 * y + 3, 16 + 8 * y, 17 + 8 * y, 18 + 8 * y,
                                           19 + 8 * y, 8 * y + 4, 8 * y + 5, 8 * y + 6, 8 * y + 7, 20 + 8 * y, 21 + 8 * y,
                                           22 + 8 * y, 23 + 8 * y);
      const __m512i lo = _mm512_permutex2var_epi32(a[0][x], i2, a[1][x]), hi = _mm512_permutex2var_epi32(a[2][x], i2, a[3][x]);
      for (int u = 0; u < 2; ++u) {  // dword q: rows 0-7 from lo, 8-15 from hi
        const __m512i i3 = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                                            _mm512_set1_epi32(8 * u));
        t[4 * x + 2 * y + u] = _mm512_permutex2var_epi32(lo, i3, hi);
      }
    }
}

// lane i: the dword at rows[i] + off (scalar loads, not a gather: Blocks32::scales says why)
inline __m512i dword_of_rows(const uint8_t* const rows[16], int64_t off) {
  alignas(64) int32_t v[16];
  for (int i = 0; i < 16; ++i) v[i] = static_cast<int32_t>(u32(rows[i] + off));
  return _mm512_load_si512(v);
}

inline void store_code(const VnniPanel& p, int64_t quad, int h, __m512i v) {
  _mm512_store_si512(p.codes + 128 * quad + 64 * h, v);
}

// group g's scales and offsets of 16 features (half h)
inline void store_group(const VnniPanel& p, int64_t g, int h, __m512 s, __m512 o) {
  _mm512_store_ps(p.s + VNNI_PANEL * g + 16 * h, s);
  _mm512_store_ps(p.o + VNNI_PANEL * g + 16 * h, o);
}

inline __m512 flip_sign(__m512 v) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN))); }

// ---- 32-wide blocks ----

// Block b's scale and offset for 16 rows, stored for both its groups of 16: each row's f16 d (and m)
// is its block's first dword; o = -C s for the symmetric types, as Blocks32::scales computes it
template <class F>
void vnni_half_scales(const uint8_t* const rows[16], int64_t off, int64_t b, int h, const VnniPanel& p) {
  const __m512i g = dword_of_rows(rows, off);
  const __m512 s = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
  __m512 o;
  if constexpr (F::sym) {
    o = _mm512_mul_ps(s, _mm512_set1_ps(-static_cast<float>(F::C)));
  } else {
    o = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
  }
  for (int k = 0; k < 2; ++k) store_group(p, 2 * b + k, h, s, o);  // the block's two groups of 16
}

// 4- and 5-bit blocks (Q4_0, Q4_1, Q5_0, Q5_1): one dword of a row's qs holds 8 codes, its 4 low
// nibbles weights 4q .. 4q + 3, its 4 high ones 16 + 4q ..; the 5-bit types' bit l of qh (weight l)
// is added as 16 where set (byte j / 2 of each row's qh broadcast to the quad's 4 bytes and tested
// against bits 4 (j % 2) .. + 3)
template <class F>
void vnni_half_q4(const uint8_t* const rows[16], int64_t nb, int h, const VnniPanel& p) {
  static_assert(F::LEVELS == 16 || F::LEVELS == 32, "4-bit codes (and a fifth bit)");
  const __m512i m4 = _mm512_set1_epi8(0x0F), x10 = _mm512_set1_epi8(0x10);
  const __m512i lane_dw = _mm512_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808, 0x0C0C0C0C,
                                            0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808, 0x0C0C0C0C);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t off = b * F::TS;
    __m512i t[4], qh = _mm512_setzero_si512();
    dwords16x4(rows, off + F::QS, t);
    if constexpr (F::QH >= 0) qh = dword_of_rows(rows, off + F::QH);
    auto with_high = [&](__m512i v, int j) {  // quad j (weights 4j .. 4j + 3) of the block
      if constexpr (F::QH >= 0) {
        const __m512i bytes = _mm512_shuffle_epi8(qh, _mm512_add_epi32(lane_dw, _mm512_set1_epi32(0x01010101 * (j >> 1))));
        const __mmask64 set = _mm512_test_epi8_mask(bytes, _mm512_set1_epi32(j & 1 ? 0x80402010 : 0x08040201));
        v = _mm512_mask_add_epi8(v, set, v, x10);
      }
      return v;
    };
    for (int q = 0; q < 4; ++q) {
      store_code(p, 8 * b + q, h, with_high(_mm512_and_si512(t[q], m4), q));
      store_code(p, 8 * b + 4 + q, h, with_high(_mm512_and_si512(_mm512_srli_epi16(t[q], 4), m4), 4 + q));
    }
    vnni_half_scales<F>(rows, off, b, h, p);
  }
}

// Q8_0 (codes: the int8 weights with the sign bit flipped, as TQ8_0): a row's 32 bytes of a block
// are 8 dwords of 4 codes
template <class F>
void vnni_half_q8(const uint8_t* const rows[16], int64_t nb, int h, const VnniPanel& p) {
  static_assert(F::LEVELS == 256, "8-bit codes");
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t off = b * F::TS;
    __m512i t[8];
    dwords16x8(rows, off + F::QS, t);
    for (int q = 0; q < 8; ++q) store_code(p, 8 * b + q, h, _mm512_xor_si512(t[q], flip));
    vnni_half_scales<F>(rows, off, b, h, p);
  }
}

// ---- k-quants (layouts: gguf_formats.h) ----

// Q4_K/Q5_K superblock sb's scales for 16 rows (d dmin scales[12]: the first 16 bytes): the 8 six-bit
// scales and mins unpacked as k4_scale_bytes does, per 4 rows' bytes at once, then s = d sc and
// o = (-dmin) mn as k4_scales multiplies them; each stored for both groups of 16 of its 32 weights
template <class F>
void vnni_half_k4_scales(const uint8_t* const rows[16], int64_t off, int64_t sb, int h, const VnniPanel& p) {
  __m512i t[4];
  dwords16x4(rows, off, t);  // t[0]: d | dmin << 16; t[1..3]: the scale bytes' dwords a0, a1, a2
  const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(t[0]));
  const __m512 ndmin = flip_sign(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(t[0], 16))));
  const __m512i m6 = _mm512_set1_epi8(0x3F), m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
  auto high = [&](__m512i lo4, __m512i top2) {  // groups 4-7: 4 low bits from a2, 2 high bits from the top of a0 (a1)
    return _mm512_or_si512(lo4, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(top2, 6), m2), 4));
  };
  const __m512i sc[2] = {_mm512_and_si512(t[1], m6), high(_mm512_and_si512(t[3], m4), t[1])};
  const __m512i mn[2] = {_mm512_and_si512(t[2], m6), high(_mm512_and_si512(_mm512_srli_epi32(t[3], 4), m4), t[2])};
  for (int j = 0; j < 8; ++j) {
    auto byte = [&](__m512i v) {  // byte j % 4 of each lane, as f32
      return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, 8 * (j & 3)), _mm512_set1_epi32(0xFF)));
    };
    const __m512 s = _mm512_mul_ps(d, byte(sc[j >> 2])), o = _mm512_mul_ps(ndmin, byte(mn[j >> 2]));
    for (int k = 0; k < 2; ++k) store_group(p, 16 * sb + 2 * j + k, h, s, o);
  }
}

// Q4_K, Q5_K: chunk c's 32 bytes of qs hold weights 64c + l (low nibbles) and 64c + 32 + l (high);
// Q5_K's bit 2c (2c + 1) of qh[l] is the fifth bit of the first (second) one, added as 16
template <class F>
void vnni_half_k4(const uint8_t* const rows[16], int64_t nb, int h, const VnniPanel& p) {
  constexpr bool fifth = F::LEVELS == 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m1 = _mm512_set1_epi8(0x01);
  for (int64_t sb = 0; sb < nb; ++sb) {
    const int64_t off = sb * F::TS;
    __m512i qh[8];
    if constexpr (fifth) dwords16x8(rows, off + F::QH, qh);
    for (int c = 0; c < 4; ++c) {
      __m512i t[8];
      dwords16x8(rows, off + F::QS + 32 * c, t);
      for (int q = 0; q < 8; ++q) {
        __m512i lo = _mm512_and_si512(t[q], m4), hi = _mm512_and_si512(_mm512_srli_epi16(t[q], 4), m4);
        if constexpr (fifth) {
          lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[q], 2 * c), m1), 4));
          hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[q], 2 * c + 1), m1), 4));
        }
        store_code(p, 64 * sb + 16 * c + q, h, lo);
        store_code(p, 64 * sb + 16 * c + 8 + q, h, hi);
      }
    }
    vnni_half_k4_scales<F>(rows, off, sb, h, p);
  }
}

// Q6_K: weight 128 u + 32 s + l takes nibble s / 2 of ql[64 u + 32 (s % 2) + l] and bits 2s, 2s + 1 of
// qh[32 u + l] (q = low | high << 4, as TQ6_K::codes); s = d sc per 16 weights (int8 sc), o = -32 s
template <class F>
void vnni_half_q6k(const uint8_t* const rows[16], int64_t nb, int h, const VnniPanel& p) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
  for (int64_t sb = 0; sb < nb; ++sb) {
    const int64_t off = sb * F::TS;
    for (int u = 0; u < 2; ++u) {
      __m512i qh[8];
      dwords16x8(rows, off + F::QH + 32 * u, qh);
      for (int s2 = 0; s2 < 2; ++s2) {  // ql's 32 bytes for s = s2 (low nibbles) and s2 + 2 (high)
        __m512i t[8];
        dwords16x8(rows, off + F::QL + 64 * u + 32 * s2, t);
        for (int q = 0; q < 8; ++q) {
          for (int s = s2; s < 4; s += 2) {
            const __m512i low = _mm512_and_si512(s < 2 ? t[q] : _mm512_srli_epi16(t[q], 4), m4);
            const __m512i top = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh[q], 2 * s), m2), 4);
            store_code(p, 64 * sb + 32 * u + 8 * s + q, h, _mm512_or_si512(low, top));
          }
        }
      }
    }
    __m512i sc[4];
    dwords16x4(rows, off + F::SC, sc);  // int8 scales 4q .. 4q + 3
    alignas(32) uint16_t dh[16];
    for (int i = 0; i < 16; ++i) std::memcpy(dh + i, rows[i] + off + F::D, 2);
    const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
    for (int g = 0; g < 16; ++g) {  // byte g % 4 of sc[g / 4], sign-extended
      const __m512i v = _mm512_srai_epi32(_mm512_slli_epi32(sc[g >> 2], 24 - 8 * (g & 3)), 24);
      const __m512 s = _mm512_mul_ps(d, _mm512_cvtepi32_ps(v));
      store_group(p, 16 * sb + g, h, s, _mm512_mul_ps(s, _mm512_set1_ps(-32.0f)));
    }
  }
}

// 32-wide blocks of codebook indices (IQ4_NL, MXFP4): read through T::codes, not by the builders above
template <class T>
constexpr bool codebook_blocks() {
  if constexpr (T::paired) {
    return std::is_base_of_v<FIQ4_NL, typename T::Type> || std::is_base_of_v<FMXFP4, typename T::Type>;
  } else {
    return false;
  }
}

// Which of the above builds a half of type T's panels (T: dispatch's types); false: none (the
// staging path: Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4)
template <class T>
struct VnniDirect {
  // a function of its own per type, not inlined into gemm_vnni's loop (inlined, all of them made that
  // loop's body ~25 KB and the Q4_1 halves ~3% slower)
  __attribute__((noinline)) static void run(const uint8_t* const rows[16], int64_t nb, int h, const VnniPanel& p, bool& done) {
    done = true;
    if constexpr (codebook_blocks<T>()) {
      done = false;  // codebook codes: the staging path reads them through T::codes
    } else if constexpr (T::paired) {
      using F = typename T::Type;
      if constexpr (F::LEVELS == 256) {
        vnni_half_q8<F>(rows, nb, h, p);
      } else {
        vnni_half_q4<F>(rows, nb, h, p);
      }
    } else if constexpr (std::is_base_of_v<FQ4_K, T> || std::is_base_of_v<FQ5_K, T>) {
      vnni_half_k4<T>(rows, nb, h, p);
    } else if constexpr (std::is_base_of_v<FQ6_K, T>) {
      vnni_half_q6k<T>(rows, nb, h, p);
    } else {
      done = false;
    }
  }
};

// A type's block bytes (ts) and weights per block (width) where the builders above take it; width 0
// where they do not (the staging path's types)
template <class T>
struct VnniBlockShape {
  static void run(int& ts, int& width) {
    if constexpr (T::paired) {
      ts = T::Type::TS, width = codebook_blocks<T>() ? 0 : 32;
    } else {
      constexpr bool direct = std::is_base_of_v<FQ4_K, T> || std::is_base_of_v<FQ5_K, T> || std::is_base_of_v<FQ6_K, T>;
      ts = T::TS, width = direct ? SB : 0;
    }
  }
};

}  // namespace
