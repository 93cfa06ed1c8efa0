// Small AVX-512 helpers shared by the kernels: tail masks and a vectorized exp.
#pragma once

#include <immintrin.h>

#include <cmath>

#include <cstdint>

namespace {

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1); }

// e^x for |x| < 88: 2^n * e^r with |r| <= ln2 / 2, degree-6 polynomial (~2 ulp; cephes' expf scheme)
inline __m512 exp_ps(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.0f)), _mm512_set1_ps(-88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// 2^t for t in [-126, 127]: 2^n p(t - n), p of degree 4 (relative error 4e-5): for values that are
// then rounded to bf16 (2^-9), in 8 vector ops where exp_ps takes 15. Outside that range scalef
// gives 0 / inf or, below, a subnormal (a microcode assist per use): callers clamp.
inline __m512 exp2_bf16(__m512 t) {
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT), f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.00961813f), f, _mm512_set1_ps(0.0555041f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.240227f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.693147f));
  return _mm512_scalef_ps(_mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f)), n);
}

// 1 / sqrt(mean(x^2) + eps) over n values: an RMSNorm's scale. Four sums: one chain of FMAs would
// wait out each one's latency.
inline float inv_rms(const float* x, int64_t n, float eps) {
  __m512 ss[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
    ss[(i / 16) % 4] = _mm512_fmadd_ps(v, v, ss[(i / 16) % 4]);
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(ss[0], ss[1]), _mm512_add_ps(ss[2], ss[3])));
  return 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
}

}  // namespace
