// The GGUF block formats, width-independent: type ids, block sizes, where each field sits and how the
// packed scales unpack. Every tier's kernels (blocks.h for AVX-512, blocks_avx2.h, blocks_neon.h) derive their
// unpackers from these records; the avx2 and neon ones unpack the scales with these functions, AVX-512
// unpacks the same fields in its own layouts (a row's groups by byte shuffles, blocks.h k4_scales; 16
// rows as lanes, gemm_vnni_panels.h), held to the same values by the kernels' tests.
// A weight is read as an unsigned code q in the affine form w = s * q + o (sym: w = s * (q - C)),
// hearth/layers/quant.py's form, ggml's block layouts (ggml-common.h).
#pragma once

#if defined(__aarch64__)
#include <arm_neon.h>
#else
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace {

constexpr int SB = 256;  // weights per superblock: 8 chunks of 32, 16 groups of 16

// GGML type ids (gguf GGMLQuantizationType)
enum : int { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12,
             Q5_K = 13, Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, MXFP4 = 39 };

inline float f16(const uint8_t* p) {  // F16C on every x86 tier, a native half type on aarch64
#if defined(__aarch64__)
  __fp16 h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(h);
#else
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
#endif
}

inline uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- 32-weight blocks: f16 d (and f16 m for the affine types) first, then the codes ----
// QS: offset of the 16 bytes of nibbles (low nibbles weights 0-15, high 16-31) or Q8_0's 32 int8;
// QH: offset of the 32 high bits (bit l: weight l) of the 5-bit types, -1 where there are none.
struct FQ4_0 { static constexpr int TS = 18, C = 8, LEVELS = 16, QS = 2, QH = -1; static constexpr bool sym = true; };
struct FQ4_1 { static constexpr int TS = 20, C = 0, LEVELS = 16, QS = 4, QH = -1; static constexpr bool sym = false; };
struct FQ5_0 { static constexpr int TS = 22, C = 16, LEVELS = 32, QS = 6, QH = 2; static constexpr bool sym = true; };
struct FQ5_1 { static constexpr int TS = 24, C = 0, LEVELS = 32, QS = 8, QH = 4; static constexpr bool sym = false; };
// int8 codes: AVX-512 reads them shifted to 0..255 (C = 128), AVX2 signed (its u8 x s8 products of
// 255 x 127 would saturate int16)
struct FQ8_0 { static constexpr int TS = 34, C = 128, LEVELS = 256, QS = 2, QH = -1; static constexpr bool sym = true; };
// IQ4_NL: f16 d, then 16 bytes of 4-bit indices (low nibbles weights 0-15, high 16-31) into llama.cpp's
// kvalues_iq4nl, read as 8-bit codes kvalue + 128 (C = 128: w = d * (q - 128) = d * kvalue) by AVX-512;
// AVX2 and NEON read the kvalues signed (C = 0: codebooks_avx2.h, blocks_neon.h)
struct FIQ4_NL { static constexpr int TS = 18, C = 128, LEVELS = 256, QS = 2, QH = -1; static constexpr bool sym = true; };
// MXFP4 (gpt-oss's experts): an E8M0 exponent byte e, then IQ4_NL's 16 bytes of indices into the doubled E2M1
// values (ggml's kvalues_mxfp4), read as codes value + 128 under the scale 2^(e - 128) (ggml_e8m0_to_fp32_half;
// blocks.h block_scales8); AVX2 and NEON: the values signed, as IQ4_NL's
struct FMXFP4 { static constexpr int TS = 17, C = 128, LEVELS = 256, QS = 1, QH = -1; static constexpr bool sym = true; };

// ---- k-quants: one 256-weight block per superblock ----
// Q4_K: d dmin scales[12] qs[128]: 8 groups of 32, weight 64c + l (l < 32) the low nibble of
//       qs[32c + l], 64c + 32 + l its high nibble
// Q5_K: d dmin scales[12] qh[32] qs[128]: as Q4_K, bit g of qh[l] the high bit of weight 32g + l
// Q6_K: ql[128] qh[64] scales[16] (int8) d; weight 128h + 32s + l: low 4 bits from ql[64h + 32(s&1) + l]
//       (nibble s >> 1), high 2 at bits 2s of qh[32h + l]; w = d * sc * (q - 32)
// Q2_K: scales[16] qs[64] d dmin; weight 128h + 32s + l = (qs[32h + l] >> 2s) & 3; per 16 weights
//       s = d * (sc & 15), o = -dmin * (sc >> 4)
// Q3_K: hmask[32] qs[64] scales[12] d; q = low2 (as Q2_K) | bit j of hmask[l] << 2 for weight
//       32j + l; w = d * sc * (q - 4)
struct FQ2_K { static constexpr int TS = 84, C = 0, LEVELS = 0, QS = 16, D = 80; static constexpr bool sym = false; };
struct FQ3_K { static constexpr int TS = 110, C = 4, LEVELS = 0, HM = 0, QS = 32, SC = 96, D = 108; static constexpr bool sym = true; };
struct FQ4_K { static constexpr int TS = 144, C = 0, LEVELS = 16, QS = 16; static constexpr bool sym = false; };
struct FQ5_K { static constexpr int TS = 176, C = 0, LEVELS = 32, QH = 16, QS = 48; static constexpr bool sym = false; };
// IQ4_XS: d scales_h (u16) scales_l[4] qs[128]: 8 groups of 32, group j's 6-bit ls nibble j of scales_l
//        (low first) | bits 2j of scales_h << 4, w = d * (ls - 32) * kvalue; qs as IQ4_NL's per group
//        (16 bytes at 8 + 16j); codes as IQ4_NL's
struct FIQ4_XS { static constexpr int TS = 136, C = 128, LEVELS = 256, QS = 8; static constexpr bool sym = true; };
struct FQ6_K { static constexpr int TS = 210, C = 32, LEVELS = 0, QL = 0, QH = 128, SC = 192, D = 208; static constexpr bool sym = true; };

// Q4_K/Q5_K's 12 scale bytes (after d, dmin) -> 8 six-bit scales and 8 mins, one byte each (ggml's
// get_scale_min_k4 for all 8 groups; the high bits are packed in bytes 8..11)
inline void k4_scale_bytes(const uint8_t* b, uint64_t& sc, uint64_t& mn) {
  const uint32_t a0 = u32(b + 4), a1 = u32(b + 8), a2 = u32(b + 12);
  sc = (a0 & 0x3F3F3F3Fu) | static_cast<uint64_t>((a2 & 0x0F0F0F0Fu) | (((a0 >> 6) & 0x03030303u) << 4)) << 32;
  mn = (a1 & 0x3F3F3F3Fu) | static_cast<uint64_t>(((a2 >> 4) & 0x0F0F0F0Fu) | (((a1 >> 6) & 0x03030303u) << 4)) << 32;
}

// Q3_K's 12 scale bytes -> 16 signed scales (six bits, minus 32): low nibbles in bytes 0..7, high
// 2-bit pairs in 8..11
inline void q3k_scales(const uint8_t* x, float* sc) {
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? (x[j] & 0x0F) : (x[j - 8] >> 4);
    const int hi = (x[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    sc[j] = static_cast<float>(static_cast<int8_t>(lo | (hi << 4)) - 32);
  }
}

inline bool is_k_quant(int qtype) {
  return qtype == Q2_K || qtype == Q3_K || qtype == Q4_K || qtype == Q5_K || qtype == Q6_K || qtype == IQ4_XS;
}

inline bool is_paired(int qtype) {
  return qtype == Q4_0 || qtype == Q4_1 || qtype == Q5_0 || qtype == Q5_1 || qtype == Q8_0 || qtype == IQ4_NL ||
         qtype == MXFP4;
}

inline int64_t blocks_per_row(int qtype, int64_t K) { return is_k_quant(qtype) ? K / SB : K / 32; }

}  // namespace
