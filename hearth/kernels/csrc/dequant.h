// AVX-512 dequantization of the block formats (blocks.h), bit-exact with gguf-py: a row to f32 or
// bf16, and to bf16 by table where AVX512-BF16 is usable. Included by blocks.h after the block types,
// inside its namespace.
#pragma once

inline __m256i to_bf16(__m512 v) {  // round to nearest even, like torch's .to(torch.bfloat16)
  __m512i u = _mm512_castps_si512(v);
  __m512i r = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7FFF));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(u, r), 16));
}

inline void store16(float* out, __m512 v) { _mm512_storeu_ps(out, v); }
inline void store16(uint16_t* out, __m512 v) {  // as bf16
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), to_bf16(v));
}

// a row of K weights -> out: f32, or bf16 (rounded to nearest even). Weights 32 j .. 32 j + 31 go to
// out + s32 j: contiguous by default, or a row of bf16 tiles (s32 = 512).
template <class T, class Out>
void dequant_row(const uint8_t* row, int64_t K, int64_t nb, Out* out, int64_t s32 = 32) {
  alignas(64) float s16[16], o16[16];
  const __m512 cz = _mm512_set1_ps(static_cast<float>(T::C));
  for (int64_t sb = 0; sb < (K + SB - 1) / SB; ++sb) {
    __m512 vs, vo;
    const int nch = T::scales(row, sb, nb, vs, vo);
    _mm512_store_ps(s16, vs);
    _mm512_store_ps(o16, vo);
    for (int c = 0; c < nch; ++c) {
      alignas(64) uint8_t q[64];
      _mm512_store_si512(q, T::codes(row, sb, c, nb));
      for (int k = 0; k < 4; ++k) {
        const int64_t at = sb * SB + T::pos(c, k);
        if (at >= K) continue;
        __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 16 * k))));
        const __m512 s = _mm512_set1_ps(s16[4 * c + k]);
        v = T::sym ? _mm512_mul_ps(s, _mm512_sub_ps(v, cz)) : _mm512_add_ps(_mm512_mul_ps(s, v), _mm512_set1_ps(o16[4 * c + k]));
        store16(out + at / 32 * s32 + at % 32, v);
      }
    }
  }
}

// 32 weights by table: codes (natural order) pick from lo (codes 0-15) and hi (16-31), rounded to bf16
inline void table_store(__m512 lo, __m512 hi, __m256i codes, uint16_t* dst) {
  const __m512i table = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
  _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(codes), table));
}

const __m512 LANES = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
const __m512 LANES_HI = _mm512_add_ps(LANES, _mm512_set1_ps(16.0f));

// A row of a 4- or 5-bit type whose scales cover 32 weights (Q4_0/Q4_1/Q5_0/Q5_1, Q4_K/Q5_K) -> bf16
// by table: per 32 weights the (at most 32) values their codes can take, computed as dequant_row
// computes them, are rounded to bf16 once and the codes pick from them (a permute per 32 weights
// instead of a conversion per 16: the prefill expands every weight per call). Needs AVX512-BF16:
// callers check amx_bf16_usable(). Output as dequant_row's.
template <class T>
void dequant_row_bf16_table(const uint8_t* row, int64_t K, int64_t nb, uint16_t* out, int64_t s32 = 32) {
  if constexpr (T::paired) {
    using B = typename T::Type;
    static_assert(B::LEVELS <= 32, "codes must index a 32-entry table");
    const __m512 cz = _mm512_set1_ps(static_cast<float>(B::C));
    const __m512 v_lo = B::sym ? _mm512_sub_ps(LANES, cz) : LANES, v_hi = B::sym ? _mm512_sub_ps(LANES_HI, cz) : LANES_HI;
    auto block = [&](const uint8_t* b, __m256i codes, uint16_t* dst) {
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(static_cast<uint16_t>(u32(b))));
      __m512 lo = _mm512_mul_ps(d, v_lo), hi = _mm512_mul_ps(d, v_hi);
      if (!B::sym) {
        const __m512 m = _mm512_set1_ps(_cvtsh_ss(static_cast<uint16_t>(u32(b) >> 16)));
        lo = _mm512_add_ps(lo, m), hi = _mm512_add_ps(hi, m);
      }
      table_store(lo, hi, codes, dst);
    };
    for (int64_t b = 0; b < nb; b += 2) {  // codes of two blocks: [b w0-15, b+1 w0-15, b w16-31, b+1 w16-31]
      const uint8_t* b0 = row + b * B::TS;
      const __m512i q = B::codes(b0, b + 1 < nb ? b0 + B::TS : ZERO_BLOCK);
      block(b0, _mm512_castsi512_si256(_mm512_shuffle_i64x2(q, q, 0x08)), out + s32 * b);  // lanes 0, 2
      if (b + 1 < nb) block(b0 + B::TS, _mm512_castsi512_si256(_mm512_shuffle_i64x2(q, q, 0x0D)), out + s32 * (b + 1));
    }
  } else {
    static_assert(T::LEVELS > 0 && T::LEVELS <= 32, "codes must index a 32-entry table");
    for (int64_t sb = 0; sb < K / SB; ++sb) {
      __m512 vs, vo;
      const int nch = T::scales(row, sb, nb, vs, vo);
      for (int c = 0; c < nch; ++c) {  // 64 weights: the first 32 (groups 4c, 4c + 1) share a scale, so do the next
        const __m512i q = T::codes(row, sb, c, nb);
        auto half = [&](__m256i codes, int g, uint16_t* dst) {
          const __m512i at = _mm512_set1_epi32(g);
          const __m512 s = _mm512_permutexvar_ps(at, vs), o = _mm512_permutexvar_ps(at, vo);
          table_store(_mm512_add_ps(_mm512_mul_ps(s, LANES), o), _mm512_add_ps(_mm512_mul_ps(s, LANES_HI), o), codes, dst);
        };
        half(_mm512_castsi512_si256(q), 4 * c, out + s32 * (sb * SB / 32 + 2 * c));
        half(_mm512_extracti64x4_epi64(q, 1), 4 * c + 2, out + s32 * (sb * SB / 32 + 2 * c + 1));
      }
    }
  }
}
