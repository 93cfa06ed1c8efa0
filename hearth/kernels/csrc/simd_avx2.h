// Small AVX2 helpers shared by the avx2 tier's kernels: tail loads, a vectorized exp, RMS.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace {

inline __m256i tail_mask8(int64_t n) {  // lanes < n set (n clamped to 0..8)
  const int k = static_cast<int>(n < 0 ? 0 : n > 8 ? 8 : n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 load8(const float* p, int64_t n) {  // the first min(n, 8) floats, zeros after
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask8(n));
}

inline void store8(float* p, __m256 v, int64_t n) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, tail_mask8(n), v);
}

// e^x for |x| < 88: 2^n * e^r with |r| <= ln2 / 2, degree-6 polynomial (cephes' expf scheme, as simd.h),
// 2^n built in the exponent bits (n >= -126 here: no subnormal results)
inline __m256 exp_ps(__m256 x) {
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

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// 1 / sqrt(mean(x^2) + eps) over n values: an RMSNorm's scale (two sums: one FMA chain waits on latency)
inline float inv_rms(const float* x, int64_t n, float eps) {
  __m256 ss[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v = load8(x + i, n - i);
    ss[(i / 8) % 2] = _mm256_fmadd_ps(v, v, ss[(i / 8) % 2]);
  }
  return 1.0f / std::sqrt(hsum(_mm256_add_ps(ss[0], ss[1])) / static_cast<float>(n) + eps);
}

}  // namespace
