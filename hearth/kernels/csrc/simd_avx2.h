// The 8-float vector of the avx2 tier (vf8 = one __m256) and the few operations the shared kernels
// (decode_library.h, attention_pages.h) are written against; simd_neon.h gives the same names on
// aarch64. All inline: the avx2 build compiles to the intrinsics it used before the split.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace {

using vf8 = __m256;

inline vf8 vset1(float x) { return _mm256_set1_ps(x); }
inline vf8 vzero() { return _mm256_setzero_ps(); }
inline vf8 vadd(vf8 a, vf8 b) { return _mm256_add_ps(a, b); }
inline vf8 vsub(vf8 a, vf8 b) { return _mm256_sub_ps(a, b); }
inline vf8 vmul(vf8 a, vf8 b) { return _mm256_mul_ps(a, b); }
inline vf8 vdiv(vf8 a, vf8 b) { return _mm256_div_ps(a, b); }
inline vf8 vmax(vf8 a, vf8 b) { return _mm256_max_ps(a, b); }
inline vf8 vmin(vf8 a, vf8 b) { return _mm256_min_ps(a, b); }
inline vf8 vfma(vf8 a, vf8 b, vf8 c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c, one rounding
inline vf8 vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vf8 v) { _mm256_storeu_ps(p, v); }
inline void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

inline __m256i tail_mask8(int64_t n) {  // lanes < n set (n clamped to 0..8)
  const int k = static_cast<int>(n < 0 ? 0 : n > 8 ? 8 : n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline vf8 load8(const float* p, int64_t n) {  // the first min(n, 8) floats, zeros after
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask8(n));
}

inline void store8(float* p, vf8 v, int64_t n) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, tail_mask8(n), v);
}

inline vf8 keep_first(vf8 v, int64_t n) { return _mm256_and_ps(v, _mm256_castsi256_ps(tail_mask8(n))); }  // lanes >= n: 0
inline vf8 keep_where_gt(vf8 v, vf8 x, vf8 lim) { return _mm256_and_ps(v, _mm256_cmp_ps(x, lim, _CMP_GT_OQ)); }  // x > lim, else 0
inline vf8 max_first(vf8 old, vf8 v, int64_t n) {  // max(old, v) in lanes < n, old after
  return _mm256_blendv_ps(old, _mm256_max_ps(old, v), _mm256_castsi256_ps(tail_mask8(n)));
}

// e^x for |x| < 88: 2^n * e^r with |r| <= ln2 / 2, degree-6 polynomial (cephes' expf scheme, as simd.h),
// 2^n built in the exponent bits (n >= -126 here: no subnormal results)
inline vf8 exp_ps(vf8 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline float hsum(vf8 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// [sum(v[0]), ..., sum(v[7])]: 8 horizontal sums in 6 hadds, 2 permutes and an add
inline vf8 sum8(const vf8* v) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

template <bool BF16>
inline vf8 load_half(const uint8_t* p) {  // 8 f16 or bf16 values -> f32
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

inline __m128i to_bf16(vf8 v) {  // round to nearest even, like torch's .to(torch.bfloat16)
  const __m256i u = _mm256_castps_si256(v);
  const __m256i r = _mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7FFF));
  const __m256i h = _mm256_srli_epi32(_mm256_add_epi32(u, r), 16);
  return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

inline __m128i to_half(vf8 v, bool bf16) {  // 8 values -> f16 or bf16, rounded to nearest even
  return bf16 ? to_bf16(v) : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

inline void store_half(uint16_t* p, vf8 v, bool bf16) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_half(v, bf16)); }

inline uint16_t half_of(float x, bool bf16) {  // one value, rounded as store_half
  return static_cast<uint16_t>(_mm_extract_epi16(to_half(_mm256_set1_ps(x), bf16), 0));
}

}  // namespace
