// The codebook formats (gguf_formats.h: IQ4_NL, IQ4_XS, MXFP4) for the avx2 tier: each 4-bit index becomes
// its int8 codebook value by one vpshufb (per 128-bit lane in AVX2, so the 16-entry table sits in both),
// read as signed codes with C = 0 (B32's Q8_0 way: |w| x sign(w) x in vpmaddubsw), so no offsets. The
// AVX-512 tier reads the same values + 128 as unsigned codes (blocks.h IQ4_CODES); here the signed
// values keep MXFP4's |code| <= 12, so its pairs add in int16 as 4-bit codes do (hadd16_levels,
// gemm_chain). Included by blocks_avx2.h after the block types it builds on.
#pragma once

// kvalues_iq4nl (ggml-common.h) in both 128-bit lanes
inline __m256i iq4_book() {
  return _mm256_broadcastsi128_si256(_mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
}

// kvalues_mxfp4: the E2M1 values doubled (0 1 2 3 4 6 8 12, then their negatives), in both lanes
inline __m256i mxfp4_book() {
  return _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
}

// 16 bytes of indices -> 32 int8 values (low nibbles weights 0-15, high 16-31)
inline __m256i book_codes(__m256i book, const uint8_t* qs) { return _mm256_shuffle_epi8(book, nibbles32(qs)); }

// IQ4_NL: B32's f16 d per block, codes through the codebook
struct IQ4NL32 : B32<FIQ4_NL> {
  static constexpr int OFFSETS = 0;  // C = 0: lanes_dot adds no offsets
  static __m256i codes(const uint8_t* row, int64_t sb, int j) { return book_codes(iq4_book(), row + (sb * 8 + j) * TS + FIQ4_NL::QS); }
};

// 8 E8M0 bytes (each dword's low byte) -> 2^(e - 128) as ggml_e8m0_to_fp32_half builds it from its bits
// (e < 2: the f32 subnormals 2^-128, 2^-127); blocks.h block_scales8's with AVX2's compares
inline __m256 e8m0_half8(__m256i g) {
  const __m256i e = _mm256_and_si256(g, _mm256_set1_epi32(0xFF));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, tiny, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

// MXFP4 (gpt-oss's experts): IQ4_NL's layout under a power-of-two scale (the E8M0 byte), codes |q| <= 12
struct MX32 : B32<FMXFP4> {
  static constexpr int QMAX = 12;  // largest |code|: vpmaddubsw pairs add in int16 (gemv_avx2.h, gemm_avx2.h)
  static constexpr int OFFSETS = 0;
  static __m256 block_scales(const uint8_t* row, int64_t sb, int64_t nb, int& n) {
    const int64_t b0 = sb * 8;
    n = static_cast<int>(std::min<int64_t>(8, nb - b0));
    const uint8_t* b = row + b0 * TS;
    auto e = [&](int i) { return i < n ? static_cast<int>(b[i * TS]) : 0; };  // a missing block: zero codes
    return e8m0_half8(_mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7)));
  }
  static int scales(const uint8_t* row, int64_t sb, int64_t nb, __m256* s, __m256* o) {
    int n;
    const __m256 d8 = block_scales(row, sb, nb, n);
    s[0] = dup2_lo(d8), s[1] = dup2_hi(d8), o[0] = o[1] = _mm256_setzero_ps();
    return n;
  }
  static int lanes(const uint8_t* row, int64_t sb, int64_t nb, __m256* s, __m256* o) {
    int n;
    pairs_to_lanes(block_scales(row, sb, nb, n), s);
    o[0] = _mm256_setzero_ps();
    return n;
  }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) { return book_codes(mxfp4_book(), row + (sb * 8 + j) * TS + FMXFP4::QS); }
};

// IQ4_XS: a superblock of 8 groups of 32, group j's scale d * (ls_j - 32) (as gguf-py rounds it), its
// codes IQ4_NL's from the 16 bytes at QS + 16 j
struct IQ4XS : FIQ4_XS {
  static constexpr bool SIGNED = true, WORDS = false;
  static constexpr int C = 0, QMAX = 128, OFFSETS = 0;
  static __m256 group_scales(const uint8_t* b) {  // ls_j: nibble j of scales_l | bits 2j of scales_h << 4
    const __m256i j = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(u32(b + 4))), _mm256_slli_epi32(j, 2)),
                                        _mm256_set1_epi32(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(u32(b) >> 16)), _mm256_add_epi32(j, j)),
                                        _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_set1_ps(f16(b)), _mm256_cvtepi32_ps(ls));
  }
  static int scales(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) {
    const __m256 s8 = group_scales(row + sb * TS);
    s[0] = dup2_lo(s8), s[1] = dup2_hi(s8), o[0] = o[1] = _mm256_setzero_ps();
    return 8;
  }
  static int lanes(const uint8_t* row, int64_t sb, int64_t, __m256* s, __m256* o) {
    pairs_to_lanes(group_scales(row + sb * TS), s);
    o[0] = _mm256_setzero_ps();
    return 8;
  }
  static __m256i codes(const uint8_t* row, int64_t sb, int j) { return book_codes(iq4_book(), row + sb * TS + QS + 16 * j); }
};
