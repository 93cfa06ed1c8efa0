// Prefill matmuls without AMX on AVX512-BF16 (vdpbf16ps), y[M, N] = x[M, K] @ W.T: W is expanded to
// bf16 one 32-row panel at a time (as gemm_bf16.h does for the tiles), laid out so one vector holds
// 16 output features x 2 consecutive k, and every activation row (rounded to bf16) passes the panel
// before the next one is expanded. No epilogue: the weights' scales are in the expanded values and
// the f32 sums are the products' (bf16 x bf16 is exact in f32).
//
// Why bf16 here and not the int8 GEMM (gemm_vnni.h) that a prefill's rows could take at twice the
// peak: measured on Zen 4, the int8 loop runs ~60% of its peak (4 vector ops per 32-wide scale group
// turn its int32 sums into f32) against ~90% here, so the two are within ~1.3x of each other, and
// with 8-bit activations the prefill's logits drifted from the f32 reference as far as llama.cpp's
// (SmolLM2-135M mean KL 1.01x llama.cpp's, tests/models/test_fidelity.py's bound is 1.0x) where bf16
// activations hold it at ~0.3x. So prefill-sized matmuls (gemm_min_rows on) run here, batches of
// fewer rows on the int8 GEMM, as the AMX tier splits them between bf16 and int8 tiles.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "gemm_bf16.h"  // transpose16
#include "simd.h"

namespace {

constexpr int64_t DP_PANEL = 32;  // output features per panel: two vectors of 16
constexpr int DP_MR = 12;  // activation rows per register block: 24 f32 accumulators

bool avx512_bf16_usable() {  // vdpbf16ps and vcvtne2ps2bf16 (Cooper Lake, Sapphire Rapids, Zen 4 on)
  static const bool ok = [] {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    return ((a >> 5) & 1) != 0;
  }();
  return ok;
}

// 16 rows of bf16 weights (row stride ld) -> half h of a panel: panel[64 p + 32 h + 2 i + t] = row i's
// value 2 p + t (per 32 k a 16 x 16 transpose of u32 pairs)
inline void dp_half(const uint16_t* rows, int64_t ld, int64_t K, int h, uint16_t* panel) {
  __m512i r[16];
  for (int64_t c = 0; c < K / 32; ++c) {
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(rows + i * ld + 32 * c);
    transpose16(r);  // r[j] = pair 16 c + j of the 16 rows
    for (int j = 0; j < 16; ++j) _mm512_store_si512(panel + 64 * (16 * c + j) + 32 * h, r[j]);
  }
}

// y[m][n0 + 0..31] for MR rows of bf16 x (row stride ldx) over the whole panel; c0, c1 mask the features
template <int MR>
void dp_block(const uint16_t* panel, int64_t K, const uint16_t* x, int64_t ldx, float* y, int64_t ldy,
              __mmask16 c0, __mmask16 c1) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < K / 2; ++p) {
    const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(panel + 64 * p));
    const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(panel + 64 * p + 32));
    for (int r = 0; r < MR; ++r) {
      int32_t v;
      std::memcpy(&v, x + r * ldx + 2 * p, 4);
      const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(v));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, xb);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, xb);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, c0, acc[r][0]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, c1, acc[r][1]);
  }
}

template <int MR>
void dp_tail(const uint16_t* panel, int64_t K, const uint16_t* x, int64_t ldx, float* y, int64_t ldy, int64_t rows,
             __mmask16 c0, __mmask16 c1) {
  if constexpr (MR > 0) {
    if (rows == MR) return dp_block<MR>(panel, K, x, ldx, y, ldy, c0, c1);
    dp_tail<MR - 1>(panel, K, x, ldx, y, ldy, rows, c0, c1);
  }
}

// Rows m0 .. m1 of x through one panel: blocks of DP_MR rows, then the tail
inline void dp_rows(const uint16_t* panel, int64_t K, const uint16_t* x, int64_t ldx, int64_t m0, int64_t m1,
                    float* y, int64_t ldy, int64_t cols) {
  const __mmask16 c0 = tail_mask(cols), c1 = tail_mask(std::max<int64_t>(0, cols - 16));
  int64_t m = m0;
  for (; m + DP_MR <= m1; m += DP_MR) dp_block<DP_MR>(panel, K, x + m * ldx, ldx, y + m * ldy, ldy, c0, c1);
  if (m < m1) dp_tail<DP_MR - 1>(panel, K, x + m * ldx, ldx, y + m * ldy, ldy, m1 - m, c0, c1);
}

// f32 rows (row stride ldx) -> bf16 rows [M][K], rounded to nearest even, on every thread of the call
inline void to_bf16_rows(const float* x, int64_t M, int64_t K, int64_t ldx, uint16_t* out) {
#pragma omp parallel for schedule(static) if (M >= 64)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < K; i += 32) {
      const __m512 lo = _mm512_loadu_ps(x + m * ldx + i), hi = _mm512_loadu_ps(x + m * ldx + i + 16);
      _mm512_storeu_si512(out + m * K + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
}

}  // namespace
